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
from hyperscope.timeline.index import KINDS, Index

__all__ = ["range_stats"]

TOP: Final = 10
I64 = npt.NDArray[np.int64]


@dataclass
class _Acc:
    """The events of one row (or of all rows) that overlap the range."""

    idx: list[I64]
    inside: list[I64]  # their time inside the range

    def cat(self) -> tuple[I64, I64]:
        if not self.idx:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(self.idx), np.concatenate(self.inside)


def _overlapping(index: Index, lo: int, hi: int, t0: int, t1: int) -> tuple[I64, I64]:
    """Index positions in ``[lo, hi)`` (one depth of one row) of the events overlapping [t0, t1),
    and their time inside it."""
    ts = index.ts[lo:hi]
    first = max(int(np.searchsorted(ts, t0, side="left")) - 1, 0)  # one may start before t0
    last = int(np.searchsorted(ts, t1, side="left"))
    if last <= first:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pos = np.arange(lo + first, lo + last, dtype=np.int64)
    start = np.asarray(index.ts[pos], np.int64)
    end = start + np.asarray(index.dur[pos], np.int64)
    inside = np.minimum(end, t1) - np.maximum(start, t0)
    keep = (end > t0) | ((start >= t0) & (start < t1))  # zero-length events inside count
    return pos[keep], np.maximum(inside[keep], 0)


def _kinds(index: Index, idx: I64, inside: I64) -> list[dict[str, Any]]:
    kinds = np.asarray(index.kind[idx], np.int64)
    out = []
    for k in np.unique(kinds):
        sel = kinds == k
        out.append({"kind": KINDS[int(k)], "count": int(sel.sum()), "total_ns": int(inside[sel].sum())})
    return sorted(out, key=lambda d: (-d["total_ns"], d["kind"]))


def _top(index: Index, idx: I64, inside: I64, top: int) -> list[dict[str, Any]]:
    if not len(idx):
        return []
    names = np.asarray(index.name[idx], np.int64)
    uniq, codes = np.unique(names, return_inverse=True)
    totals = np.bincount(codes, weights=inside.astype(np.float64), minlength=len(uniq))
    counts = np.bincount(codes, minlength=len(uniq))
    order = np.lexsort((uniq, -totals))[:top]
    return [
        {"name": index.names[int(uniq[i])], "count": int(counts[i]), "total_ns": round(float(totals[i]))}
        for i in order
    ]


def range_stats(index: Index, row_ids: list[str], t0: int, t1: int, top: int = TOP) -> dict[str, Any]:
    """Per row and for all rows together: count, time inside, busy %, kinds and top names."""
    if t1 <= t0:
        raise UsageError(f"t1_ns {t1}: expected after t0_ns {t0}")
    span = t1 - t0
    rows = []
    every = _Acc([], [])
    for rid in row_ids:
        info = index.by_id.get(rid)
        if info is None:
            raise UsageError(f"rows: {rid!r} is not an event row of this profile (see timeline/rows)")
        acc = _Acc([], [])
        busy = 0
        for d in range(info.depths):
            idx, inside = _overlapping(index, info.depth_starts[d], info.depth_starts[d + 1], t0, t1)
            if d == 0:
                busy = int(inside.sum())
            acc.idx.append(idx)
            acc.inside.append(inside)
        idx, inside = acc.cat()
        every.idx.append(idx)
        every.inside.append(inside)
        rows.append(
            {
                "id": rid,
                "rank": info.rank,
                "count": len(idx),
                "total_ns": int(inside.sum()),
                "busy_ns": busy,
                "busy_pct": round(100 * busy / span, 3),
                "kinds": _kinds(index, idx, inside),
                "top": _top(index, idx, inside, top),
            }
        )
    idx, inside = every.cat()
    return {
        "t0_ns": t0,
        "t1_ns": t1,
        "count": len(idx),
        "total_ns": int(inside.sum()),
        "kinds": _kinds(index, idx, inside),
        "top": _top(index, idx, inside, top),
        "rows": rows,
    }
