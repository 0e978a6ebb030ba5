"""The recovery agent (``hyperscope agent``): once a second it reads what Slurm says of the nodes
and jobs, what the provider sees of each node's slurmd, and the jobs' progress heartbeats; asks
:mod:`hyperscope.recovery.decide` what to do; and applies each decision through the provider.

Every decision is appended, with its reason and then its outcome, as one JSON line to
``<cluster dir>/agent.log`` and recorded on the node (``list-nodes`` shows it). The agent also
lifts Slurm's post-requeue hold (``StartTime=now``) from requeued jobs, so a job is running again
within about a second of its nodes being ready instead of after ``cred_expire``.

It acts only on local clusters (the only provider whose nodes it can restart or re-create). State
changes happen under the cluster's lock, so ``delete`` never races a replacement.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hyperscope.cluster import jobs as catalog_jobs
from hyperscope.cluster import nodeops
from hyperscope.cluster.local import LocalProvider
from hyperscope.cluster.slurm import Job, Node, Slurm, SlurmError
from hyperscope.cluster.state import (
    ClusterError,
    ClusterState,
    Proc,
    alive,
    cluster_lock,
    clusters_dir,
    start_time,
)
from hyperscope.errors import HyperscopeError
from hyperscope.recovery import heartbeat
from hyperscope.recovery.decide import (
    PASSIVE,
    Action,
    JobView,
    Kind,
    NodeView,
    Policy,
    decide_daemons,
    decide_jobs,
    decide_nodes,
)

LOG = "agent.log"
BUSY_INTERVAL_S = 0.2
#: a job this young is left to ``submit``'s own catalog sync (it knows the entry it reserved)
SYNC_SETTLE_S = 10.0
#: after a node comes back, how long its "not responding" flag is ignored (notes: idle* for ~1 s)
SETTLE_S = 10.0


def heartbeat_dir(state: ClusterState) -> Path:
    """Where the cluster's jobs beat (``HYPERSCOPE_HEARTBEAT_DIR``, set by ``cluster submit``)."""
    return Path(state.shared_dir) / "hyperscope" / "heartbeats"


def checkpoint_root(state: ClusterState) -> Path:
    """Under which each submitted job gets its ``HYPERSCOPE_CHECKPOINT_DIR``."""
    return Path(state.shared_dir) / "checkpoints"


def read_log(cluster_dir: Path) -> list[dict[str, Any]]:
    path = cluster_dir / LOG
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a crash mid-write
    return records


@dataclass
class Agent:
    home: Path
    name: str
    policy: Policy = field(default_factory=Policy)
    clock: Callable[[], float] = time.time
    #: reboots already made per node for its current failure (reset once it is healthy again)
    reboots: dict[str, int] = field(default_factory=dict)
    #: (job, restarts) -> when this attempt was first seen running: a new attempt is not "silent"
    #: because of the heartbeats of the one before
    running_since: dict[tuple[int, int], float] = field(default_factory=dict)
    released: set[tuple[int, int]] = field(default_factory=set)
    pending_since: dict[tuple[int, int], float] = field(default_factory=dict)
    #: node restarts and re-creations in progress
    workers: list[threading.Thread] = field(default_factory=list)
    #: a recovery under way (a job requeued or completing, a node coming back): look every
    #: BUSY_INTERVAL_S instead, so the hold is lifted soon after the requeue's second is over
    busy: bool = False
    #: node -> until when Slurm's "not responding" is not believed (it just came back)
    settling: dict[str, float] = field(default_factory=dict)
    #: node -> since when Slurm has said NOT_RESPONDING without a break (a flicker is not a failure)
    silent_since: dict[str, float] = field(default_factory=dict)
    #: when each automatic replacement started (the rate limit's window); None: not read from the log yet
    replaced_at: list[float] | None = None
    #: node -> the passive decision (wait, leave, hold) last logged for it: logged once, not every pass
    noted: dict[str, str] = field(default_factory=dict)
    #: what the jobs catalog was last synced from: (job, state, restarts) of every job Slurm knows
    synced: tuple[tuple[int, str, int], ...] | None = None

    @property
    def dir(self) -> Path:
        return clusters_dir(self.home) / self.name

    def _state(self) -> ClusterState:
        return ClusterState.load(self.dir)

    def log(self, record: dict[str, Any]) -> None:
        record = {"time": round(self.clock(), 3), **record}
        with open(self.dir / LOG, "a") as f:
            f.write(json.dumps(record) + "\n")

    # --- one pass ---------------------------------------------------------------------------------

    def tick(self) -> list[Action]:
        """Observe, decide, apply; the actions taken."""
        state = self._state()
        if state.status not in ("InService", "Updating"):
            return []
        restarts = self.supervise(state)
        slurm = Slurm(Path(state.slurm_conf))
        try:
            live = slurm.nodes()
            jobs = slurm.jobs()
        except SlurmError:
            return restarts  # slurmctld busy or restarting: the next pass sees it
        self.sync_catalog(state, slurm, jobs)
        views = self.node_views(state, live)
        actions = decide_nodes(views, {}, self.policy, recent_replacements=self.recent_replacements())
        actions += decide_jobs(self.job_views(state, jobs), self.policy)
        passive = {a.nodes[0]: str(a) for a in actions if a.kind in PASSIVE}
        for node in [n for n in self.noted if n not in passive]:
            del self.noted[node]
        for action in actions:
            if action.kind in PASSIVE:
                if self.noted.get(action.nodes[0]) != str(action):
                    self.noted[action.nodes[0]] = str(action)
                    self.log({"kind": action.kind.value, "nodes": list(action.nodes), "job": None,
                              "phase": "decided", "reason": action.reason})  # fmt: skip
                continue
            if action.kind is Kind.REPLACE and not action.reason.startswith("operator marked it"):
                assert self.replaced_at is not None
                self.replaced_at.append(self.clock())
            self.apply(action)
        self.release_requeued(slurm, jobs)
        self.busy = any(
            j.state == "COMPLETING"
            or (j.state == "PENDING" and j.restarts and (j.id, j.restarts) not in self.released)
            for j in jobs
        ) or any(w.is_alive() for w in self.workers)
        return actions

    def supervise(self, state: ClusterState) -> list[Action]:
        """The watchdog of the controller's daemons: munged or slurmctld gone is started again
        (slurmctld recovers its jobs from its saved state), so a killed slurmctld does not leave
        the cluster unable to schedule or to finish its jobs."""
        dead = [p for p in state.procs if p.role in ("munged", "slurmctld") and not alive(p)]
        if not dead or state.provider != "local":
            return []
        dead.sort(key=lambda p: p.role != "munged")
        (action,) = decide_daemons([(p.role, p.pid) for p in dead])
        base = {"kind": action.kind.value, "nodes": list(action.nodes), "job": None}
        self.log({**base, "phase": "decided", "reason": action.reason})
        t0 = self.clock()
        try:
            with cluster_lock(self.home, self.name):
                fresh = self._state()
                if fresh.status in ("InService", "Updating"):
                    LocalProvider(self.home).restart_controller(fresh)
        except (ClusterError, SlurmError, OSError) as exc:
            self.log({**base, "phase": "failed", "error": str(exc), "seconds": round(self.clock() - t0, 3)})
            return [action]
        self.log({**base, "phase": "done", "seconds": round(self.clock() - t0, 3)})
        return [action]

    def sync_catalog(self, state: ClusterState, slurm: Slurm, jobs: list[Job]) -> None:
        """Bring the jobs catalog up to date whenever a job changed state, appeared or was
        forgotten: an entry never stays InProgress because nobody ran ``describe``."""
        now_ns = int(self.clock() * 1e9)
        young = any(
            now_ns - (catalog_jobs.slurm_time_ns(j.fields.get("SubmitTime", "")) or 0) < SYNC_SETTLE_S * 1e9
            for j in jobs
        )  # synced again once they are old enough to be ours to record
        seen = tuple(sorted((j.id, j.state, j.restarts) for j in jobs))
        if seen == self.synced:
            return
        try:
            catalog_jobs.sync(state, slurm, settle_s=SYNC_SETTLE_S)
        except HyperscopeError as exc:
            self.log({"kind": "sync", "nodes": [], "job": None, "phase": "failed", "error": str(exc)})
            return
        self.synced = None if young else seen

    def register(self) -> bool:
        """Record this process as the cluster's agent (a restarted one replaces the dead one's
        record), so ``delete`` stops it and ``create`` sees the cluster whole; False when the
        cluster is gone or not in service (nothing to watch)."""
        me = start_time(os.getpid())
        with cluster_lock(self.home, self.name):
            if not (self.dir / "cluster.json").is_file():
                return False
            state = self._state()
            if state.status not in ("InService", "Updating"):
                return False
            if me is not None:
                state.procs = [p for p in state.procs if p.role != "agent"]
                state.procs.append(Proc("agent", os.getpid(), me))
                state.save()
        why = f"agent started (pid {os.getpid()})"
        self.log({"kind": "start", "nodes": [], "job": None, "phase": "done", "reason": why})
        return True

    def recent_replacements(self) -> int:
        """Automatic replacements started within the rate limit's window (an operator's own
        ``Action:Replace`` does not count); read from agent.log once, so a restarted agent
        keeps the brake."""
        now = self.clock()
        if self.replaced_at is None:
            self.replaced_at = [
                float(r["time"])
                for r in read_log(self.dir)
                if r.get("kind") == "replace"
                and r.get("phase") == "decided"
                and not str(r.get("reason", "")).startswith("operator marked it")
            ]
        window = self.policy.replacement_window_s
        self.replaced_at = [t for t in self.replaced_at if now - t < window]
        return len(self.replaced_at)

    def node_views(self, state: ClusterState, live: list[Node]) -> list[NodeView]:
        by_name = {n.name: n for n in live}
        views = []
        for n in state.nodes:
            s = by_name.get(n.name)
            if not n.slurm or s is None or n.status in ("Failed", "Replacing", "Rebooting"):
                continue
            if s.available and not s.reason:
                self.reboots.pop(n.name, None)
            flags = s.flags
            if "NOT_RESPONDING" in flags:
                self.silent_since.setdefault(n.name, self.clock())
            else:
                self.silent_since.pop(n.name, None)
            if self.clock() < self.settling.get(n.name, 0.0):
                # just restarted: Slurm shows it not responding (idle*) for a second or so after
                # `state=resume`; its own slurmd is watched meanwhile (daemon_alive)
                flags = tuple(f for f in flags if f != "NOT_RESPONDING")
            views.append(
                NodeView(
                    name=n.name,
                    group=n.group,
                    state=s.state,
                    flags=flags,
                    reason=s.reason,
                    spare=n.spare,
                    reboots=self.reboots.get(n.name, 0),
                    daemon_alive=nodeops.slurmd_alive(state, n.name),
                    not_responding_s=self.clock() - self.silent_since.get(n.name, self.clock()),
                )
            )
        return views

    def job_views(self, state: ClusterState, jobs: list[Job]) -> list[JobView]:
        now = self.clock()
        beats: dict[str, float] = {}
        for s in heartbeat.read(heartbeat_dir(state), now_ns=int(now * 1e9)):
            beats[s.job] = min(beats.get(s.job, s.silent_s), s.silent_s)
        views = []
        for job in jobs:
            if job.state != "RUNNING":
                continue
            first = self.running_since.setdefault((job.id, job.restarts), now)
            silent = beats.get(str(job.id))
            # watched from its first beat of this attempt on: one still starting (importing torch,
            # loading its checkpoint) is not hung, and the beats of the attempt before are stale
            if silent is None or now - silent < first:
                continue
            nodes = tuple(job.nodes.split(",")) if job.nodes else ()
            views.append(JobView(str(job.id), nodes, silent, job.restarts))
        return views

    # --- applying ---------------------------------------------------------------------------------

    def apply(self, action: Action) -> None:
        """Job actions and the quick part of a node action (fence, spare swap) run now; a node's
        restart or re-creation runs on a thread, so the loop goes on lifting requeued jobs' holds
        meanwhile (the job need not wait for the failed node to come back)."""
        base = {"kind": action.kind.value, "nodes": list(action.nodes), "job": action.job}
        self.log({**base, "phase": "decided", "reason": action.reason})
        t0 = self.clock()
        try:
            if action.job is not None:
                self._job_action(action)
            else:
                self._fence(action)
                worker = threading.Thread(target=self._finish, args=(action, base, t0), daemon=True)
                self.workers.append(worker)
                worker.start()
                return
        except (ClusterError, SlurmError, OSError) as exc:
            self.log({**base, "phase": "failed", "error": str(exc), "seconds": round(self.clock() - t0, 3)})
            return
        self.log({**base, "phase": "done", "seconds": round(self.clock() - t0, 3)})

    def _job_action(self, action: Action) -> None:
        state = self._state()
        slurm = Slurm(Path(state.slurm_conf))
        assert action.job is not None
        if action.kind is Kind.REQUEUE:
            slurm.run("scontrol", "requeue", action.job)
        else:  # STOP: say why where `scontrol show job` shows it, then cancel
            slurm.run(
                "scontrol", "update", f"jobid={action.job}", f"comment=hyperscope: {action.reason}"[:250]
            )
            slurm.run("scancel", action.job)

    def _fence(self, action: Action) -> None:
        """Mark the node as being worked on, take it out of service (its jobs requeue now) and
        swap the spare in."""
        with cluster_lock(self.home, self.name):
            state = self._state()
            if state.provider != "local":
                raise ClusterError(f"the agent cannot {action.kind} nodes of a {state.provider} cluster")
            node = state.node(action.nodes[0])
            slurm = Slurm(Path(state.slurm_conf))
            replacing = action.kind is Kind.REPLACE
            node.status = "Replacing" if replacing else "Rebooting"
            node.since, node.last_action = self.clock(), str(action)
            state.status = "Updating"
            state.save()
            try:
                verb = "replacing" if replacing else "rebooting"
                nodeops.fence(slurm, node.name, f"hyperscope agent: {verb}: {action.reason}")
                if replacing and len(action.nodes) > 1:
                    nodeops.swap_in(slurm, state, node, state.node(action.nodes[1]))
            except (ClusterError, SlurmError, OSError) as exc:
                node.status, node.since = "Failed", self.clock()
                node.last_action = f"{action}; failed: {exc}"
                state.status = "InService"
                raise
            finally:
                state.save()

    def _finish(self, action: Action, base: dict[str, Any], t0: float) -> None:
        provider = LocalProvider(self.home)
        error = ""
        with cluster_lock(self.home, self.name):
            state = self._state()
            node = state.node(action.nodes[0])
            try:
                if action.kind is Kind.REBOOT:
                    self.reboots[node.name] = self.reboots.get(node.name, 0) + 1
                    nodeops.reboot(provider, state, node, action.reason)
                else:
                    nodeops.recreate(provider, state, node)
                    node.replacements += 1
                    self.reboots.pop(node.name, None)
                node.status = "Running"
            except (ClusterError, SlurmError, OSError) as exc:
                error = str(exc)
                node.status, node.last_action = "Failed", f"{action}; failed: {exc}"
            node.since = self.clock()
            self.settling[node.name] = self.clock() + SETTLE_S
            if not any(n.status in ("Replacing", "Rebooting") for n in state.nodes):
                state.status = "InService"
            state.save()
        outcome = {"phase": "failed", "error": error} if error else {"phase": "done"}
        self.log({**base, **outcome, "seconds": round(self.clock() - t0, 3)})

    def release_requeued(self, slurm: Slurm, jobs: list[Job]) -> None:
        """A requeued job waits ``cred_expire`` s (Reason=BeginTime) for nothing: start it now."""
        now = self.clock()
        for job in jobs:
            key = (job.id, job.restarts)
            if job.state == "PENDING" and _held_after_failed_launch(job.reason):
                self._release_held(slurm, job)
                continue
            if (
                job.state != "PENDING"
                or job.restarts == 0
                or job.reason != "BeginTime"
                or key in self.released
            ):
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

    def _release_held(self, slurm: Slurm, job: Job) -> None:
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

    def run(self, interval: float = 1.0, *, passes: int | None = None) -> None:
        """Loop until the cluster is gone (or ``passes`` passes, for tests). One agent per
        cluster: a second one (a watchdog's restart racing another) exits at once."""
        with _single(self.dir / "agent.lock") as first:
            if not first:
                return
            if self.register():
                self._loop(interval, passes)

    def _loop(self, interval: float, passes: int | None) -> None:
        n = 0
        while passes is None or n < passes:
            if not (self.dir / "cluster.json").is_file():
                return
            try:
                self.tick()
            except (ClusterError, OSError) as exc:
                self.log({"kind": "error", "phase": "failed", "error": str(exc)})
            n += 1
            time.sleep(min(interval, BUSY_INTERVAL_S) if self.busy else interval)


@contextlib.contextmanager
def _single(path: Path) -> Iterator[bool]:
    """An exclusive lock held for the agent's life: True when this process got it."""
    try:
        f = open(path, "a")  # noqa: SIM115 - held open for as long as the agent runs
    except OSError:
        yield True
        return
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True


def _held_after_failed_launch(reason: str) -> bool:
    """``launch failed requeued held``, as squeue or ``scontrol show job`` spell it."""
    return reason.replace("_", " ").strip().lower() == "launch failed requeued held"
