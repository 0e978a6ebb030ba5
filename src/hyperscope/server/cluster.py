"""``GET /api/clusters`` and ``GET /api/clusters/{name}``: the Cluster page's data, typed. Thin: the
rows are :mod:`hyperscope.cluster.fleet`'s (the same the metrics exporter serves), observed once
per request through the Slurm seam; nothing here decides or writes anything.

Clusters are looked for under the server's home (``clusters/``, where ``hyperscope cluster create
--home`` puts them); a name in the path is only ever matched against that listing, never joined
into a path as given.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field

from hyperscope.cluster import fleet
from hyperscope.cluster.state import ClusterError, list_states

#: the agent's decisions a page shows (newest first)
DECISIONS = 200


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
        )

    return api


def _states(home: Path) -> list[Any]:
    try:
        return list_states(home)
    except ClusterError as exc:  # one unreadable state file: said, not a 500 without words
        raise HTTPException(500, str(exc)) from None


def _fields(row: Any) -> dict[str, Any]:
    return {name: getattr(row, name) for name in row.__slots__}
