"""A time range's statistics, per row and per kind, as Perfetto's area selection gives them.

For rows of the timeline and a window ``[t0, t1)``: how many events overlap it, the time they
cover inside it (clipped to the window), the row's busy time (its depth-0 events, which do not
overlap one another, so their clipped sum is the time the row was busy) as a share of the range,
and the names that took the most time inside it. Read from the timeline index: within a row the
events of one depth are sorted by start and do not overlap, so the ones that overlap the window
are found by bisection (at most one starts before ``t0`` and reaches into it), and the work grows
with the events in the range, not with the profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from hyperscope.errors import UsageError
from hyperscope.timeline._blocks import searchsorted
from hyperscope.timeline.index import KINDS, Index

__all__ = ["range_stats"]

TOP: Final = 10
I64 = npt.NDArray[np.int64]


@dataclass
class _Acc:
    """The events of one row (or of all rows) that overlap the range: their kind and name codes
    and their time inside the range."""

    kind: list[I64]
    name: list[I64]
    inside: list[I64]

    def add(self, other: _Acc) -> None:
        self.kind += other.kind
        self.name += other.name
        self.inside += other.inside

    def cat(self) -> tuple[I64, I64, I64]:
        if not self.kind:
            empty = np.zeros(0, np.int64)
            return empty, empty, empty
        return np.concatenate(self.kind), np.concatenate(self.name), np.concatenate(self.inside)


def _overlapping(index: Index, lo: int, hi: int, t0: int, t1: int, acc: _Acc) -> int:
    """Adds the events of ``[lo, hi)`` (one depth of one row) that overlap [t0, t1) to ``acc``;
    returns their time inside it. Contiguous slices only, found by searches that decode only the
    blocks where the window's ends fall (``_blocks``)."""
    found = searchsorted(index.ts, lo, hi, np.asarray([t0, t1], dtype=np.int64), side="left") - lo
    first = max(int(found[0]) - 1, 0)  # one may start before t0
    last = int(found[1])
    if last <= first:
        return 0
    a, b = lo + first, lo + last
    start = np.asarray(index.ts[a:b], np.int64)
    end = start + np.asarray(index.dur[a:b], np.int64)
    keep = (end > t0) | (start >= t0)  # (start < t1 already); zero-length events inside count
    inside = np.maximum(np.minimum(end, t1) - np.maximum(start, t0), 0)[keep]
    acc.kind.append(np.asarray(index.kind[a:b], np.int64)[keep])
    acc.name.append(np.asarray(index.name[a:b], np.int64)[keep])
    acc.inside.append(inside)
    return int(inside.sum())


def _kinds(kind: I64, inside: I64) -> list[dict[str, Any]]:
    counts = np.bincount(kind, minlength=len(KINDS))
    totals = np.bincount(kind, weights=inside.astype(np.float64), minlength=len(KINDS))
    out = [
        {"kind": KINDS[k], "count": int(counts[k]), "total_ns": round(float(totals[k]))}
        for k in np.flatnonzero(counts)
    ]
    return sorted(out, key=lambda d: (-d["total_ns"], d["kind"]))


def _top(index: Index, name: I64, inside: I64, top: int) -> list[dict[str, Any]]:
    if not len(name):
        return []
    n = len(index.names)
    counts = np.bincount(name, minlength=n)
    totals = np.bincount(name, weights=inside.astype(np.float64), minlength=n)
    seen = np.flatnonzero(counts)
    order = seen[np.lexsort((seen, -totals[seen]))][:top]
    return [
        {"name": index.names[int(i)], "count": int(counts[i]), "total_ns": round(float(totals[i]))}
        for i in order
    ]


def range_stats(index: Index, row_ids: list[str], t0: int, t1: int, top: int = TOP) -> dict[str, Any]:
    """Per row and for all rows together: count, time inside, busy %, kinds and top names."""
    if t1 <= t0:
        raise UsageError(f"t1_ns {t1}: expected after t0_ns {t0}")
    span = t1 - t0
    rows = []
    every = _Acc([], [], [])
    for rid in row_ids:
        info = index.by_id.get(rid)
        if info is None:
            raise UsageError(f"rows: {rid!r} is not an event row of this profile (see timeline/rows)")
        acc = _Acc([], [], [])
        busy = 0
        for d in range(info.depths):
            inside_ns = _overlapping(index, info.depth_starts[d], info.depth_starts[d + 1], t0, t1, acc)
            if d == 0:
                busy = inside_ns
        every.add(acc)
        kind, name, inside = acc.cat()
        rows.append(
            {
                "id": rid,
                "rank": info.rank,
                "count": len(kind),
                "total_ns": int(inside.sum()),
                "busy_ns": busy,
                "busy_pct": round(100 * busy / span, 3),
                "kinds": _kinds(kind, inside),
                "top": _top(index, name, inside, top),
            }
        )
    kind, name, inside = every.cat()
    return {
        "t0_ns": t0,
        "t1_ns": t1,
        "count": len(kind),
        "total_ns": int(inside.sum()),
        "kinds": _kinds(kind, inside),
        "top": _top(index, name, inside, top),
        "rows": rows,
    }
