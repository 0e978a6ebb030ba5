"""The default dashboard and memory view of a finished profile, computed once and kept beside it.

At ten million events the whole-profile dashboard takes seconds to compute, and it is the first
thing the UI asks for. A finished profile never changes, so ``hyperscope import``, the end of
``hyperscope profile`` and the server (the first time it computes one) store the answer in
``<profile>/derived/``; later looks, from any process, read it back in milliseconds. The same
step builds the timeline's index (``hyperscope.timeline.index``: 6 s at ten million events,
90 s at a hundred million), so the first timeline request of a fresh server reads it from disk.

The file name carries a digest of the analysis code itself, so a hyperscope whose analyses
changed never reads an answer an older one computed: it computes and stores its own. Storing is
best effort: a read-only store only loses the speed-up. What the dashboard page asks beside the
dashboard is kept the same way, each in a file of its own: the memory view (peaks, the allocation
curve, the blocks alive at the peak), the collectives' waits across ranks and the filter bar's
choices. Each scans the events (0.3-1.3 s at 10M events on 2 cores), and the page's first render
waited for all of them: 2.0-3.3 s at 10M events in bench/ui_render.py with only the dashboard kept.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from duckdb import DuckDBPyConnection as Connection

from hyperscope.analysis._common import ALL, connection, memory_limit
from hyperscope.analysis.collective_waits import collective_waits
from hyperscope.analysis.dashboard import BUCKETS, TOP_K, dashboard, to_json
from hyperscope.analysis.filters import profile_filters
from hyperscope.analysis.memory_view import BUCKETS as MEMORY_BUCKETS
from hyperscope.analysis.memory_view import TOP as MEMORY_TOP
from hyperscope.analysis.memory_view import memory_view
from hyperscope.schema.layout import ProfileMeta
from hyperscope.store.derived import DERIVED_DIR, read_packed, source_digest, timeline_store_min, write_packed
from hyperscope.store.profile import Profile, connect_rows

log = logging.getLogger("hyperscope.analysis")


def code_digest() -> str:
    """A digest of every analysis module's source: what the stored answers were computed by."""
    return source_digest(Path(__file__).parent)


def dashboard_path(profile: Profile, top_k: int = TOP_K, buckets: int = BUCKETS) -> Path:
    return profile.path / DERIVED_DIR / f"dashboard-{code_digest()}-k{top_k}-b{buckets}.json.zst"


def load_dashboard(profile: Profile, top_k: int = TOP_K, buckets: int = BUCKETS) -> dict[str, Any] | None:
    """The stored whole-profile dashboard (``to_json`` form), or ``None`` when there is none."""
    return _load(dashboard_path(profile, top_k, buckets))


def save_dashboard(
    profile: Profile, tables: dict[str, Any], top_k: int = TOP_K, buckets: int = BUCKETS
) -> bool:
    """Keep ``tables`` (``to_json`` form) beside the profile; False when the store is read-only."""
    return _save(profile, dashboard_path(profile, top_k, buckets), tables)


def memory_view_path(profile: Profile) -> Path:
    return profile.path / DERIVED_DIR / f"memory-{code_digest()}-b{MEMORY_BUCKETS}-t{MEMORY_TOP}.json.zst"


def load_memory_view(profile: Profile) -> dict[str, Any] | None:
    """The stored whole-profile memory view (``{peaks, curve, allocations}`` as Table dicts, the
    UI's default points and allocations), or ``None`` when there is none."""
    data = _load(memory_view_path(profile))
    return data if data is not None and set(data) == {"peaks", "curve", "allocations"} else None


def precompute_memory_view(profile: Profile, con: Connection | None = None) -> dict[str, Any]:
    """Compute the whole-profile memory view and keep it beside the profile: its three analyses
    scan every allocator event (seconds at 10M events), which the view's first look should not
    wait for, as the dashboard's does not."""
    tables = {k: t.to_dict() for k, t in memory_view(profile if con is None else con, ALL).items()}
    _save(profile, memory_view_path(profile), tables)
    return tables


def waits_path(profile: Profile) -> Path:
    return profile.path / DERIVED_DIR / f"waits-{code_digest()}.json.zst"


def load_waits(profile: Profile) -> dict[str, Any] | None:
    """The stored whole-profile collectives' waits (a Table dict), or ``None`` when there is none."""
    data = _load(waits_path(profile))
    return data if data is not None and {"columns", "rows"} <= set(data) else None


def filters_path(profile: Profile) -> Path:
    return profile.path / DERIVED_DIR / f"filters-{code_digest()}.json.zst"


def load_filters(profile: Profile) -> dict[str, Any] | None:
    """The stored filter choices (:func:`hyperscope.analysis.filters.profile_filters`), or None."""
    data = _load(filters_path(profile))
    # every field the server's FiltersOut requires: a damaged file is recomputed, never a 500
    keys = {"nodes", "ranks", "steps", "annotations", "rank_nodes"}
    return data if data is not None and keys <= set(data) else None


def precompute_side_answers(
    profile: Profile, con: Connection | None = None, only: Collection[str] | None = None
) -> list[str]:
    """Compute and keep what the dashboard page asks beside the dashboard: the memory view, the
    collectives' waits and the filters (``only`` those named, where given); the names of those
    kept. One that fails only warns (the server computes it at the first look) and leaves the
    others. ``con``: a connection over the profile to run them on (``analysis._common.connection``),
    else one each."""
    source = profile if con is None else con
    work: dict[str, Callable[[], object]] = {
        "memory view": lambda: precompute_memory_view(profile, con),
        "waits": lambda: _save(profile, waits_path(profile), collective_waits(source, ALL).to_dict()),
        "filters": lambda: _save(profile, filters_path(profile), profile_filters(source)),
    }
    kept = []
    for what, compute in work.items():
        if only is not None and what not in only:
            continue
        try:
            compute()
        except Exception as exc:
            log.warning("hyperscope: the %s of %s was not precomputed: %s", what, profile.path, exc)
        else:
            kept.append(what)
    return kept


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = orjson.loads(read_packed(path))
    except (OSError, ValueError):  # orjson.JSONDecodeError is a ValueError; a damaged file: None
        return None
    return data if isinstance(data, dict) else None


def _save(profile: Profile, path: Path, tables: dict[str, Any]) -> bool:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(exist_ok=True)
        write_packed(tmp, orjson.dumps(tables))  # zstd: counted in the profile's size
        tmp.replace(path)  # readers see the whole answer or none
    except OSError as exc:
        log.debug("hyperscope: %s of %s is not stored: %s", path.name, profile.path, exc)
        tmp.unlink(missing_ok=True)
        return False
    return True


def precompute_dashboard(profile: Profile, con: Connection | None = None) -> dict[str, Any]:
    """Compute the default whole-profile dashboard (on ``con`` where given) and keep it beside
    the profile."""
    tables = to_json(dashboard(profile if con is None else con, ALL, top_k=TOP_K, buckets=BUCKETS))
    save_dashboard(profile, tables)
    return tables


def precompute_timeline(profile: Profile) -> float | None:
    """Build the profile's timeline index and keep it beside the profile (nothing to do when it is
    there already); the seconds it took, or None when it failed or the store is read-only (the
    server then builds it at the first timeline request). Never raises: a warning at most."""
    if profile.meta.events < timeline_store_min():
        return None  # kept in memory at the first view: nothing to build, nor the timeline to import
    from hyperscope.timeline.index import store

    started = time.perf_counter()
    try:
        kept = store(profile)
    except Exception as exc:  # the profile is stored either way; the server builds it on demand
        log.warning("hyperscope: the timeline index of %s was not built: %s", profile.path, exc)
        return None
    took = time.perf_counter() - started
    log.info(
        "hyperscope: timeline index of %s %s in %.1f s", profile.path, "kept" if kept else "not kept", took
    )
    return took if kept else None


def precompute_job(
    home: Path, job: str, profile_id: str | None = None, report: Callable[[str, float], None] | None = None
) -> float | None:
    """Precompute for a job's (newest) profile once it is finished: its dashboard, then its
    timeline index; the seconds the dashboard took, or None when the job is still running (its
    profile still grows) or the dashboard failed. ``report(what, seconds)`` hears of each result
    kept ("dashboard computed", "timeline index built"). A failure only warns."""
    from hyperscope.store.catalog import JobStatus
    from hyperscope.store.store import Store

    with Store(home) as store:
        if store.job(job).status in (JobStatus.IN_PROGRESS, JobStatus.STOPPING):
            return None
        profile = store.profile(job, profile_id)
    started = time.perf_counter()
    # kept already where the import computed them over its rows in memory (precompute_beside)
    took: float | None = 0.0 if load_dashboard(profile) is not None else None
    missing = [name for name, load in _SIDE_LOADS.items() if load(profile) is None]
    kept: list[str] = []
    if took is None or missing:
        # one connection for the four analyses: a fresh DuckDB database costs 25-40 ms each, a
        # fifth of a small profile's whole precompute (the 8-rank DLRM set: 0.66 s)
        with contextlib.ExitStack() as stack:
            con: Connection | None = None
            try:
                con = stack.enter_context(connection(profile))
            except Exception as exc:  # each analysis then opens its own, and says what fails
                log.debug("hyperscope: no shared connection over %s: %s", profile.path, exc)
            began = time.perf_counter()
            side = _SideAnswers(profile, con, missing)
            try:
                if took is None:
                    precompute_dashboard(profile, con)
                    took = time.perf_counter() - started
                    if report is not None:
                        report("dashboard computed", took)
            except Exception as exc:  # the profile is stored either way; the UI computes on demand
                log.warning("hyperscope: the dashboard of %s was not precomputed: %s", job, exc)
            finally:
                kept = side.result()  # before the connection closes under the side answers' cursor
    if kept and report is not None:
        report(f"{_listed(kept)} computed", time.perf_counter() - began)
    built = precompute_timeline(profile)
    if built is not None and report is not None:
        report("timeline index built", built)
    return took


class _SideAnswers:
    """The side answers computed on a thread of their own, on a cursor of the dashboard's
    connection, while the dashboard runs: each is a few small queries whose planning and Python
    leave the second core idle (df_index_resolver's precompute: 0.27 s instead of 0.35 s; the
    8-rank DLRM set: 0.20 instead of 0.25). Without a second cursor, on the caller's thread after
    the dashboard, as before."""

    def __init__(
        self,
        profile: Profile,
        con: Connection | None,
        only: Collection[str] | None = None,
        cursor: Callable[[Connection], Connection] = Connection.cursor,
    ) -> None:
        self._profile, self._con, self._only = profile, con, only
        self._kept: list[str] = []
        self._thread: threading.Thread | None = None
        if only is not None and not only:
            return
        try:
            second = cursor(con) if con is not None else None  # the same views, a connection of its own
        except Exception as exc:  # one after the other, then
            log.debug("hyperscope: no second cursor over %s: %s", profile.path, exc)
            second = None
        if second is None:
            return

        def run() -> None:
            try:
                self._kept = precompute_side_answers(profile, second, only)
            finally:
                second.close()

        self._thread = threading.Thread(target=run, name="hyperscope-precompute", daemon=True)
        self._thread.start()

    def result(self) -> list[str]:
        """The names of the answers kept (``precompute_side_answers``), once all are done."""
        if self._thread is None:
            if self._only is not None and not self._only:
                return []
            return precompute_side_answers(self._profile, self._con, self._only)
        self._thread.join()
        return self._kept


#: each side answer's loader: what ``precompute_job`` finds kept already
_SIDE_LOADS: dict[str, Callable[[Profile], dict[str, Any] | None]] = {
    "memory view": load_memory_view,
    "waits": load_waits,
    "filters": load_filters,
}


def precompute_beside(rows: Callable[[], pa.Table | None], profile_dir: Path) -> None:
    """The dashboard and its side answers of a profile being imported, computed over its rows in
    memory while they are written (``Store.import_traces``' ``beside``) and kept in
    ``profile_dir``, so they are published with the profile; ``precompute_job`` then finds them.
    The DuckDB database is made while the files are read, then ``rows()`` waited for (None: the
    rows are in parts; ``precompute_job`` computes from the stored profile). The Parquet writer
    keeps one core busy: df_index_resolver's import and precompute took 0.85-1.15 s one after
    the other, 0.74 s so (bench/README.md, "The dashboard beside the write"). What fails here
    is computed again from the stored profile by ``precompute_job``."""
    spill = tempfile.mkdtemp(prefix="hyperscope-analysis-")
    con = connect_rows(None)
    try:
        con.execute(f"SET temp_directory = '{spill.replace(chr(39), chr(39) * 2)}'")
        events = rows()
        if events is None:
            return
        connect_rows(events, con)
        con.execute(f"SET memory_limit = '{memory_limit(events.num_rows)}'")
        profile = Profile(profile_dir, ProfileMeta("", "import", 0, events=events.num_rows))
        side = _SideAnswers(profile, con, cursor=lambda c: connect_rows(events, c.cursor()))
        try:
            precompute_dashboard(profile, con)
        except Exception as exc:  # precompute_job computes it from the stored profile
            log.debug("hyperscope: the dashboard of %s was not computed in memory: %s", profile_dir, exc)
        finally:
            side.result()
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
