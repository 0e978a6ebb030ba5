"""The timeline endpoints of docs/ui-api.md: rows, tiles (binary), event details and links.

Every answer comes from :mod:`hyperscope.timeline`; this module checks parameters, runs the work
under the server's query limits and maps errors to status codes like the rest of the API. The
timeline index is built at import and at the end of a capture; where it is not on disk (a profile
written through the Python API, a read-only store) the first ``/rows`` starts building it in the
background and answers 202 with its progress until it is done (not 503: a browser logs every
failed fetch as a console error, and a build in progress is no failure) (seconds at ten million events).
Timestamps in JSON are decimal strings: epoch nanoseconds are beyond the integers a browser's
numbers hold exactly.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final

import duckdb
import numpy as np
import orjson
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response

from hyperscope import timeline as tl
from hyperscope.errors import UsageError
from hyperscope.server import _gzip
from hyperscope.server.cache import ProfileCache
from hyperscope.server.jobs import ProfileHit
from hyperscope.server.limits import QueryLimits
from hyperscope.server.params import INT64_MAX, RANK_MAX, TIME_MAX, TIME_MIN, check_window
from hyperscope.store.profile import Profile
from hyperscope.timeline.collectives import MAX_INSTANCES, instance_of, instances_in
from hyperscope.timeline.links import MAX_MATCHES
from hyperscope.timeline.range import prepare as prepare_range_tables
from hyperscope.timeline.range import range_stats
from hyperscope.timeline.rows import extent, is_sample_row
from hyperscope.timeline.tile import MAX_ROWS, MAX_WIDTH

log = logging.getLogger("hyperscope.server")

MEDIA_TYPE: Final = "application/vnd.hyperscope.tile"
#: tiles are compressed by their worker, not by the app's GZipMiddleware: no hand-over to one more
#: thread per tile, and level 3 takes half the time of the middleware's 5 for a few percent more
#: bytes (bench/soak.py's tiles: 133 KB on average, 15.6 KB at level 3, 14.9 KB at level 5)
TILE_GZIP_LEVEL: Final = 3
TILE_GZIP_MIN: Final = 4096
_TS_KEYS: Final = frozenset({"ts_ns"})


def _strings(value: Any) -> Any:
    """Every ``ts_ns`` as a decimal string, recursively (see the module docstring)."""
    if isinstance(value, dict):
        return {
            k: (str(v) if k in _TS_KEYS and isinstance(v, int) else _strings(v)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_strings(v) for v in value]
    return value


def _json(body: object) -> Response:
    return Response(orjson.dumps(_strings(body)), media_type="application/json")


@dataclass
class _Build:
    progress: float = 0.0
    done: threading.Event = field(default_factory=threading.Event)


class _Builds:
    """Timeline indexes being built in the background, one thread per profile state."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[Path, _Build] = {}

    def poll(self, profile: Profile) -> float | None:
        """None when the index is there (or its build failed: the request then raises that error
        itself); else how far its build has got, started now if it was not running."""
        if tl.index.ready(profile):
            return None
        where = tl.index.index_dir(profile)
        with self._lock:
            build = self._running.get(where)
            if build is not None and build.done.is_set():
                del self._running[where]  # failed (or finished and since dropped): ask again
                return None
            if build is None:
                build = self._running[where] = _Build()
                threading.Thread(
                    target=self._run, args=(profile, build), name="hyperscope-timeline-index", daemon=True
                ).start()
            return build.progress

    @staticmethod
    def _run(profile: Profile, build: _Build) -> None:
        def progress(share: float) -> None:
            build.progress = share

        try:
            tl.load(profile, progress)
        except BaseException:  # the next /rows request builds it itself and so reports the error
            pass
        finally:
            build.done.set()


_BUILDS = _Builds()

#: profiles (index directories) whose range tables were asked for in the background; and how long
#: after the first ``/rows`` that starts: the first tiles are drawn first
_PREPARED: set[Path] = set()
_PREPARED_LOCK = threading.Lock()
PREPARE_DELAY_S: Final = 2.0


def _prepare_ranges(profile: Profile) -> None:
    """Builds the range statistics' tables of the profile's index in a thread, once per index, so
    that the first Shift-drag over the whole run answers from them (timeline/range.py)."""
    where = tl.index.index_dir(profile)
    with _PREPARED_LOCK:
        if where in _PREPARED:
            return
        _PREPARED.add(where)

    def run() -> None:
        time.sleep(PREPARE_DELAY_S)
        try:
            prepare_range_tables(tl.load(profile))
        except Exception as exc:  # a range request builds them itself, and reports what fails
            log.debug("hyperscope: range tables of %s not built ahead: %s", where, exc)

    threading.Thread(target=run, name="hyperscope-range-tables", daemon=True).start()


@dataclass(frozen=True, slots=True)
class RowsBody:
    """The body of ``/rows``, encoded once: JSON up to its last field (``cached``, which varies),
    and that beginning gzip-compressed (``_gzip``). At 10M events the step list makes it ~900 KB:
    turning the dict into JSON and compressing it again for every request cost 100-400 ms of the
    server's core on a loaded machine, on the way to the timeline's first paint."""

    body: dict[str, Any]
    head: bytes
    gzip: _gzip.GzipHead

    @classmethod
    def of(cls, body: dict[str, Any]) -> RowsBody:
        encoded = orjson.dumps(_strings(body))
        head = encoded[:-1]  # without its closing brace: the ``cached`` field follows
        return cls(body, head, _gzip.head(head))

    def response(self, cached: bool, gzip_ok: bool) -> Response:
        ending = b',"cached":%b}' % (b"true" if cached else b"false")
        if gzip_ok:
            return Response(
                _gzip.finish(self.gzip, ending),
                media_type="application/json",
                headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"},
            )
        plain = self.head + ending
        return Response(plain, media_type="application/json", headers={"Vary": "Accept-Encoding"})


def rows_answer(
    hit: ProfileHit, profile: Profile, limits: QueryLimits, cache: ProfileCache | None = None
) -> tuple[RowsBody, bool]:
    """The body of ``/rows`` and whether it came from ``cache``: a finished profile's is computed
    once (the server's start computes the newest one's, when its index is stored: see ``app``)."""

    def compute() -> RowsBody:
        def work(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
            index = tl.load(profile)
            start, end = extent(index, con)
            return {
                "profile": hit.ref.id,
                "start_ns": str(start),
                "end_ns": str(end),
                "kinds": list(tl.index.KINDS),
                "root": tl.tree(index, con, hit.job.name).to_json(),
                "steps": tl.steps(index),
            }

        return RowsBody.of(limits.run(profile, work, "the timeline rows"))

    if cache is None:
        return compute(), False
    return cache.answer((hit.ref.id, "timeline-rows"), hit.live, compute)


def router(
    open_profile: Callable[[str], tuple[ProfileHit, Profile]],
    limits: QueryLimits,
    cache: ProfileCache | None = None,
) -> APIRouter:
    """The endpoints, over the app's catalog look-up and query limits."""
    api = APIRouter(prefix="/api/profiles/{profile_id}/timeline", tags=["timeline"])
    #: a finished profile's index by its id, as long as timeline.index's own bounded cache keeps
    #: it: ``tl.load`` names the index by listing the profile's parts, a few system calls per
    #: tile that each let every other thread take the GIL first
    indexes: weakref.WeakValueDictionary[str, tl.Index] = weakref.WeakValueDictionary()

    def index_of(hit: ProfileHit, profile: Profile) -> tl.Index:
        if hit.live:
            return tl.load(profile)
        found = indexes.get(hit.ref.id)
        if found is None:
            found = indexes[hit.ref.id] = tl.load(profile)
        return found

    def run(
        profile_id: str,
        what: str,
        work: Callable[[tl.Index, duckdb.DuckDBPyConnection], Any],
        *,
        lazy: bool = False,
    ) -> Any:
        hit, profile = open_profile(profile_id)

        def job(con: duckdb.DuckDBPyConnection) -> Any:
            return work(index_of(hit, profile), con)

        return limits.run(profile, job, what, lazy=lazy), hit, profile

    async def run_light(
        profile_id: str, what: str, work: Callable[[tl.Index, duckdb.DuckDBPyConnection], Any]
    ) -> Any:
        """``run(..., lazy=True)`` from the event loop: the catalog look-up and the work on one
        light thread (server/limits.py), not a request thread and a query thread as well."""
        return await limits.run_async(
            lambda: open_profile(profile_id),
            lambda hit, profile, con: work(index_of(hit, profile), con),
            what,
        )

    @api.get("/rows")
    def get_rows(request: Request, profile_id: str) -> Response:
        """The row tree (job → node → CPU / GPUs → utilization, host threads, streams) and steps.

        202 with ``{"building": true, "progress": 0..1}`` (and ``Retry-After``) while the profile's
        timeline index is being built: seconds to minutes for a profile that was not imported
        (written only through the Python API), which no request should wait out in silence."""
        hit, profile = open_profile(profile_id)
        building = _BUILDS.poll(profile)
        if building is not None:
            return JSONResponse(
                {
                    "building": True,
                    "progress": round(building, 3),
                    "detail": "the timeline index of this profile is being built (once per profile; "
                    "hyperscope import and hyperscope profile build it ahead)",
                },
                status_code=202,
                headers={"Retry-After": "1"},
            )

        answer, cached = rows_answer(hit, profile, limits, cache)
        _prepare_ranges(profile)
        return answer.response(cached, "gzip" in request.headers.get("accept-encoding", ""))

    @api.get("/tile")
    async def get_tile(
        request: Request,
        profile_id: str,
        rows: Annotated[str, Query(description="comma-separated row ids (from /rows)")],
        t0_ns: Annotated[int, Query(ge=TIME_MIN, le=TIME_MAX, description="window start, epoch ns")],
        t1_ns: Annotated[
            int, Query(ge=TIME_MIN, le=TIME_MAX, description="window end, epoch ns (exclusive)")
        ],
        width: Annotated[int, Query(ge=1, le=MAX_WIDTH, description="pixels across the window")],
        snap: Annotated[
            bool,
            Query(description="widen the window to the overview's cells where it has them (header says)"),
        ] = False,
    ) -> Response:
        """Events at least a pixel wide as they are, the others merged per column, instants as
        marks (binary payload); with ``snap``, of the window ``timeline.snap`` widens it to."""
        row_ids = [r for r in rows.split(",") if r]
        if not 1 <= len(row_ids) <= MAX_ROWS:
            raise UsageError(f"rows: expected 1 to {MAX_ROWS} comma-separated row ids, got {len(row_ids)}")
        check_window(t0_ns, t1_ns)
        sample_ids = [r for r in row_ids if is_sample_row(r)]
        event_ids = [r for r in row_ids if not is_sample_row(r)]
        t0, t1, w = t0_ns, t1_ns, width

        def work(index: tl.Index, con: duckdb.DuckDBPyConnection) -> tuple[bytes, bool]:
            """The payload, and whether it is gzip-compressed."""
            t0_ns, t1_ns, width = tl.snap(index, t0, t1, w) if snap else (t0, t1, w)
            if event_ids:
                t = tl.tile(index, event_ids, t0_ns, t1_ns, width)
            else:
                t = tl.Tile(row_ids=[], t0_ns=t0_ns, t1_ns=t1_ns, width_px=width, min_px=1.0)
            if sample_ids:
                s_row, t.s_ts, t.s_val = tl.sample_tile(con, sample_ids, t0_ns, t1_ns, width, index=index)
                t.s_row = (s_row + len(event_ids)).astype(np.uint16)
            t.row_ids = event_ids + sample_ids
            payload = tl.encode(t)
            if accepts_gzip and len(payload) >= TILE_GZIP_MIN:
                return gzip.compress(payload, compresslevel=TILE_GZIP_LEVEL, mtime=0), True
            return payload, False

        accepts_gzip = "gzip" in request.headers.get("accept-encoding", "")
        # the index answers event rows alone: DuckDB is opened only for sample rows
        payload, zipped = await run_light(profile_id, "a timeline tile", work)
        headers = {"Vary": "Accept-Encoding"}
        if zipped:  # the GZipMiddleware passes an answer with its own Content-Encoding as it is
            headers["Content-Encoding"] = "gzip"
        return Response(payload, media_type=MEDIA_TYPE, headers=headers)

    @api.get("/range")
    def get_range(
        profile_id: str,
        rows: Annotated[str, Query(description="comma-separated row ids (from /rows)")],
        t0_ns: Annotated[int, Query(ge=TIME_MIN, le=TIME_MAX, description="range start, epoch ns")],
        t1_ns: Annotated[int, Query(ge=TIME_MIN, le=TIME_MAX, description="range end, epoch ns (exclusive)")],
    ) -> Response:
        """A range's statistics: per row and in all, events overlapping it, time inside it, busy
        %, time per kind and the names taking the most (timeline/range.py)."""
        row_ids = [r for r in rows.split(",") if r and not is_sample_row(r)]
        if len(row_ids) > MAX_ROWS:
            raise UsageError(f"rows: expected at most {MAX_ROWS} comma-separated row ids, got {len(row_ids)}")
        check_window(t0_ns, t1_ns)
        answer, _, _ = run(
            profile_id,
            "a range's statistics",
            lambda index, con: range_stats(index, row_ids, t0_ns, t1_ns),
            lazy=True,
        )
        return _json(answer)

    @api.get("/event")
    def get_event(
        profile_id: str,
        id: Annotated[int, Query(ge=0, le=INT64_MAX, description="event id from a tile")],
        row: Annotated[str | None, Query(description="its row id, when known (faster)")] = None,
    ) -> Response:
        """Every stored field of one event (or instant), its row and its linked launch or kernel."""

        def work(index: tl.Index, con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
            _, profile = open_profile(profile_id)
            try:
                return tl.event(profile, index, id, row)
            except tl.EventNotFound as exc:
                raise HTTPException(404, str(exc)) from None

        answer, _, _ = run(profile_id, "an event", work)
        return _json(answer)

    @api.get("/links")
    def get_links(
        profile_id: str,
        rank: Annotated[int, Query(ge=0, le=RANK_MAX, description="rank of the launch or kernel")],
        correlation: Annotated[int, Query(ge=0, le=INT64_MAX, description="CUDA correlation id")],
    ) -> Response:
        """The launch and the kernel (memcpy, memset) sharing ``correlation`` on ``rank``."""
        answer, _, _ = run(
            profile_id, "links", lambda index, con: tl.links(index, rank, correlation), lazy=True
        )
        return _json({"rank": rank, "correlation": correlation, "events": answer})

    @api.get("/flows")
    def get_flows(
        profile_id: str,
        rows: Annotated[str, Query(description="comma-separated row ids (from /rows)")],
        t0_ns: Annotated[int, Query(ge=TIME_MIN, le=TIME_MAX)],
        t1_ns: Annotated[int, Query(ge=TIME_MIN, le=TIME_MAX)],
    ) -> Response:
        """Launch → kernel arrows for everything visible in the window (5000 at most)."""
        row_ids = [r for r in rows.split(",") if r]
        check_window(t0_ns, t1_ns)
        answer, _, _ = run(
            profile_id, "flows", lambda index, con: tl.flows(index, row_ids, t0_ns, t1_ns), lazy=True
        )
        return _json({"flows": answer})

    @api.get("/collective")
    def get_collective(
        profile_id: str,
        id: Annotated[int, Query(ge=0, le=INT64_MAX, description="event id of a collective's kernel")],
        row: Annotated[str | None, Query(description="its row id, when known (faster)")] = None,
    ) -> Response:
        """The same collective on every rank (the n-th launch of it on each, as the dashboard's
        waits match them) and which rank arrived last: ``{"instance": null}`` for an event that is
        no communication kernel."""

        def work(index: tl.Index, con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
            if not 0 <= id < (index.offsets[-1] if index.offsets else 0):
                raise HTTPException(404, f"event {id}: no such event in this profile")
            return {"id": id, "instance": instance_of(index, id, row)}

        answer, _, _ = run(profile_id, "a collective's ranks", work, lazy=True)
        return _json(answer)

    @api.get("/collectives")
    def get_collectives(
        profile_id: str,
        rows: Annotated[str, Query(description="comma-separated row ids (from /rows)")],
        t0_ns: Annotated[int, Query(ge=TIME_MIN, le=TIME_MAX, description="window start, epoch ns")],
        t1_ns: Annotated[int, Query(ge=TIME_MIN, le=TIME_MAX, description="window end, epoch ns")],
        limit: Annotated[int, Query(ge=1, le=MAX_INSTANCES, description="instances at most")] = 100,
    ) -> Response:
        """The collectives with a kernel in the window on one of ``rows``, each with its kernel on
        every rank and the last rank to arrive (the first ``limit`` by start, and how many in all)."""
        row_ids = [r for r in rows.split(",") if r]
        if not 1 <= len(row_ids) <= MAX_ROWS:
            raise UsageError(f"rows: expected 1 to {MAX_ROWS} comma-separated row ids, got {len(row_ids)}")
        check_window(t0_ns, t1_ns)

        def cap(kernels: int) -> None:  # 413 before the answer is built, not after
            limits.check_rows([("collective links", kernels)])

        (total, found), _, _ = run(
            profile_id,
            "the collectives in a window",
            lambda index, con: instances_in(index, row_ids, t0_ns, t1_ns, limit, check=cap),
            lazy=True,
        )
        return _json({"total": total, "truncated": total > len(found), "instances": found})

    @api.get("/search")
    def get_search(
        profile_id: str,
        # a whole C++ kernel name (a table's row) runs past 500 characters; 8,000 still fits a URL
        q: Annotated[str, Query(min_length=1, max_length=8000, description="part of a name, any case")],
        limit: Annotated[int, Query(ge=1, le=MAX_MATCHES)] = MAX_MATCHES,
        exact: Annotated[bool, Query(description="the whole name, case included (a table's row)")] = False,
    ) -> Response:
        """Events whose name holds ``q`` (is ``q``, with exact): the count, and the first ``limit``
        by start."""
        answer, _, _ = run(
            profile_id, "a search", lambda index, con: tl.search(index, q, limit, exact=exact), lazy=True
        )
        total, matches = answer
        return _json({"q": q, "exact": exact, "total": total, "matches": matches})

    return api
