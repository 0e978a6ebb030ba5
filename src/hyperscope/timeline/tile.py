"""Tiles: what one screenful of rows needs, bounded whatever the zoom.

For a window ``[t0_ns, t1_ns)`` drawn ``width_px`` wide, a pixel column is ``(t1 - t0) / width``
nanoseconds. Events at least ``min_px`` columns wide come back as they are; the others are merged
per (row, depth, column): how many start in the column and the time they cover inside it (exact:
events of one depth do not overlap, so covered time is a prefix sum, see ``index``). Wide events of
one depth cannot overlap either, so there are at most ``width / min_px + 2`` of them per depth:
when the rows asked hold more than ``max_events`` in all, ``min_px`` doubles until they fit, and the
payload stays under its bound at any zoom.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import ClassVar, Final

import numpy as np
import numpy.typing as npt

from hyperscope.errors import UsageError
from hyperscope.timeline.index import CLASSES, KINDS, Index, RowInfo

I64 = npt.NDArray[np.int64]

MAX_WIDTH: Final = 8192
MAX_ROWS: Final = 256
#: events per tile before ``min_px`` grows: 44 bytes each, so under 1.4 MB with the bins
MAX_EVENTS: Final = 30_000
#: merged columns per tile: 20 bytes each, 0.6 MB at most
MAX_BINS: Final = 30_000
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

    EVENT_COLUMNS: ClassVar[tuple[str, ...]] = ("row", "depth", "kind", "name", "ts", "dur", "corr", "id")
    BIN_COLUMNS: ClassVar[tuple[str, ...]] = ("bin_row", "bin_depth", "bin_col", "bin_count", "bin_busy")
    SAMPLE_COLUMNS: ClassVar[tuple[str, ...]] = ("s_row", "s_ts", "s_val")


def boundaries(t0: int, t1: int, width: int) -> I64:
    """Column edges, ``width + 1`` of them, in integer nanoseconds (column k is [b[k], b[k+1]))."""
    k = np.arange(width + 1, dtype=np.int64)
    return t0 + (k * (t1 - t0)) // width


def check(t0: int, t1: int, width: int, n_rows: int) -> None:
    if t1 <= t0:
        raise UsageError(f"t1_ns {t1}: expected a time after t0_ns ({t0})")
    if not 1 <= width <= MAX_WIDTH:
        raise UsageError(f"width {width}: expected 1 to {MAX_WIDTH} pixels")
    if not 1 <= n_rows <= MAX_ROWS:
        raise UsageError(f"rows: expected 1 to {MAX_ROWS} row ids, got {n_rows}")


def _wide_ranges(index: Index, info: RowInfo, t0: int, t1: int, thr: float) -> list[tuple[int, int, int]]:
    """(class, lo, hi) slices of perm holding every event of the row that may be >= thr and overlap."""
    out = []
    for c in range(CLASSES):
        lo, hi = info.class_starts[c], info.class_starts[c + 1]
        if lo == hi or (1 << (c + 1)) - 1 < thr:  # every event of the class is narrower
            continue
        cts = index.cts[lo:hi]
        a = int(np.searchsorted(cts, t0 - (1 << (c + 1)), side="left"))
        b = int(np.searchsorted(cts, t1, side="left"))
        if b > a:
            out.append((c, lo + a, lo + b))
    return out


def _wide_count(index: Index, ranges: list[list[tuple[int, int, int]]], thr: float) -> int:
    """How many events the ranges hold that are at least ``thr`` wide (exact but for the few
    that end before the window in the lookback of a class)."""
    n = 0
    for rr in ranges:
        for c, lo, hi in rr:
            if (1 << c) >= thr:  # every event of the class is wide enough
                n += hi - lo
            else:
                n += int(np.count_nonzero(index.dur[index.perm[lo:hi]] >= thr))
    return n


def _covered(ts: I64, dur: I64, cum: I64, x: I64) -> I64:
    """Time covered by non-overlapping events (sorted by start) before each instant of ``x``."""
    j = np.searchsorted(ts, x, side="right")
    out = np.zeros(len(x), dtype=np.int64)
    has = j > 0
    k = j[has] - 1
    out[has] = cum[k] + np.minimum(x[has] - ts[k], dur[k])
    return out


def tile(index: Index, row_ids: list[str], t0: int, t1: int, width: int) -> Tile:
    """Events >= ``min_px`` pixel as they are, the smaller merged per column (module docstring)."""
    check(t0, t1, width, len(row_ids))
    infos = []
    for rid in row_ids:
        info = index.by_id.get(rid)
        if info is None:
            raise UsageError(f"rows: {rid!r} is not an event row of this profile (see timeline/rows)")
        infos.append(info)
    px = (t1 - t0) / width
    min_px = 1.0
    while True:  # wide events are at most width/min_px + 2 per depth: widen until they fit
        ranges = [_wide_ranges(index, info, t0, t1, px * min_px) for info in infos]
        if _wide_count(index, ranges, px * min_px) <= MAX_EVENTS or min_px > width:
            break
        min_px *= 2
    thr = px * min_px
    edges = boundaries(t0, t1, width)
    ev_parts: list[I64] = []
    ev_rows: list[int] = []
    bins: list[tuple[int, int, npt.NDArray[np.intp], I64, I64]] = []
    for r, (info, rr) in enumerate(zip(infos, ranges, strict=True)):
        idx = np.concatenate([index.perm[lo:hi] for _, lo, hi in rr]) if rr else np.zeros(0, np.int64)
        ts, dur = index.ts[idx], index.dur[idx]
        keep = (dur >= thr) & (ts < t1) & (ts + dur > t0)
        idx = np.sort(idx[keep])  # index order: (depth, ts)
        ev_parts.append(idx)
        ev_rows.append(len(idx))
        wide_depth = index.depth[idx]
        for d in range(info.depths):
            lo, hi = info.depth_starts[d], info.depth_starts[d + 1]
            if lo == hi:
                continue
            s_ts, s_dur, s_cum = index.ts[lo:hi], index.dur[lo:hi], index.cum[lo:hi]
            starts = np.searchsorted(s_ts, edges, side="left")
            count = np.diff(starts)
            busy = np.diff(_covered(s_ts, s_dur, s_cum, edges))
            w = idx[wide_depth == d]
            if len(w):
                w_ts, w_dur = index.ts[w], index.dur[w]
                w_cum = np.cumsum(w_dur) - w_dur
                count = count - np.diff(np.searchsorted(w_ts, edges, side="left"))
                busy = busy - np.diff(_covered(w_ts, w_dur, w_cum, edges))
            cols = np.flatnonzero((count > 0) | (busy > 0))
            if len(cols):
                bins.append((r, d, cols, count[cols], busy[cols]))
    all_idx = np.concatenate(ev_parts) if ev_parts else np.zeros(0, np.int64)
    names, name_ids = np.unique(index.name[all_idx], return_inverse=True)
    out = Tile(row_ids=list(row_ids), t0_ns=t0, t1_ns=t1, width_px=width, min_px=min_px)
    out.names = [index.names[int(n)] for n in names]
    out.row = np.repeat(np.arange(len(infos), dtype=np.uint16), ev_rows)
    out.depth = index.depth[all_idx].astype(np.uint16)
    out.kind = index.kind[all_idx].astype(np.uint8)
    out.name = name_ids.astype(np.uint32).reshape(-1)
    out.ts = np.asarray(index.ts[all_idx], dtype=np.int64)
    out.dur = np.asarray(index.dur[all_idx], dtype=np.int64)
    out.corr = np.asarray(index.corr[all_idx], dtype=np.int64)
    out.id = np.asarray(index.src[all_idx], dtype=np.int64)
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
    columns = [(c, getattr(t, c)) for c in (*Tile.EVENT_COLUMNS, *Tile.BIN_COLUMNS, *Tile.SAMPLE_COLUMNS)]
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
