"""Tiles: what one screenful of rows needs, bounded whatever the zoom.

For a window ``[t0_ns, t1_ns)`` drawn ``width_px`` wide, a pixel column is ``(t1 - t0) / width``
nanoseconds. Events at least ``min_px`` columns wide come back as they are; the others are merged
per (row, depth, column): how many start in the column and the time they cover inside it (exact:
events of one depth do not overlap, so covered time is a prefix sum, see ``index``). Wide events of
one depth cannot overlap either, so there are at most ``width / min_px + 2`` of them per depth:
when the rows asked hold more than ``max_events`` in all, ``min_px`` doubles until they fit, and the
payload stays under its bound at any zoom.

Instants come back as *marks*: at most one per (row, column), for the column's first instant, with
how many the column holds.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import numpy as np
import numpy.typing as npt

from hyperscope.errors import UsageError
from hyperscope.timeline._blocks import searchsorted
from hyperscope.timeline.index import CLASSES, KINDS, Index, RowInfo
from hyperscope.timeline.overview import aligned, covered_at
from hyperscope.timeline.overview import snap as _snap

I64 = npt.NDArray[np.int64]

MAX_WIDTH: Final = 8192
MAX_ROWS: Final = 256
#: events per tile before ``min_px`` grows: 44 bytes each, so under 1.4 MB with the bins
MAX_EVENTS: Final = 30_000
#: merged columns per tile: 20 bytes each, 0.6 MB at most
MAX_BINS: Final = 30_000
#: marks per tile (26 bytes each) before one mark stands for 2, 4, ... columns
MAX_MARKS: Final = 20_000
MAGIC: Final = b"HSTL"


@dataclass
class Tile:
    """Columns of the answer; ``row`` indexes ``row_ids``, ``name`` indexes ``names``."""

    row_ids: list[str]
    t0_ns: int
    t1_ns: int
    width_px: int
    min_px: float
    bin_span: int = 1  # columns merged into one bin (1 unless the bins were over MAX_BINS)
    names: list[str] = field(default_factory=list)
    # events
    row: npt.NDArray[np.uint16] = field(default_factory=lambda: np.zeros(0, np.uint16))
    depth: npt.NDArray[np.uint16] = field(default_factory=lambda: np.zeros(0, np.uint16))
    kind: npt.NDArray[np.uint8] = field(default_factory=lambda: np.zeros(0, np.uint8))
    name: npt.NDArray[np.uint32] = field(default_factory=lambda: np.zeros(0, np.uint32))
    ts: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    dur: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    corr: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    id: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    # merged columns
    bin_row: npt.NDArray[np.uint16] = field(default_factory=lambda: np.zeros(0, np.uint16))
    bin_depth: npt.NDArray[np.uint16] = field(default_factory=lambda: np.zeros(0, np.uint16))
    bin_col: npt.NDArray[np.uint32] = field(default_factory=lambda: np.zeros(0, np.uint32))
    bin_count: npt.NDArray[np.uint32] = field(default_factory=lambda: np.zeros(0, np.uint32))
    bin_busy: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    # sample tracks (utilization): one point per sample, or the column's mean where denser
    s_row: npt.NDArray[np.uint16] = field(default_factory=lambda: np.zeros(0, np.uint16))
    s_ts: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    s_val: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0, np.float64))
    # instants: at most one mark per (row, column), for the first instant of the column
    m_row: npt.NDArray[np.uint16] = field(default_factory=lambda: np.zeros(0, np.uint16))
    m_ts: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    m_count: npt.NDArray[np.uint32] = field(default_factory=lambda: np.zeros(0, np.uint32))
    m_name: npt.NDArray[np.uint32] = field(default_factory=lambda: np.zeros(0, np.uint32))
    m_id: I64 = field(default_factory=lambda: np.zeros(0, np.int64))

    EVENT_COLUMNS: ClassVar[tuple[str, ...]] = ("row", "depth", "kind", "name", "ts", "dur", "corr", "id")
    BIN_COLUMNS: ClassVar[tuple[str, ...]] = ("bin_row", "bin_depth", "bin_col", "bin_count", "bin_busy")
    SAMPLE_COLUMNS: ClassVar[tuple[str, ...]] = ("s_row", "s_ts", "s_val")
    MARK_COLUMNS: ClassVar[tuple[str, ...]] = ("m_row", "m_ts", "m_count", "m_name", "m_id")
    #: the payload's columns, in this order
    COLUMNS: ClassVar[tuple[str, ...]] = (*EVENT_COLUMNS, *BIN_COLUMNS, *SAMPLE_COLUMNS, *MARK_COLUMNS)


def snap(index: Index, t0: int, t1: int, width: int) -> tuple[int, int, int]:
    """The window to ask instead of ``[t0, t1)`` at ``width``: one that covers it with columns of
    the index's overview cells where it keeps such cells (``overview.snap``), else the same."""
    return _snap(index.overview, t0, t1, width, MAX_WIDTH)


def boundaries(t0: int, t1: int, width: int) -> I64:
    """Column edges, ``width + 1`` of them, in integer nanoseconds (column k is [b[k], b[k+1]))."""
    k = np.arange(width + 1, dtype=np.int64)
    # k * (t1 - t0) // width, without the product (past 2^63 for windows over ~13 days at 8192 px)
    q, r = divmod(t1 - t0, width)
    return t0 + k * q + (k * r) // width


def check(t0: int, t1: int, width: int, n_rows: int) -> None:
    if t1 <= t0:
        raise UsageError(f"t1_ns {t1}: expected a time after t0_ns ({t0})")
    if not 1 <= width <= MAX_WIDTH:
        raise UsageError(f"width {width}: expected 1 to {MAX_WIDTH} pixels")
    if not 1 <= n_rows <= MAX_ROWS:
        raise UsageError(f"rows: expected 1 to {MAX_ROWS} row ids, got {n_rows}")


#: the longest duration of each class (``2^(c+1) - 1``): no event of a class is wider
_CLASS_MAX: Final = tuple((1 << (c + 1)) - 1 for c in range(CLASSES))
_I64_MIN: Final = -(1 << 63)


@dataclass
class _Ranges:
    """For (row, class) pairs: the slice ``[lo, hi)`` of ``perm`` holding every event of that class
    of that row that may overlap the window (sorted by start; ``base``: the row's first index)."""

    row: npt.NDArray[np.intp]
    cls: npt.NDArray[np.intp]
    base: I64
    lo: I64
    hi: I64

    def wider(self, thr: float) -> _Ranges:
        """The pairs whose class may hold events at least ``thr`` wide."""
        keep = np.asarray([_CLASS_MAX[c] >= thr for c in self.cls.tolist()], dtype=bool)
        return _Ranges(self.row[keep], self.cls[keep], self.base[keep], self.lo[keep], self.hi[keep])


def _class_ranges(index: Index, infos: list[RowInfo], t0: int, t1: int, thr: float) -> _Ranges:
    """The perm slices of every non-empty class (of every row) that may hold events ``>= thr`` wide
    overlapping ``[t0, t1)``: all of them found at once by a bisection over the pairs (module
    docstring of ``index``), a few dozen numpy gathers whatever the number of pairs."""
    row, cls, lo, hi, base = [], [], [], [], []
    for r, info in enumerate(infos):
        starts = info.class_starts
        for c in range(CLASSES):
            if starts[c + 1] > starts[c] and _CLASS_MAX[c] >= thr:
                row.append(r)
                cls.append(c)
                lo.append(starts[c])
                hi.append(starts[c + 1])
                base.append(info.start)
    pairs = _Ranges(
        np.asarray(row, dtype=np.intp),
        np.asarray(cls, dtype=np.intp),
        np.asarray(base, dtype=np.int64),
        np.asarray(lo, dtype=np.int64),
        np.asarray(hi, dtype=np.int64),
    )
    if not row:
        return pairs
    # an event of class c starting before t0 - 2^(c+1) ends before t0
    back = np.asarray([max(t0 - (1 << (c + 1)), _I64_MIN) for c in cls], dtype=np.int64)
    k = len(row)
    found = _lower_bound(
        index,
        np.tile(pairs.base, 2),
        np.tile(pairs.lo, 2),
        np.tile(pairs.hi, 2),
        np.concatenate([back, np.full(k, t1, dtype=np.int64)]),
    )
    pairs.lo, pairs.hi = found[:k], found[k:]
    keep = pairs.hi > pairs.lo
    return _Ranges(pairs.row[keep], pairs.cls[keep], pairs.base[keep], pairs.lo[keep], pairs.hi[keep])


def _lower_bound(index: Index, base: I64, lo: I64, hi: I64, target: I64) -> I64:
    """For each pair, the first position ``p`` of ``perm`` in ``[lo, hi)`` whose event starts at or
    after ``target`` (``hi`` when none): one binary search per pair, all stepped together."""
    first = lo
    lo, hi = lo.copy(), hi.copy()
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi) >> 1
        probe = np.where(active, mid, first)  # a valid position of the pair's own row
        key = index.pts[probe]  # = ts[base + perm[probe]], one column read where it is searched
        right = active & (key < target)
        lo = np.where(right, mid + 1, lo)
        hi = np.where(active & ~right, mid, hi)


def _wide_count(index: Index, pairs: _Ranges, thr: float) -> int:
    """How many events the ranges hold that are at least ``thr`` wide (exact but for the few
    that end before the window in the lookback of a class)."""
    n = 0
    for c, base, lo, hi in zip(pairs.cls.tolist(), pairs.base.tolist(), pairs.lo.tolist(), pairs.hi.tolist(),
                               strict=True):  # fmt: skip
        if (1 << c) >= thr:  # every event of the class is wide enough
            n += hi - lo
        elif _CLASS_MAX[c] >= thr:
            n += int(np.count_nonzero(index.dur[index.perm[lo:hi].astype(np.int64) + base] >= thr))
    return n


def _end_of(index: Index, i: int) -> int:
    c = index.cum[i : i + 2]
    return int(index.ts[i]) + int(c[1]) - int(c[0])


def _covered(ts: npt.NDArray[Any], cum: npt.NDArray[Any], x: I64) -> I64:
    """Time covered by non-overlapping events (sorted by start) before each instant of ``x``, plus
    ``cum[0]``; ``cum`` (one longer than ``ts``) holds their summed durations (``cum[i + 1] -
    cum[i]`` is event i's): only differences of the answer mean anything."""
    j = np.searchsorted(ts, x, side="right")
    k = np.maximum(j - 1, 0)
    c0 = np.asarray(cum[k], dtype=np.int64)
    dur = np.asarray(cum[k + 1], dtype=np.int64) - c0
    gap = x - np.asarray(ts[k], dtype=np.int64)
    return np.where(j > 0, c0 + np.minimum(gap, dur), np.int64(cum[0]))


def tile(index: Index, row_ids: list[str], t0: int, t1: int, width: int) -> Tile:
    """Events >= ``min_px`` pixel as they are, the smaller merged per column, instants as marks
    (module docstring)."""
    check(t0, t1, width, len(row_ids))
    infos = []
    for rid in row_ids:
        info = index.by_id.get(rid)
        if info is None:
            raise UsageError(f"rows: {rid!r} is not an event row of this profile (see timeline/rows)")
        infos.append(info)
    px = (t1 - t0) / width
    min_px = 1.0
    pairs = _class_ranges(index, infos, t0, t1, px)
    while True:  # wide events are at most width/min_px + 2 per depth: widen until they fit
        pairs = pairs.wider(px * min_px)
        if _wide_count(index, pairs, px * min_px) <= MAX_EVENTS or min_px > width:
            break
        min_px *= 2
    thr = px * min_px
    edges = boundaries(t0, t1, width)
    ev_parts: list[I64] = []
    ev_rows: list[int] = []
    bins: list[tuple[int, int, npt.NDArray[np.intp], I64, I64]] = []
    # the candidates of every row at once (one read of each column, not one per (row, class))
    lengths = pairs.hi - pairs.lo
    at = np.repeat(pairs.lo - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
    cand = np.repeat(pairs.base, lengths) + np.asarray(index.perm[at], dtype=np.int64)
    cand_row = np.repeat(pairs.row, lengths)
    ts, dur = np.asarray(index.ts[cand], dtype=np.int64), index.dur[cand]
    keep = (dur >= thr) & (ts < t1) & (ts + dur > t0)
    cand, cand_row = cand[keep], cand_row[keep]
    by_row = np.lexsort((cand, cand_row))  # per row, in index order: (depth, ts)
    cand, cand_row = cand[by_row], cand_row[by_row]
    row_cuts = np.searchsorted(cand_row, np.arange(len(infos) + 1))
    cand_depth = np.asarray(index.depth[cand], dtype=np.int64)
    overview = index.overview
    level = None if overview is None else aligned(t0, t1, width)
    for r, info in enumerate(infos):
        idx = cand[row_cuts[r] : row_cuts[r + 1]]
        ev_parts.append(idx)
        ev_rows.append(len(idx))
        wide_depth = cand_depth[row_cuts[r] : row_cuts[r + 1]]
        for d in range(info.depths):
            lo, hi = info.depth_starts[d], info.depth_starts[d + 1]
            if lo == hi:
                continue
            kept = (
                None
                if level is None or overview is None
                else overview.at(info.id, d, level, t0 >> level, width)
            )
            if kept is not None:  # cells of the overview: no event decoded
                starts, covered = kept
            else:
                a, b = searchsorted(index.ts, lo, hi, edges[[0, -1]], side="left").tolist()
                if a == b and (a == lo or _end_of(index, a - 1) <= t0):
                    continue  # nothing of this depth in the window
                starts = searchsorted(index.ts, lo, hi, edges, side="left")
                covered = covered_at(index.ts, index.cum, lo, hi, edges)
            count = np.diff(starts)
            busy = np.diff(covered)
            w = idx[wide_depth == d]
            if len(w):
                w_ts, w_dur = index.ts[w], index.dur[w]
                w_cum = np.concatenate([np.zeros(1, np.int64), np.cumsum(w_dur)])
                count = count - np.diff(np.searchsorted(w_ts, edges, side="left"))
                busy = busy - np.diff(_covered(w_ts, w_cum, edges))
            cols = np.flatnonzero((count > 0) | (busy > 0))
            if len(cols):
                bins.append((r, d, cols, count[cols], busy[cols]))
    all_idx = np.concatenate(ev_parts) if ev_parts else np.zeros(0, np.int64)
    m_row, m_first, m_count = _marks(index, infos, edges)
    mark_span = 1
    while len(m_row) > MAX_MARKS:  # dense instants on many rows: one mark per 2, 4, ... columns
        mark_span *= 2
        coarse = (
            edges[::mark_span] if (len(edges) - 1) % mark_span == 0 else np.r_[edges[::mark_span], edges[-1]]
        )
        m_row, m_first, m_count = _marks(index, infos, coarse)
    m_names = np.asarray(index.m_name[m_first], dtype=np.int64)
    names, inverse = np.unique(
        np.concatenate([np.asarray(index.name[all_idx], dtype=np.int64), m_names]), return_inverse=True
    )
    name_ids = np.asarray(inverse, dtype=np.uint32).reshape(-1)
    out = Tile(row_ids=list(row_ids), t0_ns=t0, t1_ns=t1, width_px=width, min_px=min_px)
    out.names = [index.names[int(n)] for n in names]
    out.row = np.repeat(np.arange(len(infos), dtype=np.uint16), ev_rows)
    out.depth = np.asarray(index.depth[all_idx], dtype=np.uint16)
    out.kind = np.asarray(index.kind[all_idx], dtype=np.uint8)
    out.name = name_ids[: len(all_idx)]
    out.ts = np.asarray(index.ts[all_idx], dtype=np.int64)
    out.dur = np.asarray(index.dur[all_idx], dtype=np.int64)
    out.corr = np.asarray(index.corr[all_idx], dtype=np.int64)
    out.id = np.asarray(index.src[all_idx], dtype=np.int64)
    out.m_row = m_row
    out.m_ts = np.asarray(index.m_ts[m_first], dtype=np.int64)
    out.m_count = m_count
    out.m_name = name_ids[len(all_idx) :]
    out.m_id = np.asarray(index.m_src[m_first], dtype=np.int64)
    if bins:
        n_bins = sum(len(b[2]) for b in bins)
        if n_bins > MAX_BINS:  # many deep rows: merge the columns of each depth in pairs and more
            out.bin_span = -(-n_bins // MAX_BINS)
            bins = _coarsen(bins, out.bin_span)
        out.bin_row = np.concatenate([np.full(len(b[2]), b[0], np.uint16) for b in bins])
        out.bin_depth = np.concatenate([np.full(len(b[2]), b[1], np.uint16) for b in bins])
        out.bin_col = np.concatenate([b[2] for b in bins]).astype(np.uint32)
        out.bin_count = np.concatenate([b[3] for b in bins]).astype(np.uint32)
        out.bin_busy = np.concatenate([b[4] for b in bins]).astype(np.int64)
    return out


def _marks(
    index: Index, infos: list[RowInfo], edges: I64
) -> tuple[npt.NDArray[np.uint16], I64, npt.NDArray[np.uint32]]:
    """Instants per (row, column): the row, the index of the column's first instant (earliest, then
    lowest id) and how many fall in the column."""
    rows, firsts, counts = [], [], []
    for r, info in enumerate(infos):
        if info.m_stop == info.m_start:
            continue
        starts = searchsorted(index.m_ts, info.m_start, info.m_stop, edges, side="left") - info.m_start
        count = np.diff(starts)
        cols = np.flatnonzero(count)
        rows.append(np.full(len(cols), r, np.uint16))
        firsts.append(starts[cols].astype(np.int64) + info.m_start)
        counts.append(count[cols].astype(np.uint32))
    if not rows:
        return np.zeros(0, np.uint16), np.zeros(0, np.int64), np.zeros(0, np.uint32)
    return np.concatenate(rows), np.concatenate(firsts), np.concatenate(counts)


def _coarsen(
    bins: list[tuple[int, int, npt.NDArray[np.intp], I64, I64]], factor: int
) -> list[tuple[int, int, npt.NDArray[np.intp], I64, I64]]:
    """Merge ``factor`` adjacent columns into the first (counts and busy time add up)."""
    out = []
    for r, d, cols, count, busy in bins:
        group = cols // factor
        keys, first = np.unique(group, return_index=True)
        out.append((r, d, keys * factor, np.add.reduceat(count, first), np.add.reduceat(busy, first)))
    return out


def encode(t: Tile) -> bytes:
    """The binary payload of docs/ui-api.md: magic, header length, JSON header, aligned columns."""
    columns = [(c, getattr(t, c)) for c in Tile.COLUMNS]
    layout = []
    offset = 0
    for c, arr in columns:
        layout.append({"name": c, "dtype": arr.dtype.str.lstrip("<|"), "offset": offset, "length": len(arr)})
        offset += (arr.nbytes + 7) // 8 * 8
    header = {
        "rows": t.row_ids,
        "t0_ns": str(t.t0_ns),
        "t1_ns": str(t.t1_ns),
        "width": t.width_px,
        "min_px": t.min_px,
        "bin_span": t.bin_span,
        "names": t.names,
        "kinds": list(KINDS),
        "events": len(t.ts),
        "bins": len(t.bin_col),
        "samples": len(t.s_ts),
        "marks": len(t.m_ts),
        "columns": layout,
    }
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(len(text) + 8) % 8)
    body = bytearray(MAGIC + struct.pack("<I", len(text)) + text)
    for _, arr in columns:
        raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        body += raw + b"\0" * (-len(raw) % 8)
    return bytes(body)


def decode(payload: bytes) -> tuple[dict[str, object], dict[str, npt.NDArray[np.generic]]]:
    """The header and columns of an encoded tile (for tests and Python clients)."""
    if payload[:4] != MAGIC:
        raise ValueError("not a hyperscope tile")
    (n,) = struct.unpack("<I", payload[4:8])
    header = json.loads(payload[8 : 8 + n])
    base = 8 + n
    cols = {}
    for c in header["columns"]:
        dtype = np.dtype("<" + c["dtype"]) if c["dtype"][0] in "iuf" else np.dtype(c["dtype"])
        start = base + c["offset"]
        cols[c["name"]] = np.frombuffer(payload, dtype=dtype, count=c["length"], offset=start)
    return header, cols
