"""The web API of docs/ui-api.md over one store: jobs, profiles, the dashboard and annotations.

Every number comes from :mod:`hyperscope.analysis` (the same functions as ``hyperscope report``);
this module only maps HTTP to them: it checks parameters, looks ids up in the catalog, runs each
analysis under the query limits, caches what cannot change, and turns our errors into status codes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import duckdb
import orjson
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import JSONResponse, Response

from hyperscope import __version__
from hyperscope.analysis import (
    ALL,
    Prepared,
    Scope,
    annotation_histogram,
    annotation_stats,
    dashboard,
    parse_steps,
    stored,
    to_json,
)
from hyperscope.analysis.dashboard import BUCKETS as DEFAULT_BUCKETS
from hyperscope.analysis.dashboard import TOP_K as DEFAULT_TOP_K
from hyperscope.analysis.filters import profile_filters
from hyperscope.errors import JobNotFound, StoreError, UsageError
from hyperscope.schema.layout import CATALOG_FILE
from hyperscope.server import _gzip, auth, export, info, params, static, tables, timeline
from hyperscope.server import cluster as cluster_api
from hyperscope.server import compare as compare_api
from hyperscope.server import prewarm as prewarming
from hyperscope.server.cache import Lru, ProfileCache
from hyperscope.server.jobs import MAX_LIMIT, CatalogReader, JobQuery, ProfileHit, ProfileNotFound
from hyperscope.server.limits import QueryLimits, QueryTimeout, RowCapExceeded
from hyperscope.server.models import (
    AnnotationHistogramOut,
    DashboardOut,
    ErrorOut,
    FiltersOut,
    JobDetailOut,
    JobListOut,
    ProfileOut,
)
from hyperscope.server.params import INT64_MAX, INT64_MIN
from hyperscope.store.catalog import JobStatus
from hyperscope.store.profile import Profile
from hyperscope.store.store import Store
from hyperscope.timeline import index as timeline_index

log = logging.getLogger("hyperscope.server")

#: the dashboard's defaults: the kernels and annotations listed, the utilization chart's buckets
TOP_K: Final = DEFAULT_TOP_K
BUCKETS: Final = DEFAULT_BUCKETS
_ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    code: {"model": ErrorOut, "description": text}
    for code, text in (
        (400, "a parameter is malformed or out of range"),
        (401, "missing or wrong access token"),
        (404, "unknown job, profile or annotation"),
        (413, "a table is over the row cap (--max-rows)"),
        (504, "the analysis ran past the time limit (--query-timeout)"),
    )
}

NodeParam = Annotated[list[str] | None, Query(description="only these nodes (repeatable)")]
RankParam = Annotated[list[int] | None, Query(description="only these ranks (repeatable)")]
StepsParam = Annotated[
    str | None, Query(description="ProfilerStep numbers A:B (inclusive) or N", examples=["3:7"])
]


class AnnotationNotFound(Exception):
    """No annotation of that name anywhere in the profile (the API answers 404)."""


def create_app(
    home: Path,
    *,
    token: str | None = None,
    query_timeout_s: float = 30.0,
    max_rows: int = 100_000,
    static_dir: Path = static.STATIC_DIR,
    prewarm: int = 0,
    observe_cluster: Callable[[Path, str], Any] | None = None,
) -> FastAPI:
    """The API and the front end over the store at ``home`` (created when missing).

    ``token`` guards every path when given (see :mod:`hyperscope.server.auth`); ``serve()`` makes
    one up whenever the server listens beyond loopback. ``static_dir`` holds the built front end
    (tests point it elsewhere). ``prewarm``: at start, compute the information and (where its index
    is stored) timeline rows of that many newest finished profiles before answering, then, once
    the server is idle, their filters and default dashboard (:mod:`hyperscope.server.prewarm`),
    since the first look at a large profile is the one slow answer (seconds at 10M events) and is
    usually the newest job's. ``observe_cluster``: how the Cluster page's routes
    look at a cluster (default :func:`hyperscope.cluster.fleet.observe`; tests pass recorded ones).
    """
    # absolute: the catalog is opened read-only through a file: URI, which a relative path has not
    home = Path(home).expanduser().resolve()
    if not (home / CATALOG_FILE).is_file():  # an empty store; an existing one is only read
        Store(home).close()
    catalog = CatalogReader(home)
    cache = ProfileCache(home)
    limits = QueryLimits(query_timeout_s, max_rows)
    #: cached dashboards' tables, gzip-compressed once (a few KB each)
    gzip_heads: Lru[tuple[Hashable, ...], _gzip.GzipHead] = Lru(256)

    def open_profile(profile_id: str) -> tuple[ProfileHit, Profile]:
        hit = catalog.profile(profile_id)
        return hit, cache.profile(hit.ref.id, hit.live)

    def filters_answer(hit: ProfileHit, profile: Profile) -> FiltersOut:
        def compute() -> FiltersOut:
            kept = None if hit.live else stored.load_filters(profile)
            return FiltersOut.model_validate(
                limits.kept_or_run(kept, profile, profile_filters, "listing the filters", tables=False)
            )

        found, _ = cache.answer((hit.ref.id, "filters"), hit.live, compute)
        return found

    def dashboard_answer(
        hit: ProfileHit, profile: Profile, scope: Scope, top_k: int, buckets: int
    ) -> tuple[bytes, bool]:
        """The tables as JSON bytes (cached so: ~110 KB a scope, against ~410 KB as Python objects,
        whose churn in a full cache fragmented the server's heap in bench/soak.py)."""
        # `hyperscope import` and `hyperscope profile` keep a finished profile's whole dashboard
        # beside it (analysis/stored.py); the server only reads it, as it reads the whole store.
        whole = scope == ALL and not hit.live

        def work(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
            tables = dashboard(con, scope, top_k=top_k, buckets=buckets)
            limits.check_rows(tables)
            return to_json(tables)

        def compute() -> bytes:
            kept = stored.load_dashboard(profile, top_k, buckets) if whole else None
            return orjson.dumps(limits.kept_or_run(kept, profile, work, "the dashboard"))

        key = (hit.ref.id, "dashboard", scope, top_k, buckets)
        return cache.answer(key, hit.live, compute)

    def newest() -> list[tuple[ProfileHit, Profile]]:
        """The ``prewarm`` newest finished profiles (catalog errors raised to ``Prewarm``)."""
        found: list[tuple[ProfileHit, Profile]] = []
        for job in catalog.jobs(JobQuery(limit=MAX_LIMIT)).jobs:
            if len(found) >= prewarm:
                break
            if job.latest_profile is None:
                continue
            try:
                hit, profile = open_profile(job.latest_profile)
            except Exception as exc:  # reported when someone asks for it
                log.info("hyperscope: profile %s not prewarmed: %s", job.latest_profile, exc)
                continue
            if not hit.live:
                found.append((hit, profile))
        return found

    warmed: list[tuple[ProfileHit, Profile]] = []

    def first_look() -> Iterator[tuple[str, Callable[[], object]]]:
        warmed.extend(newest())
        for hit, profile in warmed:
            yield hit.ref.id, partial(info.profile_answer, hit, profile, limits, cache)
            if timeline_index.ready(profile):  # stored at import: the rows, never a build here
                yield hit.ref.id, partial(timeline.rows_answer, hit, profile, limits, cache)

    def rest() -> Iterator[tuple[str, Callable[[], object]]]:
        whole = _scope(None, None, None)
        for hit, profile in warmed:
            yield hit.ref.id, partial(dashboard_answer, hit, profile, whole, TOP_K, BUCKETS)
            yield hit.ref.id, partial(filters_answer, hit, profile)

    warm = prewarming.Prewarm(first_look, rest, prewarming.LastRequest())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if prewarm > 0:
            warm.start()
            # before the first request is answered (see hyperscope.server.prewarm)
            await asyncio.to_thread(warm.first_look_done.wait, prewarming.FIRST_LOOK_WAIT_S)
        yield
        warm.stopped.set()
        limits.database.close()  # and its spill directory (also at exit, for an app never started)

    app = FastAPI(
        lifespan=lifespan,
        title="hyperscope",
        version=__version__,
        description="Profiles of PyTorch training: jobs, profiles and the dashboard's tables.",
        openapi_url="/api/openapi.json",
        docs_url="/api/docs",
        redoc_url=None,
    )
    app.state.home = home
    app.state.cache = cache
    _install_errors(app)
    # A dashboard is ~100 KB of JSON, a tenth of that compressed: it matters beyond loopback.
    # Level 5, not Starlette's 9: a 500 KB timeline tile compresses in 2 ms instead of 12, for a
    # few percent more bytes (18.6 KB against 17.2 KB).
    app.add_middleware(GZipMiddleware, minimum_size=4096, compresslevel=5)
    auth.install(app, token)
    static.install_headers(app)  # outermost: on every answer, a 401 included
    app.add_middleware(prewarming.Activity, seen=warm.seen)

    @app.get("/api/jobs", response_model=JobListOut, responses=_ERRORS, tags=["jobs"])
    def list_jobs(
        search: Annotated[str | None, Query(description="substring of the name, any case")] = None,
        status: Annotated[list[JobStatus] | None, Query(description="repeatable")] = None,
        created_after_ns: Annotated[int | None, Query(ge=INT64_MIN, le=INT64_MAX)] = None,
        created_before_ns: Annotated[int | None, Query(ge=INT64_MIN, le=INT64_MAX)] = None,
        sort: Literal["created", "name", "status", "ranks", "events", "size"] = "created",
        order: Literal["asc", "desc"] = "desc",
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
        offset: Annotated[int, Query(ge=0, le=INT64_MAX)] = 0,
    ) -> JobListOut:
        """Jobs matching the filters, one page of them, and how many match in all."""
        query = JobQuery(
            search=search,
            statuses=tuple(status or ()),
            created_after_ns=created_after_ns,
            created_before_ns=created_before_ns,
            sort=sort,
            order=order,
            limit=limit,
            offset=offset,
        )
        return catalog.jobs(query)

    @app.get("/api/jobs/{id_or_name:path}", response_model=JobDetailOut, responses=_ERRORS, tags=["jobs"])
    def get_job(id_or_name: str) -> JobDetailOut:
        """A job by name, else by number, with its profiles (oldest first)."""
        return catalog.job(id_or_name)

    @app.get("/api/profiles/{profile_id}", response_model=ProfileOut, responses=_ERRORS, tags=["profiles"])
    def get_profile(profile_id: str) -> ProfileOut:
        """The information panel: where the profile came from, its ranks and devices."""
        return info.profile_answer(*open_profile(profile_id), limits, cache)

    @app.get(
        "/api/profiles/{profile_id}/filters",
        response_model=FiltersOut,
        responses=_ERRORS,
        tags=["profiles"],
    )
    def get_filters(profile_id: str) -> FiltersOut:
        """What the filter bar offers: nodes, ranks, the step range, annotation names."""
        return filters_answer(*open_profile(profile_id))

    @app.get(
        "/api/profiles/{profile_id}/dashboard",
        response_model=DashboardOut,
        responses=_ERRORS,
        tags=["profiles"],
    )
    def get_dashboard(
        request: Request,
        profile_id: str,
        node: NodeParam = None,
        rank: RankParam = None,
        steps: StepsParam = None,
        top_k: Annotated[int, Query(ge=1, le=1000, description="kernels and annotations listed")] = TOP_K,
        buckets: Annotated[int, Query(ge=1, le=1000, description="utilization chart buckets")] = BUCKETS,
    ) -> Response:
        """Every table of ``hyperscope.analysis.dashboard()`` for one scope."""
        started = time.perf_counter()
        hit, profile = open_profile(profile_id)
        scope = _scope(node, rank, steps)
        tables, cached = dashboard_answer(hit, profile, scope, top_k, buckets)
        if cached and "gzip" in request.headers.get("accept-encoding", ""):
            # The tables compressed once (see _gzip): only the fields after them are per answer.
            key = (hit.ref.id, scope, top_k, buckets)
            if (start := gzip_heads.get(key)) is None:
                start = _gzip.head(b'{"tables":' + tables)
                gzip_heads.put(key, start)
            ms = round((time.perf_counter() - started) * 1e3, 3)
            ending = b'"scope":%b,"cached":true,"elapsed_ms":%b}' % (
                orjson.dumps(_scope_out(scope)),
                orjson.dumps(ms),
            )
            return Response(
                _gzip.finish(start, b"," + ending),
                media_type="application/json",
                headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"},
            )
        ms = round((time.perf_counter() - started) * 1e3, 3)
        ending = b'"scope":%b,"cached":%b,"elapsed_ms":%b}' % (
            orjson.dumps(_scope_out(scope)),
            orjson.dumps(cached),
            orjson.dumps(ms),
        )
        return Response(b'{"tables":' + tables + b"," + ending, media_type="application/json")

    @app.get(
        "/api/profiles/{profile_id}/annotations/{name:path}/histogram",
        response_model=AnnotationHistogramOut,
        responses=_ERRORS,
        tags=["profiles"],
    )
    def get_annotation_histogram(
        profile_id: str,
        name: str,
        bins: Annotated[int, Query(ge=1, le=1000)] = 20,
        node: NodeParam = None,
        rank: RankParam = None,
        steps: StepsParam = None,
    ) -> Response:
        """Duration statistics and histogram of one annotation (any name, ``/`` included)."""
        hit, profile = open_profile(profile_id)
        scope = _scope(node, rank, steps)

        def work(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
            return _annotation(con, name, scope, bins, limits)

        key = (hit.ref.id, "annotation", name, scope, bins)
        found, _ = cache.answer(key, hit.live, lambda: limits.run(profile, work, f"annotation {name!r}"))
        return _json(found)

    app.include_router(timeline.router(open_profile, limits, cache))
    app.include_router(compare_api.router(open_profile, limits, cache, _ERRORS))
    app.include_router(export.router(open_profile, _ERRORS))
    app.include_router(tables.router(open_profile, limits, cache, _scope, _ERRORS))
    app.include_router(cluster_api.router(home, _ERRORS, *([observe_cluster] if observe_cluster else [])))
    static.install(app, static_dir)
    prewarming.build_routes(app)
    return app


def _annotation(
    con: duckdb.DuckDBPyConnection, name: str, scope: Scope, bins: int, limits: QueryLimits
) -> dict[str, Any]:
    known = con.execute(
        "SELECT 1 FROM events WHERE kind = 'annotation' AND name = $name LIMIT 1", {"name": name}
    ).fetchone()
    if known is None:
        raise AnnotationNotFound(f"annotation {name!r}: the profile has no annotation of that name")
    ctx = Prepared(con, scope)  # a rank or node the profile lacks is refused here (400)
    try:
        try:
            stats = annotation_stats(ctx, scope, name=name)
        except UsageError:  # the name exists, but not within this scope
            notes = [*ctx.notes, f"annotation {name!r}: none in scope"]
            table = {"title": f"Duration histogram of {name}", "columns": [], "rows": [], "notes": notes}
            return {"stats": None, "histogram": table}
        histogram = annotation_histogram(ctx, name, scope, bins)
    finally:
        ctx.close()
    limits.check_rows([("histogram", len(histogram))])
    return {"stats": stats.to_dict()["rows"][0], "histogram": histogram.to_dict()}


def _scope(node: list[str] | None, rank: list[int] | None, steps: str | None) -> Scope:
    params.check_ranks(rank)
    if steps is not None:
        params.check_steps_text(steps)
    try:
        first_last = parse_steps(steps) if steps is not None else None
    except UsageError as exc:
        raise UsageError(str(exc).replace("--steps", "steps", 1)) from None
    # Sorted and without repeats, so equal scopes share one cache entry.
    return Scope(
        nodes=tuple(sorted(set(node))) if node else None,
        ranks=tuple(sorted(set(rank))) if rank else None,
        steps=first_last,
    )


def _scope_out(scope: Scope) -> dict[str, Any]:
    return {
        "nodes": list(scope.nodes) if scope.nodes else None,
        "ranks": list(scope.ranks) if scope.ranks else None,
        "steps": list(scope.steps) if scope.steps else None,
    }


def _json(body: object) -> Response:
    """orjson: NaN and infinity become null (a browser's JSON.parse refuses them), and it is fast."""
    return Response(orjson.dumps(body), media_type="application/json")


def _install_errors(app: FastAPI) -> None:
    """Our exceptions as status codes, each answer ``{"detail": "<one sentence>"}``."""

    def handler(code: int) -> Callable[[Request, Exception], Response]:
        def answer(request: Request, exc: Exception) -> Response:
            return JSONResponse({"detail": params.short_detail(str(exc))}, status_code=code)

        return answer

    for exc_type, code in (
        (UsageError, 400),
        (JobNotFound, 404),
        (ProfileNotFound, 404),
        (AnnotationNotFound, 404),
        (RowCapExceeded, 413),
        (QueryTimeout, 504),
        (StoreError, 500),
    ):
        app.add_exception_handler(exc_type, handler(code))

    def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {}
        loc = [str(x) for x in first.get("loc", ()) if x not in ("query", "path") and not isinstance(x, int)]
        name = ".".join(loc)
        given = first.get("input")
        if name in params.RANGES:  # an integer out of its range, or not an integer at all
            return JSONResponse({"detail": params.range_error(name, given)}, status_code=400)
        where = f"parameter {name!r}" if loc else "the request"
        shown = f" (got {params.shown(given)})" if isinstance(given, str | int | float) else ""
        detail = params.short_detail(f"{where}{shown}: {first.get('msg', 'invalid')}")
        return JSONResponse({"detail": detail}, status_code=400)

    app.add_exception_handler(RequestValidationError, invalid)
