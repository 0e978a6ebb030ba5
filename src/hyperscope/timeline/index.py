"""The timeline's level-of-detail index: every drawable event of a profile in per-row arrays.

A tile must answer in milliseconds whatever the zoom, and the Parquet store is sorted by
``(rank, pid, tid, kind, ts_ns)``, which mixes the kinds of one thread and knows nothing of nesting.
So at first use (or at import) the events are read once and kept beside the profile in
``<profile>/derived/timeline-<digest>/`` as plain ``.npy`` columns that later processes memory-map:

- rows: one per host thread (``host/<rank>/<pid>/<tid>``) and per GPU stream
  (``stream/<rank>/<device>/<stream>``); within a row events are sorted by ``(depth, ts_ns)``, where
  depth is the nesting level (the number of the row's events still open at the event's start);
- ``cum``: the summed durations of the earlier events of the same (row, depth) segment. Events of
  one depth do not overlap, so the time they cover up to any instant is a prefix sum and a binary
  search: the busy time of a pixel column is exact without visiting its events;
- ``perm``/``cts``: the row's events again, grouped by duration class ``floor(log2(dur))`` and
  sorted by start within a class, so the events wider than a pixel are found by binary search in
  the classes that can hold them, never by scanning the small ones.

The existing Parquet files are never modified. The directory name carries a digest of this
package's code and of the profile's part files, so a newer hyperscope or a capture that flushed
more parts builds its own; a read-only store keeps the index in memory only.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from hyperscope.analysis._common import connection
from hyperscope.schema.events import EventKind
from hyperscope.schema.layout import EVENTS_DIR
from hyperscope.store.derived import DERIVED_DIR, source_digest
from hyperscope.store.profile import Profile

log = logging.getLogger("hyperscope.timeline")

I64 = npt.NDArray[np.int64]

#: kinds drawn on a host row (the thread that recorded them)
HOST_KINDS: Final = (
    EventKind.STEP,
    EventKind.ANNOTATION,
    EventKind.PYTHON,
    EventKind.CPU_OP,
    EventKind.RUNTIME,
    EventKind.DRIVER,
)
#: kinds drawn on a device row (GPU index, stream)
DEVICE_KINDS: Final = (
    EventKind.KERNEL,
    EventKind.MEMCPY,
    EventKind.MEMSET,
    EventKind.SYNC,
    EventKind.GPU_ANNOTATION,
)
KINDS: Final[tuple[str, ...]] = tuple(str(k) for k in (*HOST_KINDS, *DEVICE_KINDS))
#: duration classes: floor(log2(dur_ns)), 0 for 0 and 1 ns
CLASSES: Final = 64
#: bits of an event id that hold the row number within its part file
ROW_BITS: Final = 40
COLUMNS: Final = ("ts", "dur", "name", "kind", "corr", "depth", "src", "cum", "perm", "cts")


@dataclass(frozen=True, slots=True)
class RowInfo:
    """One event row: where its events lie in the index arrays."""

    id: str
    side: str  # "host" or "device"
    rank: int
    node: str
    a: int  # pid (host) or device (device)
    b: int  # tid (host) or stream (device)
    start: int  # first index of the row in the arrays
    stop: int
    depth_starts: tuple[int, ...]  # index where each depth begins (len = depths + 1, last = stop)
    class_starts: tuple[int, ...]  # index into perm/cts where each class begins (len CLASSES + 1)
    t_min: int  # earliest start and latest end of the row's events
    t_max: int

    @property
    def depths(self) -> int:
        return len(self.depth_starts) - 1


@dataclass(frozen=True)
class Index:
    """The arrays and rows of one profile's timeline index (see the module docstring)."""

    rows: tuple[RowInfo, ...]
    names: tuple[str, ...]
    parts: tuple[str, ...]  # part file names, in event-id order
    ts: I64
    dur: I64
    name: npt.NDArray[np.int32]
    kind: npt.NDArray[np.int8]
    corr: I64  # -1 where the event has no correlation
    depth: npt.NDArray[np.uint16]
    src: I64  # event id: part number << ROW_BITS | row in that part
    cum: I64
    perm: I64
    cts: I64

    @functools.cached_property
    def by_id(self) -> dict[str, RowInfo]:
        return {r.id: r for r in self.rows}


_CACHE: dict[Path, Index] = {}
_LOCK = threading.Lock()
_LOCKS: dict[Path, threading.Lock] = {}


def code_digest() -> str:
    """A digest of this package's source: an index built by other code is never read."""
    return source_digest(Path(__file__).parent)


def _parts(profile: Profile) -> list[Path]:
    return sorted((profile.path / EVENTS_DIR).glob("*.parquet"))


def index_dir(profile: Profile) -> Path:
    """Where the index of the profile as it is now lives (parts listed by name and size)."""
    digest = hashlib.sha256(code_digest().encode())
    for part in _parts(profile):
        digest.update(f"{part.name}:{part.stat().st_size};".encode())
    return profile.path / DERIVED_DIR / f"timeline-{digest.hexdigest()[:16]}"


def load(profile: Profile) -> Index:
    """The profile's index: from this process's cache, from disk, or built now (and stored)."""
    where = index_dir(profile)
    with _LOCK:  # one lock per index: building a large one does not hold up the others
        lock = _LOCKS.setdefault(where, threading.Lock())
    with lock:
        found = _CACHE.get(where)
        if found is not None:
            return found
        index = _read(where)
        if index is None:
            index = _build_and_store(profile, where)
        _CACHE[where] = index
        return index


def _build_and_store(profile: Profile, where: Path) -> Index:
    """Build into a staging directory renamed into place (readers see all of it or nothing);
    in memory where the store is read-only."""
    tmp = where.with_name(f".{where.name}.{os.getpid()}-{uuid.uuid4().hex[:6]}")
    try:
        tmp.mkdir(parents=True)
    except OSError as exc:
        log.debug("hyperscope: the timeline index of %s is kept in memory: %s", where, exc)
        return build(profile)
    try:
        index = build(profile, tmp)
        for old in where.parent.glob("timeline-*"):  # indexes of older code or fewer parts
            if old != where:
                shutil.rmtree(old, ignore_errors=True)
        os.rename(tmp, where)
    except OSError as exc:
        log.debug("hyperscope: the timeline index of %s is not stored: %s", where, exc)
        shutil.rmtree(tmp, ignore_errors=True)
        return build(profile)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    found = _read(where)
    return found if found is not None else index


def _read(where: Path) -> Index | None:
    try:
        meta = json.loads((where / "meta.json").read_text())
        arrays = {c: np.load(where / f"{c}.npy", mmap_mode="r") for c in COLUMNS}
    except (OSError, ValueError):
        return None
    rows = tuple(
        RowInfo(**{**r, "depth_starts": tuple(r["depth_starts"]), "class_starts": tuple(r["class_starts"])})
        for r in meta["rows"]
    )
    return Index(rows=rows, names=tuple(meta["names"]), parts=tuple(meta["parts"]), **arrays)


def _sq(text: str) -> str:
    return text.replace("'", "''")


_DTYPES: Final = {
    "ts": np.int64,
    "dur": np.int64,
    "name": np.int32,
    "kind": np.int8,
    "corr": np.int64,
    "depth": np.uint16,
    "src": np.int64,
    "cum": np.int64,
    "perm": np.int64,
    "cts": np.int64,
}


def build(profile: Profile, out: Path | None = None) -> Index:
    """Read the profile's drawable events and arrange them (see the module docstring).

    One rank at a time (rows never span ranks, and the store's row groups are sorted by rank, so
    each query reads only that rank's): memory stays that of the largest rank, not the profile's.
    With ``out``, the columns are written there as ``.npy`` files as they are filled.
    """
    parts = _parts(profile)
    kinds_sql = ", ".join(f"'{k}'" for k in KINDS)
    host_sql = ", ".join(f"'{k}'" for k in HOST_KINDS)
    kind_case = " ".join(f"WHEN '{k}' THEN {i}" for i, k in enumerate(KINDS))
    with connection(profile) as con:
        if parts:
            files = ", ".join(f"'{_sq(str(p))}'" for p in parts)
            con.execute(
                "CREATE TEMP TABLE fid AS SELECT * FROM (VALUES "
                + ", ".join(f"('{_sq(str(p))}', {i})" for i, p in enumerate(parts))
                + ") t(filename, fid)"
            )
            source = f"read_parquet([{files}], filename = true, file_row_number = true)"
        else:
            con.execute("CREATE TEMP TABLE fid (filename VARCHAR, fid BIGINT)")
            source = "(SELECT *, '' AS filename, 0::BIGINT AS file_row_number FROM events)"
        con.execute(
            f"""CREATE TEMP VIEW ev AS
            SELECT CASE WHEN kind IN ({host_sql}) THEN 'host' ELSE 'device' END AS side, rank,
                   coalesce(node, '') AS node,
                   coalesce(CASE WHEN kind IN ({host_sql}) THEN pid ELSE coalesce(device, pid) END, -1) AS a,
                   coalesce(CASE WHEN kind IN ({host_sql}) THEN tid ELSE coalesce(stream, tid) END, -1) AS b,
                   CASE kind {kind_case} END AS kind, coalesce(name, '') AS name, ts_ns,
                   greatest(coalesce(dur_ns, 0), 0) AS dur, coalesce(correlation, -1) AS corr,
                   (fid::BIGINT << {ROW_BITS}) | file_row_number::BIGINT AS src
            FROM {source} JOIN fid USING (filename)
            WHERE kind IN ({kinds_sql}) AND ph = 'X' AND ts_ns IS NOT NULL"""
        )
        rows = con.execute(
            "SELECT side, rank, any_value(node), a, b, count(*) FROM ev GROUP BY side, rank, a, b "
            "ORDER BY 2, 1, 4, 5"
        ).fetchall()
        con.execute(
            "CREATE TEMP TABLE nm AS SELECT name, (row_number() OVER (ORDER BY name) - 1)::INT AS nid "
            "FROM (SELECT DISTINCT name FROM ev)"
        )
        names = [str(n) for (n,) in con.execute("SELECT name FROM nm ORDER BY nid").fetchall()]
        total = sum(int(r[5]) for r in rows)
        arrays = {c: _alloc(out, c, total) for c in COLUMNS}
        infos: list[RowInfo] = []
        start = 0
        for rank in sorted({int(r[1]) for r in rows}):
            mine = [r for r in rows if int(r[1]) == rank]
            got = con.execute(
                "SELECT ev.side, ev.a, ev.b, nm.nid, ev.kind::TINYINT AS kind, ev.ts_ns, ev.dur, ev.corr, "
                "ev.src FROM ev JOIN nm USING (name) WHERE ev.rank = $rank "
                "ORDER BY ev.side, ev.a, ev.b, ev.ts_ns, ev.dur DESC, ev.src",
                {"rank": rank},
            ).fetchnumpy()
            offset = 0
            for side, _, node, a, b, count in sorted(mine, key=lambda r: (str(r[0]), int(r[3]), int(r[4]))):
                n = int(count)
                sl = slice(offset, offset + n)
                row_id = f"host/{rank}/{a}/{b}" if side == "host" else f"stream/{rank}/{a}/{b}"
                infos.append(
                    _fill_row(arrays, start, got, sl, row_id, str(side), rank, str(node), int(a), int(b))
                )
                start += n
                offset += n
            del got
        rows_order = sorted(infos, key=lambda r: r.start)
        if out is not None:
            for arr in arrays.values():
                if isinstance(arr, np.memmap):
                    arr.flush()
            meta: dict[str, Any] = {
                "rows": [{f: getattr(r, f) for f in RowInfo.__slots__} for r in rows_order],
                "names": names,
                "parts": [p.name for p in parts],
            }
            (out / "meta.json").write_text(json.dumps(meta))
    return Index(rows=tuple(rows_order), names=tuple(names), parts=tuple(p.name for p in parts), **arrays)


def _alloc(out: Path | None, column: str, n: int) -> Any:
    dtype = np.dtype(_DTYPES[column])
    if out is None:
        return np.empty(n, dtype=dtype)
    return np.lib.format.open_memmap(out / f"{column}.npy", mode="w+", dtype=dtype, shape=(n,))


def _fill_row(
    arrays: dict[str, Any],
    start: int,
    got: dict[str, Any],
    sl: slice,
    row_id: str,
    side: str,
    rank: int,
    node: str,
    a: int,
    b: int,
) -> RowInfo:
    """One row's events, sorted by (start, longer first), laid out by (depth, start) at ``start``."""
    ts = np.asarray(got["ts_ns"][sl], dtype=np.int64)
    dur = np.asarray(got["dur"][sl], dtype=np.int64)
    n = len(ts)
    depth = _depths(ts, dur)
    cls = np.zeros(n, dtype=np.int64)
    pos = dur > 0
    cls[pos] = np.frexp(dur[pos].astype(np.float64))[1] - 1
    by_class = np.argsort(cls, kind="stable")  # (class, ts)
    order = np.argsort(depth, kind="stable")  # (depth, ts)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(n)
    ts, dur, depth = ts[order], dur[order], depth[order]
    seg_start = np.r_[0, np.flatnonzero(np.diff(depth)) + 1]
    seg_of = np.zeros(n, dtype=np.int64)
    seg_of[seg_start] = 1
    seg_of = np.cumsum(seg_of) - 1
    total = np.cumsum(dur) - dur
    stop = start + n
    arrays["ts"][start:stop] = ts
    arrays["dur"][start:stop] = dur
    arrays["depth"][start:stop] = depth
    arrays["cum"][start:stop] = total - total[seg_start][seg_of]
    for column, key in (("name", "nid"), ("kind", "kind"), ("corr", "corr"), ("src", "src")):
        arrays[column][start:stop] = np.asarray(got[key][sl])[order]
    perm = inverse[by_class]
    arrays["perm"][start:stop] = perm + start
    arrays["cts"][start:stop] = ts[perm]
    depth_starts = np.searchsorted(depth, np.arange(int(depth[-1]) + 2)) + start
    class_starts = np.searchsorted(np.sort(cls), np.arange(CLASSES + 1)) + start
    return RowInfo(
        row_id, side, rank, node, a, b, start, stop,
        tuple(int(x) for x in depth_starts), tuple(int(x) for x in class_starts),
        int(ts.min()), int((ts + dur).max()),
    )  # fmt: skip


def _depths(ts: I64, dur: I64) -> I64:
    """Each event's lane: the first whose previous event has ended, in order of (start, longer
    first). For properly nested events that is the nesting depth, computed without a loop (the
    events still open at each start); where events overlap without nesting (some host threads, a
    kernel overlapping another on its stream) lanes are packed one event at a time, so that events
    of one lane never overlap: what makes a column's busy time exact.
    """
    n = len(ts)
    ends = ts + dur
    open_ = np.arange(n) - np.searchsorted(np.sort(ends), ts, side="right")
    depth: I64 = np.clip(open_, 0, 65535).astype(np.int64)
    if n < 2 or _disjoint_lanes(ts, ends, depth):
        return depth
    lanes: list[int] = []  # end of the last event of each lane
    out = np.empty(n, dtype=np.int64)
    for i, (t, e) in enumerate(zip(ts.tolist(), ends.tolist(), strict=True)):
        for lane, end in enumerate(lanes):
            if end <= t:
                lanes[lane] = e
                out[i] = lane
                break
        else:
            out[i] = len(lanes)
            lanes.append(e)
    return np.minimum(out, 65535)


def _disjoint_lanes(ts: I64, ends: I64, depth: I64) -> bool:
    """Whether no two events of one lane overlap."""
    order = np.argsort(depth, kind="stable")
    d, t, e = depth[order], ts[order], ends[order]
    same = d[1:] == d[:-1]
    return not bool(np.any(same & (t[1:] < e[:-1])))


def span(index: Index) -> tuple[int, int]:
    """Earliest start and latest end of the drawable events (0, 0 when there are none)."""
    if not index.rows:
        return 0, 0
    return min(r.t_min for r in index.rows), max(r.t_max for r in index.rows)
