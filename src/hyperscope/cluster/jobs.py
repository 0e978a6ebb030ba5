"""Slurm jobs in the jobs catalog: every job of a hyperscope cluster is one catalog entry of the
store in the cluster's shared directory, with its status mapped from Slurm's state.

Slurm's job id is only known after ``sbatch`` returns, but the job's environment is fixed when it
is submitted, so ``hyperscope submit`` reserves the catalog entry first and hands its name to the
job (``HYPERSCOPE_JOB``, with ``HYPERSCOPE_HOME`` on the shared store): a script that profiles
itself then writes into the very entry the sync keeps up to date. Jobs submitted with plain
``sbatch`` get an entry of their own at the next sync.

Without accounting (``sacct`` needs slurmdbd), Slurm's memory of a finished job is slurmctld's,
for ``MinJobAge`` seconds (600 in the clusters hyperscope writes); an entry still active when
slurmctld has forgotten it is marked Failed, saying that its end was not seen.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hyperscope.cluster.slurm import Job, Slurm
from hyperscope.cluster.state import ClusterState
from hyperscope.recovery import heartbeat
from hyperscope.store import attempts
from hyperscope.store.catalog import Catalog, JobStatus
from hyperscope.store.catalog import Job as CatalogJob
from hyperscope.store.store import Store

#: the store's folder inside the cluster's shared directory
STORE_DIR = "hyperscope"
_ACTIVE = (JobStatus.IN_PROGRESS, JobStatus.STOPPING)
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def store_home(state: ClusterState) -> Path:
    """Where the cluster's profiles and jobs catalog live: ``SHARED_DIR/hyperscope``."""
    return Path(state.shared_dir) / STORE_DIR


def cluster_key(state: ClusterState) -> str:
    """The catalog's key of one incarnation of a cluster: a cluster hyperscope re-creates restarts
    Slurm's job ids at 1 (``slurmctld -c``), and its job 1 must not overwrite the old one's job 1.
    An adopted cluster's ids go on across re-adoptions, so its name alone is the key."""
    return state.name if state.provider == "existing" else f"{state.name}:{int(state.created)}"


def expand_hostlist(text: str) -> list[str]:
    """Slurm's hostlist ``workers-[1-3,5],login-1`` as names; padding (``n[01-02]``) is kept."""
    names: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?(?:,|$)", text.strip()):
        prefix, ranges = m.group(1), m.group(2)
        if ranges is None:
            names.append(prefix)
            continue
        for part in ranges.split(","):
            r = _RANGE.match(part)
            if r is None:
                raise ValueError(f"bad range {part!r} in Slurm hostlist {text!r}")
            lo, hi = r.group(1), r.group(2) or r.group(1)
            names.extend(f"{prefix}{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1))
    return names


def slurm_time_ns(text: str) -> int | None:
    """``2026-11-30T17:52:21`` (slurmctld's local time) as ns since the epoch; ``Unknown``/``None``
    (a pending job's start) as None."""
    try:
        return int(dt.datetime.fromisoformat(text).timestamp() * 1e9)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Entry:
    """What the catalog records of one Slurm job."""

    name: str
    status: JobStatus
    nodes: list[str]
    ranks: int
    created_ns: int
    message: str


def entry(cluster: str, job: Job) -> Entry:
    """The catalog's view of one ``scontrol show job`` record; the name is used only for a job that
    has no entry yet (one submitted with plain sbatch)."""
    f = job.fields
    detail = ", ".join(
        x
        for x in (
            job.reason and f"reason {job.reason}",
            job.exit_code not in ("", "0:0") and f"exit {job.exit_code}",
            job.nodes and f"nodes {job.nodes}",
            job.restarts and f"restarts {job.restarts}",
            f.get("StdOut") and f"output {f['StdOut']}",
        )
        if x
    )
    tasks = f.get("NumTasks", "")
    return Entry(
        name=f"{cluster}-{job.name or 'job'}-job{job.id}",
        status=job.status,
        nodes=expand_hostlist(job.nodes) if job.nodes else [],
        ranks=int(tasks) if tasks.isdigit() else job.num_nodes,
        created_ns=slurm_time_ns(f.get("SubmitTime", "")) or time.time_ns(),
        message=f"Slurm job {job.id} on cluster {cluster}: {job.state}" + (f" ({detail})" if detail else ""),
    )


def submit_name(cluster: str, sbatch_args: Sequence[str]) -> str:
    """The catalog name ``hyperscope submit`` reserves: ``CLUSTER-JOBNAME``, JOBNAME from ``-J``/
    ``--job-name``, else ``wrap`` for ``--wrap``, else the stem of the first argument that is a file
    (the script), as sbatch names it; the catalog appends ``-2``, ``-3``… to a name already taken."""
    args = list(sbatch_args)
    for i, a in enumerate(args):
        if a in ("-J", "--job-name") and i + 1 < len(args):
            return f"{cluster}-{args[i + 1]}"
        if a.startswith("--job-name="):
            return f"{cluster}-{a.split('=', 1)[1]}"
        if a.startswith("-J") and len(a) > 2:
            return f"{cluster}-{a[2:]}"
    if any(a == "--wrap" or a.startswith("--wrap=") for a in args):
        return f"{cluster}-wrap"
    script = next((Path(a) for a in args if not a.startswith("-") and Path(a).is_file()), None)
    return f"{cluster}-{script.stem if script else 'job'}"


def reserve(state: ClusterState, name: str) -> CatalogJob:
    with Store(store_home(state)) as store:
        return store.catalog.upsert_slurm_job(
            cluster_key(state), None, name=name, status=JobStatus.IN_PROGRESS, nodes=[], ranks=0,
            created_ns=time.time_ns(), message=f"submitting to Slurm on cluster {state.name}",
        )  # fmt: skip


def _upsert(catalog: Catalog, key: str, cluster: str, job: Job, name: str | None = None) -> CatalogJob:
    e = entry(cluster, job)
    return catalog.upsert_slurm_job(
        key, job.id, name=name or e.name, status=e.status, nodes=e.nodes, ranks=e.ranks,
        created_ns=e.created_ns, message=e.message,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Synced:
    catalog: list[CatalogJob]  # every entry of this cluster, oldest first
    live: dict[int, Job]  # what slurmctld said, by job id


def sync(
    state: ClusterState, slurm: Slurm, *, link: tuple[int, str] | None = None, settle_s: float = 0.0
) -> Synced:
    """Upsert every job slurmctld knows into the cluster's catalog; ``link`` (job id, reserved
    name) joins a job just submitted to its reserved entry. ``settle_s`` (the agent's): a job
    submitted less than this long ago is left to ``submit``'s own sync, which alone knows the
    entry it reserved (synced first, it would get a second entry)."""
    asked_ns = time.time_ns()
    live = slurm.jobs()
    key = cluster_key(state)
    with Store(store_home(state)) as store:
        cat = store.catalog
        seen = {j.id for j in live}
        if link:  # an entry the agent's sync made for this job before submit could link it
            early = cat.slurm_jobs(key).get(link[0])
            if early is not None and early.name != link[1] and not early.profiles:
                cat.remove(early.name)
        for job in live:
            # attempts are keyed by Slurm's id, not by the entry: recorded for young jobs too
            _record_attempts(cat, key, job, heartbeat_dir(state), asked_ns)
            submitted = slurm_time_ns(job.fields.get("SubmitTime", "")) or 0
            if settle_s and asked_ns - submitted < settle_s * 1e9:
                continue
            _upsert(cat, key, state.name, job, link[1] if link and link[0] == job.id else None)
        if link and link[0] not in seen:  # sbatch said yes, slurmctld has not listed it yet
            cat.upsert_slurm_job(
                key, link[0], name=link[1], status=JobStatus.IN_PROGRESS, nodes=[], ranks=0,
                created_ns=asked_ns, message=f"Slurm job {link[0]} on cluster {state.name}: submitted",
            )  # fmt: skip
        for jid, known in cat.slurm_jobs(key).items():
            if jid not in seen and known.status in _ACTIVE and known.updated_ns < asked_ns:
                cat.set_status(
                    str(known.id), JobStatus.FAILED,
                    f"Slurm job {jid} on cluster {state.name}: slurmctld forgot it before hyperscope "
                    "saw it end (finished over MinJobAge ago, or the cluster was restarted)",
                )  # fmt: skip
        catalog = sorted(cat.slurm_jobs(key).values(), key=lambda j: j.created_ns)
        return Synced(catalog, {j.id: j for j in live})


def heartbeat_dir(state: ClusterState) -> Path:
    """Where the cluster's jobs beat (``HYPERSCOPE_HEARTBEAT_DIR``, set by ``cluster submit``)."""
    return store_home(state) / "heartbeats"


_RUNNING = ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT")


def _record_attempts(cat: Catalog, key: str, job: Job, beats: Path, now_ns: int) -> None:
    """What this sync sees of the job's current attempt (``Restarts`` = its index) and of the one
    a requeue ended: its start (Slurm's StartTime once it runs), its end and how, and the newest
    heartbeat then, so the goodput of a requeued job can be told after Slurm forgot the attempt."""
    f, base = job.fields, job.state.split()[0].rstrip("+").upper() if job.state.strip() else ""
    tasks = int(f["NumTasks"]) if f.get("NumTasks", "").isdigit() else 0
    start = catalog_time(f.get("StartTime", ""), now_ns)
    end = catalog_time(f.get("EndTime", ""), now_ns)
    ended = job.status in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.STOPPED)
    # only RUNNING's StartTime is this attempt's: right after a requeue the job is COMPLETING with
    # the new restart count and the requeue's time as its StartTime (Slurm 22.05, measured)
    if base == "RUNNING" or (ended and job.nodes):
        newest = heartbeat.newest(beats, str(job.id), tasks) if ended else None
        attempts.record(
            cat, key, job.id, job.restarts, start_ns=start, end_ns=end if ended else None,
            end_state=base if ended else "", last_beat_ns=None if newest is None else int(newest * 1e9),
        )  # fmt: skip
    if job.restarts > 0 and (base == "PENDING" or base in _RUNNING):
        # the attempt before this one was requeued: it ended by the time this one is pending, at
        # the requeue (COMPLETING's StartTime), or at the latest when this one started; its beats
        # are its own only before that
        until = (end or now_ns) if base == "PENDING" else (start or now_ns)
        newest = heartbeat.newest(beats, str(job.id), tasks)
        last = None if newest is None or newest * 1e9 > until else int(newest * 1e9)
        attempts.record(
            cat, key, job.id, job.restarts - 1, end_ns=until, end_state="REQUEUED", last_beat_ns=last
        )


def catalog_time(text: str, now_ns: int) -> int | None:
    """A Slurm time that has already happened (Slurm shows estimates for the future), as ns."""
    t = slurm_time_ns(text)
    return t if t is not None and t <= now_ns + 1_000_000_000 else None


def cluster_gone(state: ClusterState) -> None:
    """After ``delete``: whatever was still running was stopped with the cluster."""
    home = store_home(state)
    if not home.is_dir():
        return
    with Store(home) as store:
        for jid, known in store.catalog.slurm_jobs(cluster_key(state)).items():
            if known.status in _ACTIVE:
                store.catalog.set_status(
                    str(known.id), JobStatus.STOPPED, f"Slurm job {jid}: cluster {state.name} was deleted"
                )
