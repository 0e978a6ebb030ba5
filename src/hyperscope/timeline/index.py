"""The timeline's level-of-detail index: every drawable event of a profile in per-row arrays.

A tile must answer in milliseconds whatever the zoom, and the Parquet store is sorted by
``(rank, pid, tid, kind, ts_ns)``, which mixes the kinds of one thread and knows nothing of nesting.
So once per profile (at import, at the end of a capture, or at first view) the events are read once
and kept beside the profile in ``<profile>/derived/timeline-<digest>/`` as plain ``.npy`` columns
that later processes memory-map:

- rows: one per host thread (``host/<rank>/<pid>/<tid>``) and per GPU stream
  (``stream/<rank>/<device>/<stream>``); within a row events are sorted by ``(depth, ts_ns)``, where
  depth is the nesting level (the number of the row's events still open at the event's start);
- ``cum`` (one more entry than events): the summed durations of every earlier event of the index.
  An event's duration is ``cum[i + 1] - cum[i]`` (not stored a second time), and events of one
  depth do not overlap, so the time they cover up to any instant is a difference of two ``cum``
  entries found by binary search: the busy time of a pixel column is exact without visiting its
  events;
- ``perm``: the row's events again (positions relative to the row's start), grouped by duration
  class ``floor(log2(dur))`` and sorted by start within a class, so the events wider than a pixel
  are found by binary search in the classes that can hold them (all of a tile's (row, class)
  searches at once, ``tile._class_ranges``), never by scanning the small ones;
- instants (``ph`` ``i``/``I``, not ``[memory]`` or counters): ``m_ts``, ``m_name``, ``m_src`` per
  row, sorted by ``(ts, id)``, for the tiles' marks. A row may hold only instants (no events).

Each column takes the narrowest integer type its values fit (``name`` uint16 below 65,536 names,
``corr`` int32, ``depth`` uint8 up to 255 levels, ``src`` and ``perm`` uint32), written in the
``.npy`` header itself; ``ts`` and ``cum`` are int64. An event's id (``src``) is its row number in
the profile's part files taken in name order (``offsets`` in ``meta.json`` says where each part
begins): below 2^53, so JSON-safe, and stable for a given index.

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
import pyarrow.parquet as pq

from hyperscope.analysis._common import connection
from hyperscope.schema.events import EventKind
from hyperscope.schema.layout import EVENTS_DIR
from hyperscope.store.derived import DERIVED_DIR, source_digest
from hyperscope.store.profile import Profile

log = logging.getLogger("hyperscope.timeline")

I64 = npt.NDArray[np.int64]
Ints = npt.NDArray[Any]  # an integer column of the narrowest type that holds it

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
#: instants (ph i or I) of these kinds are not marks: the memory track and counters draw them
NOT_MARKS: Final = (EventKind.MEMORY, EventKind.COUNTER)
#: duration classes: floor(log2(dur_ns)), 0 for 0 and 1 ns
CLASSES: Final = 64
COLUMNS: Final = ("ts", "cum", "name", "kind", "corr", "depth", "src", "perm", "m_ts", "m_name", "m_src")
#: depth is clipped there (the lanes below it may overlap)
MAX_DEPTH: Final = 65535


@dataclass(frozen=True, slots=True)
class RowInfo:
    """One event row: where its events (and instants) lie in the index arrays."""

    id: str
    side: str  # "host" or "device"
    rank: int
    node: str
    a: int  # pid (host) or device (device)
    b: int  # tid (host) or stream (device)
    start: int  # first index of the row in the arrays
    stop: int
    depth_starts: tuple[int, ...]  # index where each depth begins (len = depths + 1, last = stop)
    class_starts: tuple[int, ...]  # index into perm where each class begins (len CLASSES + 1)
    t_min: int  # earliest start and latest end of the row's events and instants
    t_max: int
    m_start: int = 0  # the row's instants: m_ts[m_start:m_stop]
    m_stop: int = 0

    @property
    def depths(self) -> int:
        return len(self.depth_starts) - 1


class Durations:
    """The events' durations, read from ``cum`` (``cum[i + 1] - cum[i]``) as an int64 array would
    be: ``dur[i]``, ``dur[lo:hi]``, ``dur[indices]``, ``dur[mask]``, and ``np.asarray(dur)`` (which
    reads them all)."""

    __slots__ = ("_cum",)

    def __init__(self, cum: Ints) -> None:
        self._cum = cum

    def __len__(self) -> int:
        return len(self._cum) - 1

    @property
    def dtype(self) -> np.dtype[np.int64]:
        return np.dtype(np.int64)

    def __getitem__(self, key: Any) -> Any:
        n = len(self)
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step == 1:
                c = np.asarray(self._cum[start : max(stop, start) + 1], dtype=np.int64)
                return c[1:] - c[:-1]
            key = np.arange(start, stop, step)
        if isinstance(key, int | np.integer):
            i = int(key) + n if key < 0 else int(key)
            if not 0 <= i < n:
                raise IndexError(f"index {key} is out of bounds for {n} durations")
            return np.int64(self._cum[i + 1] - self._cum[i])
        idx = np.asarray(key)
        if idx.dtype == np.bool_:
            idx = np.flatnonzero(idx)
        idx = idx.astype(np.int64, copy=False)
        idx = np.where(idx < 0, idx + n, idx)
        return np.asarray(self._cum[idx + 1], dtype=np.int64) - np.asarray(self._cum[idx], dtype=np.int64)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> I64:
        c = np.asarray(self._cum, dtype=np.int64)
        out = c[1:] - c[:-1]
        return out if dtype is None else out.astype(dtype)


@dataclass(frozen=True)
class Index:
    """The arrays and rows of one profile's timeline index (see the module docstring)."""

    rows: tuple[RowInfo, ...]
    names: tuple[str, ...]
    parts: tuple[str, ...]  # part file names, in event-id order
    offsets: tuple[int, ...]  # event id of each part's first row (len parts + 1, last = all rows)
    ts: I64
    cum: I64  # len(ts) + 1: durations summed over the earlier events of the index
    name: Ints
    kind: npt.NDArray[np.int8]
    corr: Ints  # -1 where the event has no correlation
    depth: Ints
    src: Ints  # event id: row number over the part files, in name order
    perm: Ints  # relative to the row's start
    m_ts: I64  # instants
    m_name: Ints
    m_src: Ints

    @functools.cached_property
    def by_id(self) -> dict[str, RowInfo]:
        return {r.id: r for r in self.rows}

    @property
    def dur(self) -> Durations:
        return Durations(self.cum)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (what the index takes on disk, but the few of the headers)."""
        return sum(int(getattr(self, c).nbytes) for c in COLUMNS)


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


def _lock(where: Path) -> threading.Lock:
    with _LOCK:  # one lock per index: building a large one does not hold up the others
        return _LOCKS.setdefault(where, threading.Lock())


def load(profile: Profile) -> Index:
    """The profile's index: from this process's cache, from disk, or built now (and stored)."""
    where = index_dir(profile)
    with _lock(where):
        found = _CACHE.get(where)
        if found is not None:
            return found
        index = _read(where)
        if index is None:
            index = _build_and_store(profile, where)
        _CACHE[where] = index
        return index


def store(profile: Profile) -> bool:
    """Build the profile's index and keep it beside the profile, unless it is there already (what
    import and the end of a capture do, so that the first view reads it from disk). False where the
    store is read-only: the first view then builds it in memory. Nothing is kept in this process."""
    where = index_dir(profile)
    with _lock(where):
        if where in _CACHE or (where / "meta.json").is_file():
            return True
        return _build_into(profile, where) is not None


def _build_into(profile: Profile, where: Path) -> Index | None:
    """Build into a staging directory renamed into place (readers see all of it or nothing); None
    when it cannot be written."""
    tmp = where.with_name(f".{where.name}.{os.getpid()}-{uuid.uuid4().hex[:6]}")
    try:
        tmp.mkdir(parents=True)
    except OSError as exc:
        log.debug("hyperscope: the timeline index of %s is kept in memory: %s", where, exc)
        return None
    try:
        index = build(profile, tmp)
        for old in where.parent.glob("timeline-*"):  # indexes of older code or fewer parts
            if old != where:
                shutil.rmtree(old, ignore_errors=True)
        os.rename(tmp, where)
    except OSError as exc:
        log.debug("hyperscope: the timeline index of %s is not stored: %s", where, exc)
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    found = _read(where)
    return found if found is not None else index


def _build_and_store(profile: Profile, where: Path) -> Index:
    """Built and stored; in memory where the store is read-only."""
    index = _build_into(profile, where)
    return index if index is not None else build(profile)


def _read(where: Path) -> Index | None:
    try:
        meta = json.loads((where / "meta.json").read_text())
        # plain arrays over the mapped files: slicing a memmap costs a Python call, hundreds a tile
        arrays = {c: np.asarray(np.load(where / f"{c}.npy", mmap_mode="r")) for c in COLUMNS}
        rows = tuple(
            RowInfo(
                **{**r, "depth_starts": tuple(r["depth_starts"]), "class_starts": tuple(r["class_starts"])}
            )
            for r in meta["rows"]
        )
        names, parts, offsets = tuple(meta["names"]), tuple(meta["parts"]), tuple(meta["offsets"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Index(rows=rows, names=names, parts=parts, offsets=offsets, **arrays)


def _sq(text: str) -> str:
    return text.replace("'", "''")


def _int_type(lo: int, hi: int, *candidates: type[np.integer[Any]]) -> np.dtype[Any]:
    """The first of ``candidates`` that holds every value in ``[lo, hi]`` (else int64)."""
    for c in candidates:
        info = np.iinfo(c)
        if info.min <= lo and hi <= info.max:
            return np.dtype(c)
    return np.dtype(np.int64)


class _Columns:
    """The index's columns as they are filled: ``.npy`` files under ``out`` (else arrays in memory).
    ``depth``, whose range is only known row by row, starts as uint8 and is rewritten as uint16
    when a row first goes deeper than 255 levels."""

    def __init__(self, out: Path | None, shapes: dict[str, tuple[int, np.dtype[Any]]]) -> None:
        self.out = out
        self.arrays: dict[str, Any] = {c: self._alloc(c, n, dt) for c, (n, dt) in shapes.items()}

    def _alloc(self, column: str, n: int, dtype: np.dtype[Any], suffix: str = "") -> Any:
        if self.out is None:
            return np.empty(n, dtype=dtype)
        path = self.out / f"{column}{suffix}.npy"
        return np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(n,))

    def put(self, column: str, start: int, values: npt.NDArray[Any]) -> None:
        arr = self.arrays[column]
        if len(values) and arr.dtype.itemsize < 8:
            info = np.iinfo(arr.dtype)
            if int(values.min()) < info.min or int(values.max()) > info.max:
                arr = self._widen(
                    column, _int_type(int(values.min()), int(values.max()), np.uint16, np.int32)
                )
        arr[start : start + len(values)] = values

    def _widen(self, column: str, dtype: np.dtype[Any]) -> Any:
        old = self.arrays[column]
        new = self._alloc(column, len(old), dtype, suffix=".wider")
        step = 1 << 24
        for k in range(0, len(old), step):
            new[k : k + step] = old[k : k + step]
        if self.out is not None:
            new.flush()
            del old
            os.replace(self.out / f"{column}.wider.npy", self.out / f"{column}.npy")
        self.arrays[column] = new
        return new

    def flush(self) -> None:
        for arr in self.arrays.values():
            if isinstance(arr, np.memmap):
                arr.flush()


def build(profile: Profile, out: Path | None = None) -> Index:
    """Read the profile's drawable events and instants and arrange them (module docstring).

    One rank at a time (rows never span ranks, and the store's row groups are sorted by rank, so
    each query reads only that rank's): memory stays that of the largest rank, not the profile's.
    With ``out``, the columns are written there as ``.npy`` files as they are filled.
    """
    parts = _parts(profile)
    counts = [pq.ParquetFile(p).metadata.num_rows for p in parts]
    offsets = [0, *np.cumsum(counts, dtype=np.int64).tolist()]
    kinds_sql = ", ".join(f"'{k}'" for k in KINDS)
    host_sql = ", ".join(f"'{k}'" for k in HOST_KINDS)
    not_marks = ", ".join(f"'{k}'" for k in NOT_MARKS)
    kind_case = " ".join(f"WHEN '{k}' THEN {i}" for i, k in enumerate(KINDS))
    on_device = "device IS NOT NULL AND stream IS NOT NULL"
    with connection(profile) as con:
        if parts:
            files = ", ".join(f"'{_sq(str(p))}'" for p in parts)
            con.execute(
                "CREATE TEMP TABLE fid AS SELECT * FROM (VALUES "
                + ", ".join(f"('{_sq(str(p))}', {off})" for p, off in zip(parts, offsets, strict=False))
                + ") t(filename, base)"
            )
            source = f"read_parquet([{files}], filename = true, file_row_number = true)"
        else:
            con.execute("CREATE TEMP TABLE fid (filename VARCHAR, base BIGINT)")
            source = "(SELECT *, '' AS filename, 0::BIGINT AS file_row_number FROM events)"
        con.execute(
            f"""CREATE TEMP VIEW ev AS
            SELECT CASE WHEN kind IN ({host_sql}) THEN 'host' ELSE 'device' END AS side, rank,
                   coalesce(node, '') AS node,
                   coalesce(CASE WHEN kind IN ({host_sql}) THEN pid ELSE coalesce(device, pid) END, -1) AS a,
                   coalesce(CASE WHEN kind IN ({host_sql}) THEN tid ELSE coalesce(stream, tid) END, -1) AS b,
                   CASE kind {kind_case} END AS kind, coalesce(name, '') AS name, ts_ns,
                   greatest(coalesce(dur_ns, 0), 0) AS dur, coalesce(correlation, -1) AS corr,
                   base + file_row_number::BIGINT AS src
            FROM {source} JOIN fid USING (filename)
            WHERE kind IN ({kinds_sql}) AND ph = 'X' AND ts_ns IS NOT NULL"""
        )
        con.execute(
            f"""CREATE TEMP TABLE inst AS
            SELECT CASE WHEN {on_device} THEN 'device' ELSE 'host' END AS side, rank,
                   coalesce(node, '') AS node,
                   coalesce(CASE WHEN {on_device} THEN device ELSE pid END, -1) AS a,
                   coalesce(CASE WHEN {on_device} THEN stream ELSE tid END, -1) AS b,
                   coalesce(name, '') AS name, ts_ns, base + file_row_number::BIGINT AS src
            FROM {source} JOIN fid USING (filename)
            WHERE ph IN ('i', 'I') AND kind NOT IN ({not_marks}) AND ts_ns IS NOT NULL"""
        )
        found = con.execute(
            "SELECT side, rank, any_value(node), a, b, count(*), min(ts_ns), max(ts_ns + dur), "
            "min(corr), max(corr) FROM ev GROUP BY side, rank, a, b"
        ).fetchall()
        marks = con.execute(
            "SELECT side, rank, any_value(node), a, b, count(*), min(ts_ns), max(ts_ns) "
            "FROM inst GROUP BY side, rank, a, b"
        ).fetchall()
        con.execute(
            "CREATE TEMP TABLE nm AS SELECT name, (row_number() OVER (ORDER BY name) - 1)::INT AS nid "
            "FROM (SELECT DISTINCT name FROM ev UNION SELECT DISTINCT name FROM inst)"
        )
        names = [str(n) for (n,) in con.execute("SELECT name FROM nm ORDER BY nid").fetchall()]
        rows: dict[tuple[int, str, int, int], dict[str, Any]] = {}
        for side, rank, node, a, b, n, lo, hi, *_ in found:
            key = (int(rank), str(side), int(a), int(b))
            rows[key] = {"node": str(node), "n": int(n), "m": 0, "lo": int(lo), "hi": int(hi)}
        for side, rank, node, a, b, n, lo, hi in marks:
            key = (int(rank), str(side), int(a), int(b))
            r = rows.setdefault(key, {"node": str(node), "n": 0, "lo": int(lo), "hi": int(hi)})
            r["m"], r["lo"], r["hi"] = int(n), min(r["lo"], int(lo)), max(r["hi"], int(hi))
        total = sum(r["n"] for r in rows.values())
        corr_lo = min((int(f[8]) for f in found), default=-1)
        corr_hi = max((int(f[9]) for f in found), default=-1)
        widest = max((r["n"] for r in rows.values()), default=0)
        name_type = _int_type(0, len(names) - 1, np.uint16, np.int32)
        src_type = _int_type(0, offsets[-1], np.uint32)
        cols = _Columns(
            out,
            {
                "ts": (total, np.dtype(np.int64)),
                "cum": (total + 1, np.dtype(np.int64)),
                "name": (total, name_type),
                "kind": (total, np.dtype(np.int8)),
                "corr": (total, _int_type(corr_lo, corr_hi, np.int32)),
                "depth": (total, np.dtype(np.uint8)),
                "src": (total, src_type),
                "perm": (total, _int_type(0, widest, np.uint32)),
            },
        )
        m = con.execute(
            "SELECT nm.nid, inst.ts_ns, inst.src FROM inst JOIN nm USING (name) "
            "ORDER BY inst.rank, inst.side, inst.a, inst.b, inst.ts_ns, inst.src"
        ).fetchnumpy()
        m_arrays = {
            "m_ts": np.asarray(m["ts_ns"], dtype=np.int64),
            "m_name": np.asarray(m["nid"]).astype(name_type),
            "m_src": np.asarray(m["src"]).astype(src_type),
        }
        del m
        infos: list[RowInfo] = []
        start, m_start, busy = 0, 0, 0
        for rank in sorted({k[0] for k in rows}):
            keys = sorted(k for k in rows if k[0] == rank)  # (side, a, b), as the query orders them
            got = con.execute(
                "SELECT ev.side, ev.a, ev.b, nm.nid, ev.kind::TINYINT AS kind, ev.ts_ns, ev.dur, ev.corr, "
                "ev.src FROM ev JOIN nm USING (name) WHERE ev.rank = $rank "
                "ORDER BY ev.side, ev.a, ev.b, ev.ts_ns, ev.dur DESC, ev.src",
                {"rank": rank},
            ).fetchnumpy()
            offset = 0
            for key in keys:
                _, side, a, b = key
                r = rows[key]
                n = r["n"]
                row_id = f"host/{rank}/{a}/{b}" if side == "host" else f"stream/{rank}/{a}/{b}"
                sl = slice(offset, offset + n)
                depth_starts, class_starts, busy = _fill_row(cols, start, got, sl, busy)
                infos.append(
                    RowInfo(
                        row_id, side, rank, r["node"], a, b, start, start + n, depth_starts, class_starts,
                        r["lo"], r["hi"], m_start, m_start + r["m"],
                    )
                )  # fmt: skip
                start += n
                offset += n
                m_start += r["m"]
            del got
        cols.arrays["cum"][total] = busy
        cols.flush()
        arrays = {**cols.arrays, **m_arrays}
        if out is not None:
            for c, arr in m_arrays.items():
                np.save(out / f"{c}.npy", arr)
            meta: dict[str, Any] = {
                "rows": [{f: getattr(r, f) for f in RowInfo.__slots__} for r in infos],
                "names": names,
                "parts": [p.name for p in parts],
                "offsets": offsets,
            }
            (out / "meta.json").write_text(json.dumps(meta))
    return Index(
        rows=tuple(infos), names=tuple(names), parts=tuple(p.name for p in parts), offsets=tuple(offsets),
        **arrays,
    )  # fmt: skip


def _fill_row(
    cols: _Columns, start: int, got: dict[str, Any], sl: slice, busy: int
) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """One row's events, sorted by (start, longer first), laid out by (depth, start) at ``start``:
    its depth and class starts, and the durations summed up to its end."""
    ts = np.asarray(got["ts_ns"][sl], dtype=np.int64)
    dur = np.asarray(got["dur"][sl], dtype=np.int64)
    n = len(ts)
    if n == 0:  # a row of instants only: one (empty) level
        return (start, start), (start,) * (CLASSES + 1), busy
    depth = _depths(ts, dur)
    cls = np.zeros(n, dtype=np.int64)
    pos = dur > 0
    cls[pos] = np.frexp(dur[pos].astype(np.float64))[1] - 1
    by_class = np.argsort(cls, kind="stable")  # (class, ts)
    order = np.argsort(depth, kind="stable")  # (depth, ts)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(n)
    ts, dur, depth = ts[order], dur[order], depth[order]
    cum = np.cumsum(dur) - dur + busy
    cols.put("ts", start, ts)
    cols.put("cum", start, cum)
    cols.put("depth", start, depth)
    for column, key in (("name", "nid"), ("kind", "kind"), ("corr", "corr"), ("src", "src")):
        cols.put(column, start, np.asarray(got[key][sl])[order])
    cols.put("perm", start, inverse[by_class])
    depth_starts = np.searchsorted(depth, np.arange(int(depth[-1]) + 2)) + start
    class_starts = np.searchsorted(np.sort(cls), np.arange(CLASSES + 1)) + start
    return (
        tuple(int(x) for x in depth_starts),
        tuple(int(x) for x in class_starts),
        int(cum[-1] + dur[-1]),
    )


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
    depth: I64 = np.clip(open_, 0, MAX_DEPTH).astype(np.int64)
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
    return np.minimum(out, MAX_DEPTH)


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
