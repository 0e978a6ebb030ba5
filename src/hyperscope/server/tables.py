"""``GET /api/profiles/{id}/tables/{table}``: the Tables page's full tables (every kernel, CPU
operator or annotation name in scope, :mod:`hyperscope.analysis.tables`), and ``GET
/api/profiles/{id}/memory``: the dashboard's memory view (peaks, the allocation curve, the largest
blocks alive at the peak: :mod:`hyperscope.analysis.memory_view`) and ``GET
/api/profiles/{id}/collectives/waits``. Scoped as the dashboard is, under the server's time limit
and row cap, cached for finished profiles; a finished profile's whole-profile memory view and waits
are read from what ``import`` kept beside it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Final, Literal

import duckdb
import orjson
from fastapi import APIRouter, Query
from fastapi.responses import Response

from hyperscope.analysis import ALL, Scope, Table, stored
from hyperscope.analysis.collective_waits import collective_waits
from hyperscope.analysis.memory_view import BUCKETS, TOP, memory_view
from hyperscope.analysis.tables import annotation_table, kernel_table, operator_table
from hyperscope.server.cache import ProfileCache
from hyperscope.server.jobs import ProfileHit
from hyperscope.server.limits import QueryLimits
from hyperscope.store.profile import Profile

TABLES: Final[dict[str, Callable[[duckdb.DuckDBPyConnection, Scope], Table[Any]]]] = {
    "kernels": kernel_table,
    "operators": operator_table,
    "annotations": annotation_table,
}


def router(
    open_profile: Callable[[str], tuple[ProfileHit, Profile]],
    limits: QueryLimits,
    cache: ProfileCache,
    make_scope: Callable[[list[str] | None, list[int] | None, str | None], Scope],
    responses: dict[int | str, dict[str, Any]] | None = None,
) -> APIRouter:
    """``make_scope``: the dashboard's parameter check (same errors for the same mistakes)."""
    api = APIRouter(tags=["profiles"])

    @api.get("/api/profiles/{profile_id}/tables/{table}", responses=responses)
    def get_table(
        profile_id: str,
        table: Literal["kernels", "operators", "annotations"],
        node: Annotated[list[str] | None, Query(description="only these nodes (repeatable)")] = None,
        rank: Annotated[list[int] | None, Query(description="only these ranks (repeatable)")] = None,
        steps: Annotated[str | None, Query(description="ProfilerStep numbers A:B (inclusive) or N")] = None,
    ) -> Response:
        """One full table, as ``{title, columns, rows, notes}`` (``Table.to_dict()``)."""
        hit, profile = open_profile(profile_id)
        scope = make_scope(node, rank, steps)

        def work(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
            found = TABLES[table](con, scope)
            limits.check_rows([(table, len(found))])
            answer: dict[str, Any] = found.to_dict()
            return answer

        key = (hit.ref.id, "table", table, scope)
        body, _ = cache.answer(key, hit.live, lambda: limits.run(profile, work, f"the {table} table"))
        return Response(orjson.dumps(body), media_type="application/json")

    @api.get("/api/profiles/{profile_id}/memory", responses=responses)
    def get_memory(
        profile_id: str,
        node: Annotated[list[str] | None, Query(description="only these nodes (repeatable)")] = None,
        rank: Annotated[list[int] | None, Query(description="only these ranks (repeatable)")] = None,
        steps: Annotated[str | None, Query(description="ProfilerStep numbers A:B (inclusive) or N")] = None,
        buckets: Annotated[int, Query(ge=1, le=2000, description="points of the curve per GPU")] = BUCKETS,
        top: Annotated[int, Query(ge=1, le=1000, description="allocations listed per GPU")] = TOP,
    ) -> Response:
        """``{peaks, curve, allocations}``: three ``Table`` dicts for the dashboard's memory view."""
        hit, profile = open_profile(profile_id)
        scope = make_scope(node, rank, steps)

        def work(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
            found = memory_view(con, scope, buckets, top)
            limits.check_rows(found)
            return {k: t.to_dict() for k, t in found.items()}

        def compute() -> dict[str, Any]:
            # `import` and `profile` keep a finished profile's whole view at the UI's defaults
            whole = scope == ALL and not hit.live and (buckets, top) == (BUCKETS, TOP)
            kept = stored.load_memory_view(profile) if whole else None
            return limits.kept_or_run(kept, profile, work, "the memory view")

        key = (hit.ref.id, "memory", scope, buckets, top)
        body, _ = cache.answer(key, hit.live, compute)
        return Response(orjson.dumps(body), media_type="application/json")

    @api.get("/api/profiles/{profile_id}/collectives/waits", responses=responses)
    def get_collective_waits(
        profile_id: str,
        node: Annotated[list[str] | None, Query(description="only these nodes (repeatable)")] = None,
        rank: Annotated[list[int] | None, Query(description="only these ranks (repeatable)")] = None,
        steps: Annotated[str | None, Query(description="ProfilerStep numbers A:B (inclusive) or N")] = None,
    ) -> Response:
        """Each rank's wait for the slowest in the collectives matched across ranks (a Table dict)."""
        hit, profile = open_profile(profile_id)
        scope = make_scope(node, rank, steps)

        def work(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
            answer: dict[str, Any] = collective_waits(con, scope).to_dict()
            return answer

        def compute() -> dict[str, Any]:
            kept = stored.load_waits(profile) if scope == ALL and not hit.live else None  # see get_memory
            return limits.kept_or_run(kept, profile, work, "the collectives' waits", table="collective_waits")

        key = (hit.ref.id, "collective_waits", scope)
        body, _ = cache.answer(key, hit.live, compute)
        return Response(orjson.dumps(body), media_type="application/json")

    return api
