"""A time range's statistics, per row and per kind, as Perfetto's area selection gives them.

For rows of the timeline and a window ``[t0, t1)``: how many events overlap it, the time they
cover inside it (clipped to the window), the row's busy time (its depth-0 events, which do not
overlap one another, so their clipped sum is the time the row was busy) as a share of the range,
and the names that took the most time inside it.

Read from the timeline index: within a row the events of one depth are sorted by start and do not
overlap, so the ones that overlap the window are a contiguous run found by bisection, and only its
first event (which may start before ``t0``) and its last (which may end after ``t1``) are clipped:
every event between them lies wholly inside. A whole-run range of a 10M-event profile would still
visit every event (11 s on a loaded machine), so each depth of each row is cut into chunks of
``CHUNK`` events, and per chunk the events' count and time per name and per kind are summed once
(cumulatively, so that any run of whole chunks is a difference of two rows of a table). A range is
then its whole chunks, read from those tables, plus at most two partial chunks at its edges,
computed event by event and clipped exactly: the work grows with the names of the rows and the
chunk size, not with the events in the range. The tables are built on a row's first range, or
by ``prepare`` (the server calls it once a profile's timeline rows are asked for), and kept with
the index (``_chunks``); a depth whose events do overlap (a nesting deeper than the
index keeps) is always read event by event.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from hyperscope.errors import UsageError
from hyperscope.timeline._blocks import searchsorted
from hyperscope.timeline.index import KINDS, Index, RowInfo

__all__ = ["prepare", "range_stats"]

TOP: Final = 10
#: events per chunk: a range reads at most two partial chunks per depth of a row event by event
CHUNK: Final = 4096
#: a depth's name tables hold at most this many cells (chunks × names), and at most a quarter of
#: its events: more names, longer chunks
MAX_CELLS: Final = 1 << 20
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class _Depth:
    """One depth of one row, ``[lo, hi)`` of the index, in chunks of ``size`` events: the names it
    holds (global codes) and, per chunk boundary, the count and time of each name and each kind in
    the chunks before it (``names_n[c] - names_n[a]`` is chunks ``[a, c)``). ``size`` 0: none kept
    (too few events, or events that overlap), read event by event."""

    lo: int
    hi: int
    size: int
    names: I64
    names_n: I64
    names_ns: I64
    kinds_n: I64
    kinds_ns: I64


_TABLES: dict[int, tuple[weakref.ref[Index], dict[tuple[str, int], list[_Depth]]]] = {}
_TABLES_LOCK = threading.Lock()


def _chunks(index: Index, info: RowInfo, chunk: int) -> list[_Depth]:
    """The row's per-depth tables (built on first use, kept while ``index`` lives)."""
    with _TABLES_LOCK:
        found = _TABLES.get(id(index))
        if found is None or found[0]() is not index:
            key = id(index)
            found = (weakref.ref(index, lambda _: _TABLES.pop(key, None)), {})
            _TABLES[key] = found
        per_row = found[1]
    got = per_row.get((info.id, chunk))
    if got is None:  # two threads may both build it: the same tables, one kept
        got = [
            _depth(index, info.depth_starts[d], info.depth_starts[d + 1], chunk) for d in range(info.depths)
        ]
        per_row[(info.id, chunk)] = got
    return got


def prepare(index: Index, chunk: int = CHUNK) -> None:
    """Builds every row's tables now (what a profile's first range would otherwise do: ~0.5 s of
    CPU at 10M events), so that the server can do it while the timeline is looked at."""
    for info in index.rows:
        if info.stop > info.start:
            _chunks(index, info, chunk)


def _depth(index: Index, lo: int, hi: int, chunk: int) -> _Depth:
    none = np.zeros((1, 0), np.int64)
    empty = _Depth(lo, hi, 0, np.zeros(0, np.int64), none, none, none, none)
    m = hi - lo
    if m < 2 * chunk:
        return empty
    ts = np.asarray(index.ts[lo:hi], np.int64)
    dur = index.dur[lo:hi]
    if bool(np.any(ts[:-1] + dur[:-1] > ts[1:])):  # overlapping events: not wholly inside
        return empty
    name = np.asarray(index.name[lo:hi], np.int64)
    present = np.bincount(name, minlength=len(index.names)) > 0
    names = np.flatnonzero(present)
    local = (np.cumsum(present) - 1)[name]
    # cells (chunks × names) at most a quarter of the depth's events: 4 bytes an event for the
    # two name tables, whatever the names (the index itself takes ~32)
    size = max(chunk, -(-m * len(names) // max(1, min(MAX_CELLS, m // 4))))
    if m < 2 * size:
        return empty
    chunks = -(-m // size)
    at = np.arange(m, dtype=np.int64) // size
    weights = dur.astype(np.float64)

    def table(code: I64, width: int, w: Any) -> I64:
        cells = np.bincount(at * width + code, weights=w, minlength=chunks * width)
        out = np.zeros((chunks + 1, width), np.int64)
        np.cumsum(cells.reshape(chunks, width).astype(np.int64), axis=0, out=out[1:])
        return out

    kind = np.asarray(index.kind[lo:hi], np.int64)
    return _Depth(
        lo, hi, size, names, table(local, len(names), None), table(local, len(names), weights),
        table(kind, len(KINDS), None), table(kind, len(KINDS), weights),
    )  # fmt: skip


@dataclass
class _Acc:
    """What a row (or all rows) holds inside the range: count and time per kind (dense) and per
    name (pieces of global codes with their counts and times, summed by ``named``)."""

    kinds_n: I64
    kinds_ns: I64
    name: list[I64]
    name_n: list[I64]
    name_ns: list[I64]

    @classmethod
    def new(cls) -> _Acc:
        return cls(np.zeros(len(KINDS), np.int64), np.zeros(len(KINDS), np.int64), [], [], [])

    def add(self, other: _Acc) -> None:
        self.kinds_n += other.kinds_n
        self.kinds_ns += other.kinds_ns
        self.name += other.name
        self.name_n += other.name_n
        self.name_ns += other.name_ns

    def events(self, index: Index, a: int, b: int, t0: int, t1: int) -> int:
        """Adds the events ``[a, b)`` of one depth that overlap [t0, t1), clipped; their time."""
        if b <= a:
            return 0
        start = np.asarray(index.ts[a:b], np.int64)
        end = start + index.dur[a:b]
        keep = (end > t0) | (start >= t0)  # (start < t1 already); zero-length events inside count
        inside = np.maximum(np.minimum(end, t1) - np.maximum(start, t0), 0)[keep]
        kind = np.asarray(index.kind[a:b], np.int64)[keep]
        self.kinds_n += np.bincount(kind, minlength=len(KINDS))
        self.kinds_ns += np.bincount(kind, weights=inside, minlength=len(KINDS)).astype(np.int64)
        self.name.append(np.asarray(index.name[a:b], np.int64)[keep])
        self.name_n.append(np.ones(len(inside), np.int64))
        self.name_ns.append(inside)
        return int(inside.sum())

    def whole(self, t: _Depth, ca: int, cb: int) -> int:
        """Adds chunks ``[ca, cb)`` of a depth, every event wholly inside; their time."""
        self.kinds_n += t.kinds_n[cb] - t.kinds_n[ca]
        self.kinds_ns += t.kinds_ns[cb] - t.kinds_ns[ca]
        n = t.names_n[cb] - t.names_n[ca]
        seen = np.flatnonzero(n)
        self.name.append(t.names[seen])
        self.name_n.append(n[seen])
        ns = (t.names_ns[cb] - t.names_ns[ca])[seen]
        self.name_ns.append(ns)
        return int(ns.sum())

    def named(self, n_names: int) -> tuple[I64, I64]:
        if not self.name:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        code = np.concatenate(self.name)
        counts = np.bincount(code, weights=np.concatenate(self.name_n), minlength=n_names)
        totals = np.bincount(code, weights=np.concatenate(self.name_ns), minlength=n_names)
        return counts.astype(np.int64), totals.astype(np.int64)


def _depth_range(index: Index, t: _Depth, t0: int, t1: int, acc: _Acc) -> int:
    """Adds the events of one depth that overlap [t0, t1) to ``acc``; returns their time inside.
    The window's ends are found by searches that decode only the blocks where they fall
    (``_blocks``)."""
    found = searchsorted(index.ts, t.lo, t.hi, np.asarray([t0, t1], dtype=np.int64), side="left") - t.lo
    first = max(int(found[0]) - 1, 0)  # one may start before t0
    last = int(found[1])
    if last <= first:
        return 0
    a, b = t.lo + first, t.lo + last
    if t.size:  # whole chunks strictly between the first and the last event: wholly inside
        ca = -(-(first + 1) // t.size)
        cb = (last - 1) // t.size
        if cb > ca:
            return (
                acc.events(index, a, t.lo + ca * t.size, t0, t1)
                + acc.whole(t, ca, cb)
                + acc.events(index, t.lo + cb * t.size, b, t0, t1)
            )
    return acc.events(index, a, b, t0, t1)


def _kinds(counts: I64, totals: I64) -> list[dict[str, Any]]:
    out = [
        {"kind": KINDS[k], "count": int(counts[k]), "total_ns": int(totals[k])}
        for k in np.flatnonzero(counts)
    ]
    return sorted(out, key=lambda d: (-d["total_ns"], d["kind"]))


def _top(index: Index, acc: _Acc, top: int) -> list[dict[str, Any]]:
    counts, totals = acc.named(len(index.names))
    seen = np.flatnonzero(counts)
    order = seen[np.lexsort((seen, -totals[seen]))][:top]
    return [{"name": index.names[int(i)], "count": int(counts[i]), "total_ns": int(totals[i])} for i in order]


def range_stats(
    index: Index, row_ids: list[str], t0: int, t1: int, top: int = TOP, *, chunk: int = CHUNK
) -> dict[str, Any]:
    """Per row and for all rows together: count, time inside, busy %, kinds and top names.
    ``chunk``: events per chunk of the kept tables (tests set it small)."""
    if t1 <= t0:
        raise UsageError(f"t1_ns {t1}: expected after t0_ns {t0}")
    span = t1 - t0
    rows = []
    every = _Acc.new()
    for rid in row_ids:
        info = index.by_id.get(rid)
        if info is None:
            raise UsageError(f"rows: {rid!r} is not an event row of this profile (see timeline/rows)")
        acc = _Acc.new()
        busy = 0
        for d, tables in enumerate(_chunks(index, info, chunk)):
            inside_ns = _depth_range(index, tables, t0, t1, acc)
            if d == 0:
                busy = inside_ns
        every.add(acc)
        rows.append(
            {
                "id": rid,
                "rank": info.rank,
                "count": int(acc.kinds_n.sum()),
                "total_ns": int(acc.kinds_ns.sum()),
                "busy_ns": busy,
                "busy_pct": round(100 * busy / span, 3),
                "kinds": _kinds(acc.kinds_n, acc.kinds_ns),
                "top": _top(index, acc, top),
            }
        )
    return {
        "t0_ns": t0,
        "t1_ns": t1,
        "count": int(every.kinds_n.sum()),
        "total_ns": int(every.kinds_ns.sum()),
        "kinds": _kinds(every.kinds_n, every.kinds_ns),
        "top": _top(index, every, top),
        "rows": rows,
    }
