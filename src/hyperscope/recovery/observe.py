"""What the agent sees in one pass (``recovery.agent``'s loop; :mod:`hyperscope.recovery.decide`
decides on it): the nodes that may need a decision, as :class:`NodeView` (with the agent's own
memory of each: reboots made, a node just back and settling, how long it has been silent), and the
running jobs that may have hung, as :class:`JobView`.

Apart from the loop because this is where a pass stays cheap at 1,000 nodes: a node Slurm reports in
plain service, whose slurmd the provider sees alive, is skipped on one substring test of its
``scontrol show node -o`` line, never parsed; and a job's heartbeat files are read only once it may
have hung (no beat within its hang timeout), so the cost does not grow with the heartbeat files.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from hyperscope.cluster import jobs as catalog_jobs
from hyperscope.cluster.operate import NodeOperator
from hyperscope.cluster.slurm import Job, Node, parse_show_node
from hyperscope.cluster.state import ClusterState, updating_now
from hyperscope.recovery import act, heartbeat
from hyperscope.recovery.decide import JobView, NodeView

if TYPE_CHECKING:
    from hyperscope.recovery.agent import Agent

#: a job not beating yet (still starting) has its heartbeat files looked for this often
UNSEEN_RECHECK_S = 5.0
#: ``scontrol show node -o`` lines of a node in plain service; such a node is not parsed further
_HEALTHY = (" State=IDLE ", " State=ALLOCATED ", " State=MIXED ")


def nodes_of_interest(self: Agent, state: ClusterState, ops: NodeOperator, shown: str) -> list[Node]:
    """The nodes of ``scontrol show node -o`` that may need a decision: all but those in plain
    service (up, no flag, no reason) whose slurmd the provider sees alive and that the agent
    has no business with (spares, a node it rebooted or opened a ticket for)."""
    ours = {n.name: n for n in state.nodes}
    watched = set(self.reboots) | set(self.settling)
    out: list[Node] = []
    for line in shown.splitlines():
        if not line.startswith("NodeName="):
            continue
        name = line[9 : line.find(" ")]
        n = ours.get(name)
        if n is None or not n.slurm:
            continue
        plain = "Reason=" not in line and any(h in line for h in _HEALTHY)
        quiet = plain and not n.spare and n.status == "Running" and name not in watched
        if quiet and ops.daemon_alive(n):
            self.silent_since.pop(name, None)
            continue
        out.extend(parse_show_node(line))
    return out


def node_views(self: Agent, state: ClusterState, live: list[Node], ops: NodeOperator) -> list[NodeView]:
    by_name = {n.name: n for n in live}
    views = []
    updated = updating_now(state)  # drained, restarted or made by a `cluster update`: its own
    for back in self.was_updating - updated:  # just handed back, its slurmd new: as after ours
        self.settling[back] = self.clock() + act.SETTLE_S
    self.was_updating = updated
    for n in state.nodes:
        s = by_name.get(n.name)
        if s is None or n.name in self.acting or n.name in updated:
            continue
        if n.status == "NeedsHardware" and s.available:
            _ticket_closed(self, n.name, s)
            continue
        if n.status in ("Failed", "Replacing", "Rebooting", "NeedsHardware"):
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
        else:
            self.settling.pop(n.name, None)
        views.append(
            NodeView(
                name=n.name,
                group=n.group,
                state=s.state,
                flags=flags,
                reason=s.reason,
                spare=n.spare,
                reboots=self.reboots.get(n.name, 0),
                daemon_alive=ops.daemon_alive(n),
                not_responding_s=self.clock() - self.silent_since.get(n.name, self.clock()),
            )
        )
    return views


def _ticket_closed(self: Agent, node: str, live: Node) -> None:
    """An operator repaired the node and resumed it: it is ours to watch again."""
    with self._update() as state:
        n = state.node(node)
        n.status, n.since = "Running", self.clock()
        n.last_action = f"ticket closed: back in service ({live.display_state})"
    why = "back in service after its ticket (an operator resumed it)"
    self.log({"kind": "ticket", "nodes": [node], "job": None, "phase": "closed", "reason": why})


def job_views(self: Agent, state: ClusterState, jobs: list[Job]) -> list[JobView]:
    """Running jobs that may have hung. A job that beat within its hang timeout cannot have,
    so its files are not read again until that much time has passed since its last beat."""
    now = self.clock()
    directory = catalog_jobs.heartbeat_dir(state)
    views = []
    running = set()
    for job in jobs:
        if job.state != "RUNNING":
            continue
        jid = str(job.id)
        running.add(jid)
        # this attempt's start: Slurm's StartTime (only RUNNING's is the attempt's own), not when
        # this agent first saw it: a plain-sbatch job is seen up to a calm pass late, and a
        # restarted agent late by its downtime; a job that hung meanwhile was never watched
        started = catalog_jobs.slurm_time_ns(job.fields.get("StartTime", ""))
        first = self.running_since.setdefault(
            (job.id, job.restarts), now if started is None else min(now, started / 1e9)
        )
        newest = self.beat_at.get(jid)
        due = (
            now - self.beat_read.get(jid, -math.inf) >= UNSEEN_RECHECK_S
            if newest is None or newest < first
            else now - newest > self.policy.hang_timeout_s
        )
        if due:
            self.beat_read[jid] = now
            tasks = job.fields.get("NumTasks", "")
            found = heartbeat.newest(directory, jid, int(tasks) if tasks.isdigit() else 0)
            if found is not None:
                newest = self.beat_at[jid] = found
        # watched from its first beat of this attempt on: one still starting (importing torch,
        # loading its checkpoint) is not hung, and the beats of the attempt before are stale
        if newest is None or newest < first:
            continue
        nodes = tuple(job.nodes.split(",")) if job.nodes else ()
        views.append(JobView(jid, nodes, now - newest, job.restarts))
    for gone in set(self.beat_at) - running:
        self.beat_at.pop(gone, None)
        self.beat_read.pop(gone, None)
    return views
