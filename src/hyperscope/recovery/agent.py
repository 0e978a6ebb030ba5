"""The recovery agent (``hyperscope agent``): once a second (every 5 s on a calm cluster, unless a
cheap look finds a reason: :mod:`hyperscope.recovery.calm`) it reads what Slurm says of the nodes
and jobs, what the provider sees of each node's slurmd, and the jobs' progress heartbeats; asks
:mod:`hyperscope.recovery.decide` what to do; and applies each decision through the provider's
:class:`~hyperscope.cluster.operate.NodeOperator` — the same loop for local, ssh and adopted
clusters, which differ only in how a node is rebooted or re-created (or, where nothing here can,
a ticket for an operator).

Every decision is appended, with its reason and then its outcome, as one JSON line to
``<cluster dir>/agent.log`` and recorded on the node (``list-nodes`` shows it). The agent also
lifts Slurm's post-requeue hold (``StartTime=now``) from requeued jobs, so a job is running again
within about a second of its nodes being ready instead of after ``cred_expire``.

Node recoveries run in parallel, one thread per node; each node is acted on by one thread at a
time, and the cluster's state file is only locked for the moment a result is written into it
(never through a re-create, which may run a lifecycle script for minutes), so ``delete`` and the
other nodes' recoveries never wait behind one. A pass costs the same however many heartbeat files
and healthy nodes there are: a job's heartbeats are read only once it may have hung, and only
nodes Slurm does not report plainly healthy are parsed in full (what a pass sees:
:mod:`hyperscope.recovery.observe`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hyperscope.cluster import jobs as catalog_jobs
from hyperscope.cluster.operate import AGENT_LOCK_FD_ENV, NodeOperator, operator_for
from hyperscope.cluster.slurm import Job, Node, Slurm, SlurmError
from hyperscope.cluster.spec import RecoverySettings, load_spec
from hyperscope.cluster.state import (
    ClusterState,
    Proc,
    cluster_lock,
    clusters_dir,
    start_time,
)
from hyperscope.errors import HyperscopeError
from hyperscope.recovery import act, calm, observe, supervise
from hyperscope.recovery.calm import Calm
from hyperscope.recovery.decide import (
    PASSIVE,
    Action,
    JobView,
    Kind,
    NodeView,
    Policy,
    decide_jobs,
    decide_nodes,
)
from hyperscope.recovery.stragglers import Straggler, StragglerTracker

LOG = "agent.log"
BUSY_INTERVAL_S = 0.2
#: a job this young is left to ``submit``'s own catalog sync (it knows the entry it reserved)
SYNC_SETTLE_S = 10.0


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
    #: nodes a thread is acting on: one action per node at a time (the per-node lock)
    acting: set[str] = field(default_factory=set)
    #: job -> the newest heartbeat seen (s since the epoch) / when its files were last read
    beat_at: dict[str, float] = field(default_factory=dict)
    beat_read: dict[str, float] = field(default_factory=dict)
    #: the provider's seam; built from the cluster's state (tests and the bench may set one)
    operator: NodeOperator | None = None
    #: per-rank slow-step counts (``recovery.stragglers``), and the stragglers named now
    tracker: StragglerTracker | None = None
    flagged: dict[tuple[str, int], Straggler] = field(default_factory=dict)
    #: until when Slurm need not be asked (an idle cluster: ``recovery.calm``)
    idle: Calm = field(default_factory=Calm)
    #: ``straggler_action: replace`` (``recovery.straggler_replace``): when each (job, rank, node)
    #: was first named, and the passive decision last logged per node
    straggler_seen: dict[tuple[str, int, str], float] = field(default_factory=dict)
    straggler_noted: dict[str, str] = field(default_factory=dict)
    #: when the controllers were last looked at (ssh, existing: a remote look, not every pass),
    #: and the adopted cluster's controllers found DOWN then (logged once per change)
    ctld_checked: float = 0.0
    ctld_noted: str = ""
    #: the nodes a `cluster update` acted on at the last pass (``updating_now``)
    was_updating: set[str] = field(default_factory=set)
    _cached: tuple[tuple[int, int, int], ClusterState] | None = None
    _recovery: RecoverySettings | None = None
    _guard: threading.Lock = field(default_factory=threading.Lock)

    @property
    def dir(self) -> Path:
        return clusters_dir(self.home) / self.name

    def _state(self) -> ClusterState:
        """The state file, parsed again only when it changed (it rarely does between passes)."""
        st = os.stat(self.dir / "cluster.json")
        key = (st.st_ino, st.st_mtime_ns, st.st_size)  # every save is a new file (os.replace)
        if self._cached is None or self._cached[0] != key:
            self._cached = (key, ClusterState.load(self.dir))
        return self._cached[1]

    def _ops(self, state: ClusterState) -> NodeOperator:
        return self.operator if self.operator is not None else operator_for(state, self.home)

    def recovery(self, state: ClusterState) -> RecoverySettings:
        if self._recovery is None:
            try:
                self._recovery = load_spec(Path(state.spec_path)).recovery
            except HyperscopeError:
                self._recovery = RecoverySettings()
        return self._recovery

    @contextmanager
    def _update(self) -> Iterator[ClusterState]:
        """The state, fresh, for one short change: saved at the end. The lock (the cluster's, so
        ``delete`` and ``create`` are never raced) is held only this long."""
        with self._guard, cluster_lock(self.home, self.name):
            state = ClusterState.load(self.dir)
            yield state
            state.save()

    def log(self, record: dict[str, Any]) -> None:
        record = {"time": round(self.clock(), 3), **record}
        with self._guard, open(self.dir / LOG, "a") as f:
            f.write(json.dumps(record) + "\n")

    # --- one pass ---------------------------------------------------------------------------------

    def tick(self) -> list[Action]:
        """Observe, decide, apply; the actions taken."""
        state = self._state()
        if state.status not in ("InService", "Updating"):
            return []
        restarts = self.supervise(state)
        ops = self._ops(state)
        assert self._cached is not None  # set by _state()
        key = (self._cached[0], calm.events_stamp(self.dir))

        def daemons() -> bool:
            return all(ops.daemon_alive(n) for n in state.nodes if n.slurm and n.status == "Running")

        if not restarts and self.idle.holds(self.clock(), key, daemons):
            return []  # calm: nothing Slurm could say needs this second's look (recovery.calm)
        slurm = ops.slurm()
        try:
            shown = slurm.run("scontrol", "show", "node", "-o").stdout
            jobs = slurm.jobs()
        except SlurmError:
            self.idle.after_pass(self.clock(), key, False)
            return restarts  # slurmctld busy or restarting: the next pass sees it
        self.sync_catalog(state, slurm, jobs)
        views = self.node_views(state, self.nodes_of_interest(state, ops, shown), ops)
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
        actions += self.watch_stragglers(state, jobs)  # named and acted on there, not above
        self.release_requeued(slurm, jobs)
        self.busy = any(
            j.state == "COMPLETING"
            or (j.state == "PENDING" and j.restarts and (j.id, j.restarts) not in self.released)
            for j in jobs
        ) or any(w.is_alive() for w in self.workers)
        self.workers = [w for w in self.workers if w.is_alive()]
        watching = (
            bool(self.settling or self.silent_since or self.reboots or self.acting) or self.synced is None
        )
        acted = bool(restarts) or any(a.kind not in PASSIVE for a in actions)
        quiet = calm.quiet((j.state for j in jobs), busy=self.busy, watching=watching, acted=acted)
        self.idle.after_pass(self.clock(), key, quiet)
        return actions

    def supervise(self, state: ClusterState) -> list[Action]:
        """The controllers' watchdog (:mod:`hyperscope.recovery.supervise`)."""
        return supervise.supervise(self, state)

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

    # --- observing (recovery.observe) ------------------------------------------------------------

    def nodes_of_interest(self, state: ClusterState, ops: NodeOperator, shown: str) -> list[Node]:
        return observe.nodes_of_interest(self, state, ops, shown)

    def node_views(self, state: ClusterState, live: list[Node], ops: NodeOperator) -> list[NodeView]:
        return observe.node_views(self, state, live, ops)

    def job_views(self, state: ClusterState, jobs: list[Job]) -> list[JobView]:
        return observe.job_views(self, state, jobs)

    def watch_stragglers(self, state: ClusterState, jobs: list[Job]) -> list[Action]:
        """Stragglers named, profiled and cleared (``recovery.straggler_watch``)."""
        from hyperscope.recovery import straggler_watch

        return straggler_watch.watch(self, state, jobs)

    # --- applying (recovery.act) -----------------------------------------------------------------

    def apply(self, action: Action) -> None:
        act.apply(self, action)

    def release_requeued(self, slurm: Slurm, jobs: list[Job]) -> None:
        act.release_requeued(self, slurm, jobs)

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
            except (HyperscopeError, OSError) as exc:
                self.log({"kind": "error", "phase": "failed", "error": str(exc)})
            n += 1
            time.sleep(min(interval, BUSY_INTERVAL_S) if self.busy else interval)


@contextlib.contextmanager
def _single(path: Path) -> Iterator[bool]:
    """An exclusive lock held for the agent's life: True when this process got it, or was handed
    it by the provider that started it (``operate.agent_lock``)."""
    handed = os.environ.pop(AGENT_LOCK_FD_ENV, "")
    if handed.isdigit():
        try:
            f = os.fdopen(int(handed), "a")
        except OSError:
            pass  # not inherited after all: take it as anyone would
        else:
            with f:
                yield True
            return
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
