"""``GET /api/clusters`` and ``GET /api/clusters/{name}``: the Cluster page's data, typed. Thin: the
rows are :mod:`hyperscope.cluster.fleet`'s (the same the metrics exporter serves), observed once
per request through the Slurm seam; nothing here decides anything. The one write is the
"profile now" button's ``POST /api/clusters/{name}/jobs/{id}/capture``: an on-demand capture
through ``hyperscope capture``'s library (:mod:`hyperscope.capture.remote`), which asks the job's
ranks through the cluster's shared control folder.

Clusters are looked for under the server's home (``clusters/``, where ``hyperscope cluster create
--home`` puts them); a name in the path is only ever matched against that listing, never joined
into a path as given.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, Field

from hyperscope.cluster import fleet
from hyperscope.cluster import jobs as catalog_jobs
from hyperscope.cluster.state import ClusterError, ClusterState, list_states
from hyperscope.errors import HyperscopeError, UsageError

#: the agent's decisions a page shows (newest first)
DECISIONS = 200
#: how long the "profile now" button waits for each step of the hand-shake with the ranks
CAPTURE_TIMEOUT_S = 20.0


class ClusterSummaryOut(BaseModel):
    name: str
    provider: str
    status: str
    nodes: int
    spares: int


class ClusterListOut(BaseModel):
    clusters: list[ClusterSummaryOut]


class NodeOut(BaseModel):
    node: str
    group: str
    role: str
    spare: bool
    status: str = Field(description="hyperscope's: Running, Replacing, Rebooting, Failed, NeedsHardware ...")
    slurm_state: str = Field(description="Slurm's, e.g. idle, mixed+drain; '' when unknown or no slurmd")
    responding: bool | None
    healthy: bool | None
    reason: str = Field(description="the reason Slurm holds: the last health check's, an operator's")
    replacements: int
    last_action: str
    straggler: str = Field("", description="the agent's reason while it names a rank on it a straggler")


class StragglerOut(BaseModel):
    job: str
    rank: int
    node: str
    step_s: float = Field(description="its mean step time in its last heartbeat window")
    median_s: float = Field(description="the median of the job's other ranks' step times")
    score: float = Field(description="step_s / median_s - 1: 0.25 is 25 % slower than the others")
    named: bool = Field(description="the agent names it a straggler now")


class CaptureIn(BaseModel):
    steps: int = Field(10, ge=1, le=10_000, description="steps each rank records")
    ranks: list[int] | None = Field(None, description="the ranks to profile; all when absent")
    cpu_ops: bool = False


class CaptureOut(BaseModel):
    catalog_job: str = Field(description="the store's job the new profile belongs to")
    profile_id: str
    store: str = Field(description="the store it is written to (the cluster's shared one)")
    in_this_server: bool = Field(description="whether this server's home is that store")
    ranks: list[int]
    start_step: int
    steps: int
    starts: dict[str, int]
    notes: list[str]


class DecisionOut(BaseModel):
    time: float
    kind: str
    phase: str
    nodes: list[str]
    job: str | None
    reason: str
    error: str
    seconds: float | None


class AttemptOut(BaseModel):
    attempt: int
    start_ns: int | None
    end_ns: int | None
    end_state: str
    last_beat_ns: int | None


class GoodputOut(BaseModel):
    attempts: int
    restarts: int
    wall_s: float
    training_s: float
    lost_s: float
    goodput: float | None


class ClusterJobOut(BaseModel):
    id: int
    name: str
    state: str
    nodes: str
    restarts: int
    attempts: list[AttemptOut]
    goodput: GoodputOut


class ClusterOut(BaseModel):
    name: str
    provider: str
    status: str
    slurm_error: str = Field(description="why Slurm did not answer ('' when it did)")
    nodes: list[NodeOut]
    decisions: list[DecisionOut]
    jobs: list[ClusterJobOut]
    stragglers: list[StragglerOut] = Field(
        description="each rank's step time against the other ranks' of its job (fresh, timed beats)"
    )


def router(
    home: Path,
    responses: dict[int | str, dict[str, Any]] | None = None,
    observe: Callable[[Path, str], fleet.Snapshot] = fleet.observe,
) -> APIRouter:
    """``observe``: how a cluster is looked at (tests of the routes pass recorded snapshots)."""
    api = APIRouter(tags=["clusters"])

    @api.get("/api/clusters", response_model=ClusterListOut, responses=responses)
    def list_clusters() -> ClusterListOut:
        """The clusters under the server's home."""
        return ClusterListOut(
            clusters=[
                ClusterSummaryOut(
                    name=s.name,
                    provider=s.provider,
                    status=s.status,
                    nodes=sum(1 for n in s.nodes if not n.spare),
                    spares=sum(1 for n in s.nodes if n.spare),
                )
                for s in _states(home)
            ]
        )

    @api.get("/api/clusters/{name}", response_model=ClusterOut, responses=responses)
    def get_cluster(name: str) -> ClusterOut:
        """Nodes, the agent's decisions (newest first) and each job's attempts and goodput."""
        known = {s.name for s in _states(home)}
        if name not in known:
            raise HTTPException(404, f"no cluster named {name!r} under {home}")
        snap = observe(home, name)
        return ClusterOut(
            name=snap.state.name,
            provider=snap.state.provider,
            status=snap.state.status,
            slurm_error=snap.slurm_error,
            nodes=[NodeOut(**_fields(n)) for n in fleet.nodes(snap)],
            decisions=[
                DecisionOut(**{**_fields(d), "nodes": list(d.nodes)})
                for d in fleet.decisions(snap, DECISIONS)
            ],
            jobs=[
                ClusterJobOut(
                    id=j.id,
                    name=j.name,
                    state=j.state,
                    nodes=j.nodes,
                    restarts=j.restarts,
                    attempts=[AttemptOut(**_fields(a)) for a in j.attempts],
                    goodput=GoodputOut(**j.goodput.to_dict()),  # type: ignore[arg-type]
                )
                for j in fleet.jobs(snap)
            ],
            stragglers=[StragglerOut(**_fields(r), score=r.score) for r in fleet.rank_speeds(snap)],
        )

    @api.post("/api/clusters/{name}/jobs/{job_id}/capture", response_model=CaptureOut, responses=responses)
    def capture_job(name: str, job_id: int, body: CaptureIn, request: Request) -> CaptureOut:
        """Profile the running Slurm job now, as ``hyperscope capture JOB --steps N`` does:
        answers once every asked rank started recording (the profile then grows in the store).
        Only a JSON body is taken, so a page of another site cannot send it (a cross-origin
        JSON POST needs a preflight this server never grants)."""
        if not request.headers.get("content-type", "").startswith("application/json"):
            raise HTTPException(415, "send the capture request as JSON (Content-Type: application/json)")
        state = next((s for s in _states(home) if s.name == name), None)
        if state is None:
            raise HTTPException(404, f"no cluster named {name!r} under {home}")
        return _capture(home, state, str(job_id), body)

    return api


def _capture(home: Path, state: ClusterState, job: str, body: CaptureIn) -> CaptureOut:
    from hyperscope.capture import remote

    store = catalog_jobs.store_home(state)
    place = remote.Control(Path(state.shared_dir) / "hyperscope" / "control", store, Path(state.slurm_conf))
    try:
        done = remote.capture_running(
            job, store, steps=body.steps, ranks=body.ranks, cpu_ops=body.cpu_ops, places=[place],
            timeout_s=CAPTURE_TIMEOUT_S, wait=False,
        )  # fmt: skip
    except UsageError as exc:
        raise HTTPException(400, str(exc)) from None
    except HyperscopeError as exc:  # no such job, not running, not stepping, a rank's timeout
        raise HTTPException(409, str(exc)) from None
    return CaptureOut(
        catalog_job=done.job, profile_id=done.profile_id, store=str(done.store),
        in_this_server=done.store.resolve() == home.resolve(), ranks=list(done.ranks),
        start_step=done.start_step, steps=done.steps, starts={str(r): v for r, v in done.starts.items()},
        notes=done.notes,
    )  # fmt: skip


def _states(home: Path) -> list[Any]:
    try:
        return list_states(home)
    except ClusterError as exc:  # one unreadable state file: said, not a 500 without words
        raise HTTPException(500, str(exc)) from None


def _fields(row: Any) -> dict[str, Any]:
    return {name: getattr(row, name) for name in row.__slots__}
