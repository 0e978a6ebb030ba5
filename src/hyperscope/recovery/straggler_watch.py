"""The agent's straggler watch: each pass, every running job's ranks' step times (heartbeats)
shown to the tracker (``recovery.stragglers``, pure); a rank it names is written to agent.log and
its node's ``straggler`` (``list-nodes``), captured beside a median rank under the ``profile``
policy (``hyperscope capture``'s library, on a thread), its node replaced under the ``replace``
policy (``recovery.straggler_replace``), and cleared once back at speed."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from hyperscope.cluster import jobs as catalog_jobs
from hyperscope.cluster.slurm import Job
from hyperscope.cluster.state import ClusterError, ClusterState
from hyperscope.errors import HyperscopeError
from hyperscope.recovery import heartbeat
from hyperscope.recovery.decide import Action, Kind, decide_stragglers
from hyperscope.recovery.stragglers import Straggler, StragglerTracker

if TYPE_CHECKING:
    from hyperscope.recovery.agent import Agent

#: a rank's beat older than this says nothing of its speed now (a silent rank is a hang, not slow)
STRAGGLER_FRESH_S = 10.0


def watch(self: Agent, state: ClusterState, jobs: list[Job]) -> list[Action]:
    """Each running job's ranks' step times, this attempt's and fresh (a silent rank is the
    hang detection's); a straggler found is named on its node (and its job captured, under
    the ``profile`` policy), one that is back at speed is cleared."""
    if self.policy.stragglers.action == "off":
        return []
    if self.tracker is None:
        self.tracker = StragglerTracker(self.policy.stragglers)
    directory = catalog_jobs.heartbeat_dir(state)
    now = self.clock()
    running, found = set(), []
    for job in jobs:
        tasks = job.fields.get("NumTasks", "")
        if job.state != "RUNNING" or not tasks.isdigit() or int(tasks) < 2:
            continue
        jid = str(job.id)
        running.add(jid)
        since = self.running_since.get((job.id, job.restarts), now)
        beats = [
            b for b in heartbeat.job_beats(directory, jid, int(tasks))
            if since <= b.ts_ns / 1e9 and now - b.ts_ns / 1e9 <= STRAGGLER_FRESH_S
        ]  # fmt: skip
        found += self.tracker.observe(jid, beats)
    self.tracker.forget(running)
    now_slow = {(s.job, s.rank): s for s in found}
    for key, old in list(self.flagged.items()):
        if key not in now_slow:
            del self.flagged[key]
            _name(self, old, "", f"rank {old.rank} of job {old.job} is back at speed")
    actions = []
    for key, s in now_slow.items():
        if key in self.flagged:
            continue
        self.flagged[key] = s
        for action in decide_stragglers([s], self.policy):
            actions.append(action)
            if action.kind is Kind.PROFILE:
                _profile(self, action, s, state)
            else:
                _name(self, s, action.reason, action.reason)
    if self.policy.stragglers.action == "replace":
        from hyperscope.recovery import straggler_replace

        actions += straggler_replace.replace(self, state, list(now_slow.values()))
    return actions


def _name(self: Agent, s: Straggler, shown: str, reason: str) -> None:
    """On its node (``list-nodes``) and in agent.log; ``shown`` "" clears the node's.

    A rank is named on its node before the log says so, and the log says it is back before its
    node is cleared: a reader that takes the log first and the state after (``fleet.observe``)
    then never sees a rank named in the log that its node does not show."""
    phase = "decided" if shown else "recovered"
    record = {"kind": Kind.STRAGGLER.value, "nodes": [s.node] if s.node else [], "job": s.job,
              "rank": s.rank, "phase": phase, "reason": reason}  # fmt: skip
    if not shown:
        self.log(record)
    if s.node:
        with contextlib.suppress(ClusterError, OSError), self._update() as st:
            for node in st.nodes:
                if node.name == s.node:
                    node.straggler = shown
    if shown:
        self.log(record)


def _profile(self: Agent, action: Action, s: Straggler, state: ClusterState) -> None:
    """The slow rank and a median one captured on demand (``hyperscope capture``), on a thread
    of its own: the loop goes on meanwhile."""
    base = {"kind": action.kind.value, "nodes": list(action.nodes), "job": action.job}
    self.log({**base, "phase": "decided", "reason": action.reason})
    t0 = self.clock()

    def capture() -> None:
        from hyperscope.capture import remote

        store = catalog_jobs.store_home(state)
        place = remote.Control(Path(state.shared_dir) / "hyperscope" / "control", store,
                               Path(state.slurm_conf))  # fmt: skip
        try:
            done = remote.capture_running(
                s.job, store, steps=self.policy.stragglers.profile_steps, places=[place],
                ranks=sorted({s.rank, s.median_rank}), timeout_s=30.0,
            )  # fmt: skip
        except HyperscopeError as exc:
            self.log({**base, "phase": "failed", "error": str(exc), "seconds": round(self.clock() - t0, 3)})
            return
        took = round(self.clock() - t0, 3)
        self.log({**base, "phase": "done", "profile": done.profile_id, "catalog_job": done.job,
                  "steps": done.steps, "starts": {str(r): v for r, v in done.starts.items()},
                  "seconds": took})  # fmt: skip

    worker = threading.Thread(target=capture, name=f"hyperscope-capture-{s.job}", daemon=True)
    self.workers.append(worker)
    worker.start()
