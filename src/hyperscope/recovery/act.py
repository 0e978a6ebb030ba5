"""How the agent applies its decisions (``recovery.agent``'s loop decides; this acts): a job's
requeue or stop now; a node's fence and spare swap now, then its reboot or re-creation on a thread
of its own under no lock (the result merged into the state at the end), or a ticket; and the lift
of the holds Slurm puts on requeued jobs, so a job runs again within about a second of its nodes
being ready instead of after ``cred_expire``."""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any

from hyperscope.cluster import nodeops
from hyperscope.cluster.operate import Outcome, open_ticket
from hyperscope.cluster.slurm import Job, Slurm, SlurmError
from hyperscope.cluster.state import ClusterError, ClusterState, update_running, updating_now
from hyperscope.errors import HyperscopeError
from hyperscope.recovery import spares
from hyperscope.recovery.decide import Action, Kind

if TYPE_CHECKING:
    from hyperscope.recovery.agent import Agent

#: after a node comes back, how long its "not responding" flag is ignored (notes: idle* for ~1 s)
SETTLE_S = 10.0


def apply(self: Agent, action: Action) -> None:
    """Job actions and the quick part of a node action (fence, spare swap) run now; a node's
    restart or re-creation runs on its own thread, so the loop goes on lifting requeued jobs'
    holds meanwhile and other nodes recover at the same time."""
    base = {"kind": action.kind.value, "nodes": list(action.nodes), "job": action.job}
    self.log({**base, "phase": "decided", "reason": action.reason})
    t0 = self.clock()
    try:
        if action.job is not None:
            _job_action(self, action)
        else:
            self.acting.add(action.nodes[0])
            try:
                _fence(self, action)
            except BaseException:
                self.acting.discard(action.nodes[0])
                raise
            worker = threading.Thread(target=_finish, args=(self, action, base, t0), daemon=True)
            self.workers.append(worker)
            worker.start()
            return
    except (ClusterError, SlurmError, OSError) as exc:
        self.log({**base, "phase": "failed", "error": str(exc), "seconds": round(self.clock() - t0, 3)})
        return
    self.log({**base, "phase": "done", "seconds": round(self.clock() - t0, 3)})


def _job_action(self: Agent, action: Action) -> None:
    slurm = self._ops(self._state()).slurm()
    assert action.job is not None
    if action.kind is Kind.REQUEUE:
        slurm.run("scontrol", "requeue", action.job)
    else:  # STOP: say why where `scontrol show job` shows it, then cancel
        slurm.run("scontrol", "update", f"jobid={action.job}", f"comment=hyperscope: {action.reason}"[:250])
        slurm.run("scancel", action.job)


def _fence(self: Agent, action: Action) -> None:
    """Mark the node as being worked on, take it out of service (its jobs requeue now) and
    swap the spare in."""
    with self._update() as state:
        node = state.node(action.nodes[0])
        if taken := {node.name, *action.nodes[1:]} & updating_now(state):
            # published by a `cluster update` since this pass looked: the update's, not ours
            raise ClusterError(f"{', '.join(sorted(taken))}: a cluster update acts on it; left to it")
        slurm = self._ops(state).slurm()
        replacing = action.kind is Kind.REPLACE
        node.status = "Replacing" if replacing else "Rebooting"
        node.since, node.last_action = self.clock(), str(action)
        state.status = "Updating"
        try:
            verb = "replacing" if replacing else "rebooting"
            nodeops.fence(slurm, node.name, f"hyperscope agent: {verb}: {action.reason}")
            if replacing and len(action.nodes) > 1 and not spares.late(self._ops(state), action):
                nodeops.swap_in(slurm, state, node, state.node(action.nodes[1]))
        except (ClusterError, SlurmError, OSError) as exc:
            node.status, node.since = "Failed", self.clock()
            node.last_action = f"{action}; failed: {exc}"
            state.status = _settled(state)
            state.save()
            raise


def _finish(self: Agent, action: Action, base: dict[str, Any], t0: float) -> None:
    """The slow part, on this node's thread and under no lock: the provider reboots or
    re-creates the node on a copy of the state; the result is merged in at the end."""
    name = action.nodes[0]
    error, outcome = "", Outcome()
    try:
        state = ClusterState.load(self.dir)
        ops = self._ops(state)
        node = state.node(name)
        if spares.late(ops, action):  # the spec's spare script first, then the swap (recovery.spares)
            spares.prepare_and_swap(self, ops, action)
        if action.kind is Kind.REBOOT:
            self.reboots[name] = self.reboots.get(name, 0) + 1
            outcome = ops.reboot(node, action.reason)
        else:
            outcome = ops.recreate(node, action.reason)
    except (HyperscopeError, SlurmError, OSError) as exc:
        error = str(exc)
    ticket_note = ""
    try:
        with self._update() as state:
            node = state.node(name)
            if error:
                node.status, node.last_action = "Failed", f"{action}; failed: {error}"
            elif outcome.ticket:
                node.status = "NeedsHardware"
                node.last_action = f"{action}; ticket: {outcome.ticket}"
            else:
                _record(state, outcome)
                node.status = "Running"
                if action.kind is Kind.REPLACE:
                    node.replacements += 1
                    self.reboots.pop(name, None)
            node.since = self.clock()
            self.settling[name] = self.clock() + SETTLE_S
            state.status = _settled(state)
            ticketed = node if outcome.ticket and not error else None
        if ticketed is not None:
            ticket_note = _ticket(self, state, ticketed, outcome.ticket)
    finally:
        self.acting.discard(name)
    if ticket_note:
        record = {"kind": "ticket", "nodes": [name], "job": None, "phase": "opened"}
        self.log({**record, "reason": outcome.ticket, "hook": ticket_note})
    outcome_log = {"phase": "failed", "error": error} if error else {"phase": "done"}
    if outcome.ticket and not error:
        outcome_log = {"phase": "ticket", "reason": outcome.ticket}
    self.log({**base, **outcome_log, "seconds": round(self.clock() - t0, 3)})


def _ticket(self: Agent, state: ClusterState, node: Any, why: str) -> str:
    """The node stays out of service, with the ticket as Slurm's reason; the spec's hook."""
    slurm = self._ops(state).slurm()
    reason = f"hyperscope agent: needs hardware (ticket): {why}"[:200]
    argv = ("scontrol", "update", f"nodename={node.name}", "state=down", f"reason={reason}")
    slurm.run(*argv, check=False)
    return open_ticket(self.recovery(state), state, node, why)


def release_requeued(self: Agent, slurm: Slurm, jobs: list[Job]) -> None:
    """A requeued job waits ``cred_expire`` s (Reason=BeginTime) for nothing: start it now."""
    now = self.clock()
    for job in jobs:
        key = (job.id, job.restarts)
        if job.state == "PENDING" and _held_after_failed_launch(job.reason):
            _release_held(self, slurm, job)
            continue
        if job.state != "PENDING" or job.restarts == 0 or job.reason != "BeginTime" or key in self.released:
            continue
        # The requeue revoked the job's credentials as of its second: a launch in that same
        # second is refused ("Job credential revoked") and the job fails. Start it only in a
        # later second than the one it was first seen pending in.
        seen = self.pending_since.setdefault(key, now)
        if now < math.floor(seen) + 1.05:
            continue
        done = slurm.run("scontrol", "update", f"jobid={job.id}", "StartTime=now", check=False)
        if done.returncode == 0:
            self.released.add(key)
            why = f"requeued (restart {job.restarts}): post-requeue hold lifted"
            self.log({"kind": "release", "job": str(job.id), "phase": "done", "reason": why})


def _release_held(self: Agent, slurm: Slurm, job: Job) -> None:
    """Slurm holds a batch job whose launch failed (its Prolog, the quick health check, found a
    sick node and drained it) until someone releases it; the node is out of the partition by
    then, so the job can start on healthy ones. Once per restart."""
    key = (job.id, -1 - job.restarts)
    if key in self.released:
        return
    done = slurm.run("scontrol", "release", str(job.id), check=False)
    if done.returncode == 0:
        self.released.add(key)
        why = "held by Slurm after a failed launch (a node failed its prolog health check): released"
        self.log({"kind": "release", "job": str(job.id), "phase": "done", "reason": why})


def _held_after_failed_launch(reason: str) -> bool:
    """``launch failed requeued held``, as squeue or ``scontrol show job`` spell it."""
    return reason.replace("_", " ").strip().lower() == "launch failed requeued held"


def _settled(state: ClusterState) -> Any:
    """Updating while a node is being worked on or a ``cluster update`` runs, InService once
    neither is."""
    busy = any(n.status in ("Replacing", "Rebooting") for n in state.nodes)
    return "Updating" if busy or update_running(state) else "InService"


def _record(state: ClusterState, outcome: Outcome) -> None:
    """The node's new daemons replace the ones recorded in the same role, on the same node and host."""
    new = {(p.role, p.node, p.host) for p in outcome.procs}
    state.procs = [p for p in state.procs if (p.role, p.node, p.host) not in new] + outcome.procs
