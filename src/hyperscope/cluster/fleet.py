"""The fleet as one snapshot: a cluster's recorded state, what Slurm says of its nodes and jobs,
the agent's log, the jobs' heartbeats and the catalog's attempts — gathered once by
:func:`observe` (through the Slurm seam; the only function here that reads anything), then turned
by pure functions into the rows the metrics exporter (:mod:`hyperscope.metrics`) and the UI's
Cluster page both show, so they never disagree and are tested on recorded outputs.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hyperscope.cluster import jobs as catalog_jobs
from hyperscope.cluster.goodput import Goodput, goodput
from hyperscope.cluster.slurm import Job, Node, Slurm, SlurmError, parse_show_job, parse_show_node
from hyperscope.cluster.state import ClusterState, clusters_dir
from hyperscope.recovery import heartbeat
from hyperscope.schema.layout import CATALOG_FILE
from hyperscope.store import attempts as attempts_store
from hyperscope.store.attempts import Attempt
from hyperscope.store.catalog import Catalog, JobStatus

LOG = "agent.log"


@dataclass(frozen=True, slots=True)
class Beat:
    job: str
    rank: int
    step: int
    ts_ns: int
    step_ns: int = 0  # the rank's mean step time in its last heartbeat window (0: none known)
    node: str = ""


@dataclass(frozen=True, slots=True)
class Snapshot:
    state: ClusterState
    show_node: str  # ``scontrol show node -o``; "" when Slurm did not answer
    show_job: str  # ``scontrol show job -o``
    slurm_error: str  # why Slurm did not answer ("" when it did)
    log: list[dict[str, Any]]  # agent.log, oldest first
    beats: list[Beat]
    attempts: dict[int, list[Attempt]]  # by Slurm job id
    #: the catalog's entries of this cluster by Slurm job id: (name, status, updated_ns)
    catalog: dict[int, tuple[str, str, int]] = field(default_factory=dict)
    now_ns: int = 0


def parse_log(text: str) -> list[dict[str, Any]]:
    """agent.log's JSON lines; a line cut short by a crash mid-write is skipped."""
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


class LogTail:
    """agent.log read incrementally: only what was appended since the last read is parsed (the log
    grows for the cluster's life; a scrape every 15 s must not reread it whole)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._records: list[dict[str, Any]] = []

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                if size < self._offset:  # replaced (create --replace): start again
                    self._offset, self._records = 0, []
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return list(self._records)
        whole = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits for the next read
        self._offset += len(whole)
        self._records.extend(parse_log(whole.decode("utf-8", "replace")))
        return list(self._records)


def _slurm(state: ClusterState) -> Slurm:
    from hyperscope.cluster import ssh

    return ssh.slurm_for(state) if state.provider == "ssh" else Slurm(Path(state.slurm_conf))


#: per Slurm command: two of them stay inside Prometheus's default 10 s scrape timeout (scontrol
#: takes ~9 s to give up on a controller that is down)
SLURM_TIMEOUT_S = 4.0


def observe(
    home: Path, name: str, *, log: LogTail | None = None, timeout_s: float = SLURM_TIMEOUT_S
) -> Snapshot:
    """Everything the pure functions below need, read now. Slurm not answering is recorded
    (``slurm_error``), never raised: the exporter still serves what it knows."""
    cluster_dir = clusters_dir(home) / name
    records = (log or LogTail(cluster_dir / LOG)).read()  # before the state: see straggler_watch._name
    state = ClusterState.load(cluster_dir)
    now_ns = time.time_ns()
    show_node = show_job = error = ""
    try:
        slurm = _slurm(state)
        show_node = slurm.run("scontrol", "show", "node", "-o", timeout=timeout_s).stdout
        show_job = slurm.run("scontrol", "show", "job", "-o", timeout=timeout_s).stdout
    except SlurmError as exc:
        show_node, show_job, error = "", "", str(exc)
    live = {str(j.id) for j in parse_show_job(show_job)}
    beats = [
        Beat(s.job, s.rank, s.last_step, now_ns - int(s.silent_s * 1e9), s.step_ns, s.node)
        for s in heartbeat.read(catalog_jobs.heartbeat_dir(state), now_ns=now_ns)
        if s.job in live
    ]
    found: dict[int, list[Attempt]] = {}
    catalog: dict[int, tuple[str, str, int]] = {}
    db = catalog_jobs.store_home(state) / CATALOG_FILE
    if db.is_file():
        cat = Catalog(db, read_only=True)
        try:
            key = catalog_jobs.cluster_key(state)
            found = attempts_store.read(cat, key)
            catalog = {jid: (j.name, j.status.value, j.updated_ns) for jid, j in cat.slurm_jobs(key).items()}
        finally:
            cat.close()
    return Snapshot(state, show_node, show_job, error, records, beats, found, catalog, now_ns)


# --- pure views ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeRow:
    node: str
    group: str
    role: str
    spare: bool
    status: str  # ours: Running, Replacing, Rebooting, Failed, NeedsHardware, ...
    slurm_state: str  # Slurm's, e.g. idle, mixed+drain; "" without a slurmd or an answer
    responding: bool | None  # slurmd answers Slurm (None: unknown)
    healthy: bool | None  # schedulable with no reason (None: unknown)
    reason: str  # Slurm's reason: the health check's or an operator's ("" = none)
    replacements: int
    last_action: str  # the agent's last decision about it
    straggler: str = ""  # the agent's reason while it names a rank on the node a straggler


def nodes(snap: Snapshot) -> list[NodeRow]:
    live = {n.name: n for n in parse_show_node(snap.show_node)}
    rows = []
    for n in snap.state.nodes:
        s: Node | None = live.get(n.name)
        responding = None if s is None else not (s.state == "DOWN" or "NOT_RESPONDING" in s.flags)
        rows.append(
            NodeRow(
                node=n.name, group=n.group, role=n.role, spare=n.spare, status=n.status,
                slurm_state=s.display_state if s else "", responding=responding,
                healthy=(s.available and not s.reason) if s else None, reason=s.reason if s else "",
                replacements=n.replacements, last_action=n.last_action, straggler=n.straggler,
            )
        )  # fmt: skip
    return rows


@dataclass(frozen=True, slots=True)
class Decision:
    time: float
    kind: str
    phase: str  # decided, done, failed, ticket, opened, closed
    nodes: tuple[str, ...]
    job: str | None
    reason: str
    error: str
    seconds: float | None


def decisions(snap: Snapshot, limit: int = 200) -> list[Decision]:
    """The agent's log, newest first (at most ``limit``)."""
    out = []
    for r in reversed(snap.log[-limit:] if limit else snap.log):
        seconds, job = r.get("seconds"), r.get("job")
        out.append(
            Decision(
                time=float(r.get("time", 0.0)), kind=str(r.get("kind", "")), phase=str(r.get("phase", "")),
                nodes=tuple(str(n) for n in r.get("nodes") or ()), job=None if job is None else str(job),
                reason=str(r.get("reason", "")), error=str(r.get("error", "")),
                seconds=float(seconds) if isinstance(seconds, int | float) else None,
            )
        )  # fmt: skip
    return out


def action_counts(snap: Snapshot) -> Counter[tuple[str, str]]:
    """(kind, phase) -> how many agent.log records say so."""
    return Counter((str(r.get("kind", "")), str(r.get("phase", ""))) for r in snap.log)


@dataclass(frozen=True, slots=True)
class JobRow:
    id: int
    name: str  # the catalog's entry, else Slurm's job name
    state: str  # Slurm's, else the catalog's status for a job slurmctld forgot
    nodes: str
    restarts: int  # Slurm's count, or the catalog's requeued attempts when Slurm forgot the job
    attempts: list[Attempt]
    goodput: Goodput


def jobs(snap: Snapshot) -> list[JobRow]:
    live: dict[int, Job] = {j.id: j for j in parse_show_job(snap.show_job)}
    newest: dict[str, int] = {}
    for b in snap.beats:
        newest[b.job] = max(newest.get(b.job, 0), b.ts_ns)
    rows = []
    for jid in sorted(set(live) | set(snap.attempts)):
        job = live.get(jid)
        tried = snap.attempts.get(jid, [])
        entry = snap.catalog.get(jid)
        gone = job is None and entry is not None and entry[1] != JobStatus.IN_PROGRESS.value
        good = goodput(
            tried,
            now_ns=snap.now_ns,
            newest_beat_ns=newest.get(str(jid)),
            ended_ns=entry[2] if gone and entry is not None else None,
        )
        rows.append(
            JobRow(
                id=jid,
                name=entry[0] if entry else (job.name if job else ""),
                state=job.state if job else (entry[1] if entry else "unknown"),
                nodes=job.nodes if job else "",
                restarts=job.restarts if job else good.restarts,
                attempts=tried,
                goodput=good,
            )
        )
    return rows


#: a beat older than this says nothing of the rank's speed now (the agent's watch uses the same)
FRESH_S = 10.0


@dataclass(frozen=True, slots=True)
class RankSpeed:
    """One rank's step time beside the other ranks' of its job: the straggler score the agent's
    detection (``recovery.stragglers``) compares with its threshold, shown before it decides."""

    job: str
    rank: int
    node: str
    step_s: float  # its mean step time in its last heartbeat window
    median_s: float  # the median of the other ranks' in their last windows
    named: bool  # the agent names it a straggler now (agent.log)

    @property
    def score(self) -> float:
        """How much slower than the median of the others, as a fraction (0.25: 25 % slower)."""
        return self.step_s / self.median_s - 1.0


def rank_speeds(snap: Snapshot) -> list[RankSpeed]:
    """Every rank with a fresh, timed beat, of jobs with two such ranks or more; a rank is named
    when the agent's last straggler record about it decided so (not "recovered")."""
    named: dict[tuple[str, int], bool] = {}
    for r in snap.log:
        if r.get("kind") == "straggler" and isinstance(r.get("rank"), int):
            named[(str(r.get("job")), int(r["rank"]))] = r.get("phase") == "decided"
    by_job: dict[str, list[Beat]] = {}
    for b in snap.beats:
        if b.step_ns > 0 and (snap.now_ns - b.ts_ns) / 1e9 <= FRESH_S:
            by_job.setdefault(b.job, []).append(b)
    out = []
    for job, beats in sorted(by_job.items()):
        if len(beats) < 2:
            continue
        for b in sorted(beats, key=lambda b: b.rank):
            median = statistics.median(o.step_ns for o in beats if o.rank != b.rank)
            out.append(
                RankSpeed(job, b.rank, b.node, b.step_ns / 1e9, median / 1e9, named.get((job, b.rank), False))
            )
    return out
