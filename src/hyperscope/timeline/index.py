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
from hyperscope.store.profile import Profile

log = logging.getLogger("hyperscope.timeline")

I64 = npt.NDArray[np.int64]

DERIVED_DIR: Final = "derived"
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


@functools.cache
def code_digest() -> str:
    """A digest of this package's source: an index built by other code is never read."""
    digest = hashlib.sha256()
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:12]


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
    with _LOCK:
        found = _CACHE.get(where)
        if found is not None:
            return found
        index = _read(where)
        if index is None:
            index = build(profile)
            _store(index, where)
        _CACHE[where] = index
        return index


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


def _store(index: Index, where: Path) -> None:
    """Write beside the profile, best effort (a read-only store keeps it in memory only)."""
    tmp = where.with_name(f".{where.name}.{os.getpid()}-{uuid.uuid4().hex[:6]}")
    try:
        tmp.mkdir(parents=True)
        for c in COLUMNS:
            np.save(tmp / f"{c}.npy", getattr(index, c))
        meta: dict[str, Any] = {
            "rows": [{f: getattr(r, f) for f in RowInfo.__slots__} for r in index.rows],
            "names": list(index.names),
            "parts": list(index.parts),
        }
        (tmp / "meta.json").write_text(json.dumps(meta))
        for old in where.parent.glob("timeline-*"):  # indexes of older code or fewer parts
            if old != where:
                shutil.rmtree(old, ignore_errors=True)
        os.rename(tmp, where)
    except OSError as exc:
        log.debug("hyperscope: the timeline index of %s is not stored: %s", where, exc)
        shutil.rmtree(tmp, ignore_errors=True)


def _sq(text: str) -> str:
    return text.replace("'", "''")


def build(profile: Profile) -> Index:
    """Read the profile's drawable events once and arrange them (see the module docstring)."""
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
            f"""CREATE TEMP TABLE ev AS
            SELECT CASE WHEN kind IN ({host_sql}) THEN 'host' ELSE 'device' END AS side, rank,
                   coalesce(node, '') AS node,
                   CASE WHEN kind IN ({host_sql}) THEN pid ELSE coalesce(device, pid) END AS a,
                   CASE WHEN kind IN ({host_sql}) THEN tid ELSE coalesce(stream, tid) END AS b,
                   CASE kind {kind_case} END AS kind, coalesce(name, '') AS name, ts_ns,
                   greatest(coalesce(dur_ns, 0), 0) AS dur, coalesce(correlation, -1) AS corr,
                   (fid::BIGINT << {ROW_BITS}) | file_row_number::BIGINT AS src
            FROM {source} JOIN fid USING (filename)
            WHERE kind IN ({kinds_sql}) AND ph = 'X' AND ts_ns IS NOT NULL"""
        )
        rows = con.execute(
            "SELECT side, rank, any_value(node), coalesce(a, -1), coalesce(b, -1), count(*) FROM ev "
            "GROUP BY side, rank, coalesce(a, -1), coalesce(b, -1) ORDER BY 1, 2, 4, 5"
        ).fetchall()
        names = [str(n) for (n,) in con.execute("SELECT DISTINCT name FROM ev ORDER BY 1").fetchall()]
        con.execute(
            "CREATE TEMP TABLE rw AS SELECT * FROM (VALUES "
            + ", ".join(f"('{s}', {r}, {a}, {b}, {i})" for i, (s, r, _, a, b, _) in enumerate(rows))
            + ") t(side, rank, a, b, rid)"
            if rows
            else "CREATE TEMP TABLE rw (side VARCHAR, rank INT, a BIGINT, b BIGINT, rid INT)"
        )
        con.execute(
            "CREATE TEMP TABLE nm AS SELECT name, (row_number() OVER (ORDER BY name) - 1)::INT AS nid "
            "FROM (SELECT DISTINCT name FROM ev)"
        )
        got = con.execute(
            "SELECT rw.rid, nm.nid, ev.kind::TINYINT AS kind, ev.ts_ns, ev.dur, ev.corr, ev.src "
            "FROM ev JOIN rw ON ev.side = rw.side AND ev.rank = rw.rank "
            "AND coalesce(ev.a, -1) = rw.a AND coalesce(ev.b, -1) = rw.b JOIN nm USING (name) "
            "ORDER BY rw.rid, ev.ts_ns, ev.dur DESC, ev.src"
        ).fetchnumpy()
    rid = np.asarray(got["rid"], dtype=np.int64)
    ts = np.asarray(got["ts_ns"], dtype=np.int64)
    dur = np.asarray(got["dur"], dtype=np.int64)
    n_rows = len(rows)
    bounds = np.searchsorted(rid, np.arange(n_rows + 1))
    depth = np.zeros(len(ts), dtype=np.int64)
    for r in range(n_rows):
        lo, hi = int(bounds[r]), int(bounds[r + 1])
        depth[lo:hi] = _depths(ts[lo:hi], dur[lo:hi])
    cls = np.zeros(len(ts), dtype=np.int64)
    pos = dur > 0
    cls[pos] = np.frexp(dur[pos].astype(np.float64))[1] - 1
    by_class = np.argsort(rid * CLASSES + cls, kind="stable")  # (row, class, ts) in (row, ts) order
    order = np.argsort(rid * 65536 + depth, kind="stable")  # (row, depth, ts)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    ts, dur, depth, rid = ts[order], dur[order], depth[order], rid[order]
    perm = inverse[by_class]
    seg_key = rid * 65536 + depth
    seg_start = np.r_[0, np.flatnonzero(np.diff(seg_key)) + 1] if len(ts) else np.zeros(0, np.int64)
    total = np.cumsum(dur) - dur  # exclusive prefix over all events
    seg_of = np.zeros(len(ts), dtype=np.int64)
    if len(ts):
        seg_of[seg_start] = 1
        seg_of = np.cumsum(seg_of) - 1
    cum = total - total[seg_start][seg_of] if len(ts) else total
    class_key = np.sort(rid * CLASSES + cls)  # the keys of perm's order
    infos = []
    for r, (side, rank, node, a, b, _) in enumerate(rows):
        lo, hi = int(bounds[r]), int(bounds[r + 1])
        starts = np.searchsorted(seg_key[lo:hi], r * 65536 + np.arange(int(depth[hi - 1]) + 2)) + lo
        cstarts = np.searchsorted(class_key, r * CLASSES + np.arange(CLASSES + 1))
        row_id = f"host/{rank}/{a}/{b}" if side == "host" else f"stream/{rank}/{a}/{b}"
        infos.append(
            RowInfo(
                row_id, str(side), int(rank), str(node), int(a), int(b), lo, hi,
                tuple(int(x) for x in starts), tuple(int(x) for x in cstarts),
            )
        )  # fmt: skip
    return Index(
        rows=tuple(infos),
        names=tuple(names),
        parts=tuple(p.name for p in parts),
        ts=ts,
        dur=dur,
        name=np.asarray(got["nid"], dtype=np.int32)[order],
        kind=np.asarray(got["kind"], dtype=np.int8)[order],
        corr=np.asarray(got["corr"], dtype=np.int64)[order],
        depth=depth.astype(np.uint16),
        src=np.asarray(got["src"], dtype=np.int64)[order],
        cum=cum.astype(np.int64),
        perm=perm.astype(np.int64),
        cts=ts[perm],
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
