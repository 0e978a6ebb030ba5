"""``GET /api/compare``: :func:`hyperscope.analysis.compare` over HTTP, for the Compare tab.

Two profiles (or one twice), each with its own ranks and step range: two runs, the straggler
against another rank, or two step ranges. Parameters are checked as the dashboard's are (a
malformed one answers 400 naming it), the work runs under the server's time limit and analysis
slots, and the answer of two finished profiles is cached.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

import duckdb
import orjson
from fastapi import APIRouter, Query
from fastapi.responses import Response

from hyperscope.analysis import ALL, Scope, compare, parse_steps, stored
from hyperscope.errors import UsageError
from hyperscope.server.cache import ProfileCache
from hyperscope.server.jobs import ProfileHit
from hyperscope.server.limits import QueryLimits
from hyperscope.store.profile import Profile

RanksParam = Annotated[list[int] | None, Query(description="only these ranks of that side (repeatable)")]
StepsParam = Annotated[str | None, Query(description="ProfilerStep numbers A:B (inclusive) or N")]


def _scope(rank: list[int] | None, steps: str | None, name: str) -> Scope:
    try:
        first_last = parse_steps(steps) if steps is not None else None
    except UsageError as exc:
        raise UsageError(str(exc).replace("--steps", name, 1)) from None
    return Scope(ranks=tuple(sorted(set(rank))) if rank else None, steps=first_last)


def _scope_out(scope: Scope) -> dict[str, Any]:
    return {
        "ranks": list(scope.ranks) if scope.ranks else None,
        "steps": list(scope.steps) if scope.steps else None,
    }


def router(
    open_profile: Callable[[str], tuple[ProfileHit, Profile]],
    limits: QueryLimits,
    cache: ProfileCache,
    responses: dict[int | str, dict[str, Any]] | None = None,
) -> APIRouter:
    """The endpoint, over the app's catalog look-up, query limits and cache; ``responses``: the
    error answers the app documents for every endpoint."""
    api = APIRouter(tags=["compare"])

    @api.get("/api/compare", responses=responses)
    def get_compare(
        a: Annotated[str, Query(description="profile id of the baseline (A)")],
        b: Annotated[str | None, Query(description="profile id of the compared run (B); default A")] = None,
        rank_a: RanksParam = None,
        rank_b: RanksParam = None,
        steps_a: StepsParam = None,
        steps_b: StepsParam = None,
    ) -> Response:
        """B against A: the summary line, step time, GPU time, kernels, CPU operators, peak memory
        and collectives (``Comparison.to_dict()``)."""
        started = time.perf_counter()
        hit_a, profile_a = open_profile(a)
        hit_b, profile_b = open_profile(b) if b is not None else (hit_a, profile_a)
        scope_a = _scope(rank_a, steps_a, "steps_a")
        scope_b = _scope(rank_b, steps_b, "steps_b")
        labels = (_label(hit_a, scope_a), _label(hit_b, scope_b))

        # Two whole finished profiles whose dashboards are kept read their GPU tables from them
        # (analysis/_compare_side.py) and run side by side: a second or two at 10M events, the
        # bound the time limit is there for. Anything else: A on the slot's connection (what the
        # time limit interrupts), B on its own when it is another profile.
        kept = all(
            scope == ALL and not hit.live and stored.dashboard_path(profile).is_file()
            for hit, profile, scope in ((hit_a, profile_a, scope_a), (hit_b, profile_b, scope_b))
        )

        def work(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
            if kept:
                result = compare((profile_a, ALL), (profile_b, ALL), labels=labels).to_dict()
            else:
                source_b = con if hit_b.ref.id == hit_a.ref.id else profile_b
                result = compare((con, scope_a), (source_b, scope_b), labels=labels).to_dict()
            limits.check_rows([(k, len(t["rows"])) for k, t in result["tables"].items()])
            return result

        key = (hit_a.ref.id, "compare", hit_b.ref.id, scope_a, scope_b)
        found, cached = cache.answer(
            key, hit_a.live or hit_b.live, lambda: limits.run(profile_a, work, "the comparison")
        )
        body = {
            **found,
            "a": {"profile": hit_a.ref.id, "job": hit_a.job.name, **_scope_out(scope_a)},
            "b": {"profile": hit_b.ref.id, "job": hit_b.job.name, **_scope_out(scope_b)},
            "cached": cached,
            "elapsed_ms": round((time.perf_counter() - started) * 1e3, 3),
        }
        return Response(orjson.dumps(body), media_type="application/json")

    return api


def _label(hit: ProfileHit, scope: Scope) -> str:
    text = hit.job.name
    if scope.ranks:
        text += " rank " + ",".join(map(str, scope.ranks))
    if scope.steps:
        text += f" steps {scope.steps[0]}:{scope.steps[1]}"
    return text
