"""The JSON shapes of the web API (docs/ui-api.md), as pydantic models.

They exist so that ``/api/openapi.json`` documents every answer exactly and the front end can be
checked against it; the analysis tables themselves stay plain dicts (``Table.to_dict()``), since
their columns are defined once, by the analysis row dataclasses.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from hyperscope.store.catalog import JobStatus


class ErrorOut(BaseModel):
    """Every non-2xx answer: one sentence naming what was wrong and what was expected."""

    detail: str


class ProfileRefOut(BaseModel):
    id: str = Field(description="16 hex digits; the key of every /api/profiles/{id} endpoint")
    created_ns: int
    source: str = Field(description="'import' or 'capture'")
    events: int
    ranks: int
    bytes: int
    origin: str = Field(description="the imported files, or the capturing command")


class JobOut(BaseModel):
    id: int
    name: str
    status: JobStatus
    created_ns: int
    updated_ns: int
    nodes: list[str]
    ranks: int
    message: str = Field(description="why a rank failed or is incomplete; empty when all went well")
    latest_profile: str | None = Field(description="the newest profile's id; null before the first")
    profiles: int = Field(description="how many profiles the job has")
    events: int = Field(0, description="events of the newest profile; 0 before the first")
    bytes: int = Field(0, description="the newest profile's size on disk; 0 before the first")
    duration_ns: int | None = Field(None, description="the newest profile's traced span; null when unknown")


class JobDetailOut(JobOut):
    profile_list: list[ProfileRefOut] = Field(description="oldest first")


class JobListOut(BaseModel):
    total: int = Field(description="jobs matching the filters, before limit/offset")
    jobs: list[JobOut]


class DeviceOut(BaseModel):
    index: int = Field(description="the GPU index the device-side events name")
    name: str = Field(description="from the trace's deviceProperties; '?' when it lists none")
    memory_bytes: int | None = Field(description="totalGlobalMem, where the trace gives it")


class RankOut(BaseModel):
    rank: int
    node: str
    local_rank: int | None
    events: int
    complete: bool = Field(description="false when part of this rank's data could not be written")
    devices: list[str] = Field(
        description="names of every device the trace's deviceProperties lists (all GPUs visible "
        "to the process, not only the ones it used)"
    )
    gpus: list[DeviceOut] = Field(description="the GPUs this rank's kernels, copies and sets ran on")
    source_file: str
    notes: list[str]


class ProfileOut(BaseModel):
    id: str
    job: str
    job_id: int
    status: JobStatus = Field(description="the job's status; InProgress profiles are never cached")
    source: str
    created_ns: int
    events: int
    bytes: int
    ts_min_ns: int | None
    ts_max_ns: int | None
    world_size: int
    hosts: list[str] = Field(description="the nodes the ranks ran on; empty when no source named one")
    ranks: list[RankOut]
    settings: dict[str, Any] = Field(description="capture settings (ProfilerConfig), else {}")
    notes: list[str]


class StepRange(BaseModel):
    min: int
    max: int


class FiltersOut(BaseModel):
    nodes: list[str]
    ranks: list[int]
    steps: StepRange | None = Field(description="ProfilerStep numbers present; null when none")
    annotations: list[str] = Field(description="annotation names, most frequent first")
    rank_nodes: dict[str, list[str]] = Field(
        default_factory=dict,
        description="each rank's node(s), by rank (a decimal string; '' for an unnamed node): the "
        "filter bar narrows the ranks to the node chosen",
    )


class TableOut(BaseModel):
    """``hyperscope.analysis.Table.to_dict()``: rows are {column: value}; NaN is sent as null."""

    title: str
    columns: list[str]
    rows: list[dict[str, Any]]
    notes: list[str]


class ScopeOut(BaseModel):
    nodes: list[str] | None
    ranks: list[int] | None
    steps: list[int] | None = Field(description="[first, last], inclusive; null for all steps")


class DashboardOut(BaseModel):
    tables: dict[str, TableOut] = Field(description="every key of hyperscope.analysis.dashboard()")
    scope: ScopeOut
    elapsed_ms: float = Field(description="server time for this answer")
    cached: bool = Field(description="true when the tables came from the server's cache")


class AnnotationHistogramOut(BaseModel):
    stats: dict[str, Any] | None = Field(description="the annotation_stats row; null when none in scope")
    histogram: TableOut
