"""The timeline's overview: what a wide tile draws, kept with a stored index so that no event is decoded.

A tile's merged columns need, at every pixel edge ``x`` of every level (depth) of every row, how
many of the level's events start before ``x`` and the time they cover before it (``covered_at``).
Exact answers at arbitrary edges need the events next to each edge, and a window of the whole run
has an edge in every block of every level: a fresh process's first whole-run tile decoded every
block of ``ts`` and ``cum`` (20M entries, 160 MB of fresh memory at 10M events, 250 ms of CPU on
a quiet machine, most of it page faults). So, once per stored index (``index.pack``), for each
level of ``OVERVIEW_MIN`` events or more and for the power-of-two cell widths ``2^L`` ns from the
one that holds about ``EVENTS_PER_CELL`` events per cell up to one cell across the level, the two
functions are computed at every cell edge (multiples of ``2^L`` since the epoch) by the very code a
tile runs (``covered_at``), and kept as two compressed columns beside the index's (``ov_s``,
``ov_c``; its directory in ``meta.json.zst``).

A tile whose edges are exactly such cell edges (``t0`` a multiple of ``2^L``, ``t1 - t0 = width *
2^L``) reads its levels' columns from there: the same numbers as from the events, with no event
decoded. :func:`snap` widens a window to the nearest such one (cells of the next power of two at
or above the requested pixel, so at most one column more and pixels up to twice as wide) where the
overview has that cell width; clients that draw the tile's own window (``t0_ns``, ``t1_ns`` and
``width`` in its header, as the UI does) ask for it with ``snap=1``. Levels below ``OVERVIEW_MIN``
events, wide events and instants are read from the index as for any tile (a few blocks).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from hyperscope.timeline._blocks import searchsorted, write_column

I64 = npt.NDArray[np.int64]

#: levels with fewer events have no overview (read from the index: a part of one block);
#: ``HYPERSCOPE_TIMELINE_OVERVIEW_MIN``
OVERVIEW_MIN: Final = 16
#: the finest cells kept hold about this many events on average (finer, a tile reads few blocks),
#: or, if finer, are a ``MIN_CELLS``-th of the level's extent (a level of few events is read from
#: the overview by a window of all of it up to that many pixels wide: else each such level costs a
#: wide tile a block decoded; constant cells compress to almost nothing)
EVENTS_PER_CELL: Final = 16
MIN_CELLS: Final = 8192
#: the overview's two columns: events starting before each cell edge, time covered before it
COLUMNS: Final = ("ov_s", "ov_c")
_I64_MAX: Final = (1 << 63) - 1


def covered_at(ts: Any, cum: Any, lo: int, hi: int, x: I64) -> I64:
    """The time covered by the events ``[lo, hi)`` (one level of one row: sorted by start, not
    overlapping) before each instant of ``x``, plus ``cum[lo]`` (only differences mean anything),
    read through the columns themselves: for stored blocks, only those where ``x`` falls."""
    j = searchsorted(ts, lo, hi, x, side="right")
    k = np.maximum(j - 1, lo)
    both = np.asarray(cum[np.concatenate([k, k + 1])], dtype=np.int64)  # one read, not two
    c0 = both[: len(k)]
    dur = both[len(k) :] - c0
    gap = x - np.asarray(ts[k], dtype=np.int64)
    return np.where(j > lo, c0 + np.minimum(gap, dur), np.int64(cum[lo]))


@dataclass(frozen=True)
class Part:
    """One (row, level, cell width): edges ``c0 * 2^L`` to ``(c0 + m) * 2^L``, their values at
    ``offset`` to ``offset + m`` of the columns."""

    c0: int
    m: int
    offset: int


@dataclass(frozen=True)
class Overview:
    """The overview of a stored index (module docstring): its parts by (row id, depth, L)."""

    parts: dict[tuple[str, int, int], Part]
    s: Any  # a column (``_blocks.BlockColumn`` or array) of int64
    c: Any

    @property
    def levels(self) -> frozenset[int]:
        return frozenset(key[2] for key in self.parts)

    def at(self, row: str, depth: int, level: int, first: int, width: int) -> tuple[I64, I64] | None:
        """For the edges ``(first + k) * 2^level``, ``k = 0..width``: what ``covered_at`` and a
        left search of the level's starts give (None where the overview has no such part)."""
        part = self.parts.get((row, depth, level))
        if part is None:
            return None
        i = np.clip(np.arange(first - part.c0, first - part.c0 + width + 1, dtype=np.int64), 0, part.m)
        lo, hi = int(i[0]), int(i[-1])
        s = np.asarray(self.s[part.offset + lo : part.offset + hi + 1], dtype=np.int64)
        c = np.asarray(self.c[part.offset + lo : part.offset + hi + 1], dtype=np.int64)
        return s[i - lo], c[i - lo]


def aligned(t0: int, t1: int, width: int) -> int | None:
    """The ``L`` whose cells are exactly this window's pixel columns, or None."""
    q, r = divmod(t1 - t0, width)
    if r or q <= 0 or q & (q - 1) or t0 % q:
        return None
    return q.bit_length() - 1


def snap(overview: Overview | None, t0: int, t1: int, width: int, max_width: int) -> tuple[int, int, int]:
    """The window that covers ``[t0, t1)`` with pixel columns of the smallest power of two of
    nanoseconds at or above the requested pixel, where the overview keeps that cell width (else the
    window as asked): ``(t0, t1, width)``."""
    if overview is None or t1 <= t0 or width < 1:
        return t0, t1, width
    px = -(-(t1 - t0) // width)
    level = (px - 1).bit_length()
    if level not in overview.levels:
        return t0, t1, width
    g = 1 << level
    a, b = (t0 // g) * g, -(-t1 // g) * g
    w = (b - a) // g
    if not 1 <= w <= max_width:
        return t0, t1, width
    return a, b, w


def compute(ts: Any, cum: Any, rows: Any) -> tuple[list[list[Any]], I64, I64]:
    """Every part of the overview of an index's columns (module docstring): their directory
    ``[row id, depth, L, c0, m, offset]`` and the two columns, the coarsest cells first (a
    window's parts lie together: a wide tile reads a block or two of them)."""
    todo: list[tuple[int, str, int, int, int, int, int]] = []  # (-L, row, depth, lo, hi, c0, c1)
    least = overview_min()
    for info in rows:
        for d in range(info.depths):
            lo, hi = info.depth_starts[d], info.depth_starts[d + 1]
            n = hi - lo
            if n < least:
                continue
            t_lo = int(ts[lo])
            t_hi = int(ts[hi - 1]) + int(cum[hi]) - int(cum[hi - 1])
            extent = max(1, t_hi - t_lo)
            finest = min(_ceil_log2(extent * EVENTS_PER_CELL / n), _ceil_log2(extent / MIN_CELLS))
            for level in range(finest, max(finest, extent.bit_length()) + 1):
                g = 1 << level
                c0, c1 = t_lo // g, -(-t_hi // g)
                if c1 * g <= _I64_MAX and c0 * g >= -_I64_MAX:
                    todo.append((-level, info.id, d, lo, hi, c0, c1))
    directory: list[list[Any]] = []
    s_parts: list[I64] = []
    c_parts: list[I64] = []
    offset = 0
    for neg, row, d, lo, hi, c0, c1 in sorted(todo, key=lambda t: t[0]):  # stable: rows in order
        edges = (c0 + np.arange(c1 - c0 + 1, dtype=np.int64)) * np.int64(1 << -neg)
        s_parts.append(searchsorted(ts, lo, hi, edges, side="left"))
        c_parts.append(covered_at(ts, cum, lo, hi, edges))
        directory.append([row, d, -neg, c0, c1 - c0, offset])
        offset += c1 - c0 + 1
    empty = np.zeros(0, dtype=np.int64)
    s = np.concatenate(s_parts) if s_parts else empty
    c = np.concatenate(c_parts) if c_parts else empty
    return directory, s, c


def overview_min() -> int:
    """Levels with fewer events keep no overview (``OVERVIEW_MIN``, else the variable)."""
    try:
        return max(1, int(os.environ.get("HYPERSCOPE_TIMELINE_OVERVIEW_MIN", OVERVIEW_MIN)))
    except ValueError:
        return OVERVIEW_MIN


def _ceil_log2(x: float) -> int:
    return math.ceil(math.log2(x)) if x > 1 else 0


def write(where: Path, ts: Any, cum: Any, rows: Any) -> dict[str, Any]:
    """Compute the overview and write its columns into ``where``; its directory (JSON-ready)."""
    directory, s, c = compute(ts, cum, rows)
    columns = {
        name: write_column(where / f"{name}.blk", values, name)
        for name, values in zip(COLUMNS, (s, c), strict=True)
    }
    return {"parts": directory, "columns": columns}


def read(where: Path, meta: dict[str, Any] | None) -> Overview | None:
    """The overview kept in ``where`` (``meta``: its directory), None for an index without one."""
    if not meta:
        return None
    from hyperscope.timeline._blocks import BlockColumn

    s, c = (BlockColumn(where / f"{name}.blk", name, meta["columns"][name]) for name in COLUMNS)
    parts = {
        (str(row), int(d), int(level)): Part(int(c0), int(m), int(offset))
        for row, d, level, c0, m, offset in meta["parts"]
    }
    if len(s) != len(c) or any(p.m < 0 or p.offset < 0 or p.offset + p.m >= len(s) for p in parts.values()):
        raise ValueError(f"{where}: an overview part past its columns")
    return Overview(parts=parts, s=s, c=c)


def build_in_memory(index: Any) -> Overview:
    """The overview of an index held in memory (tests: the stored one must equal it)."""
    directory, s, c = compute(index.ts, index.cum, index.rows)
    parts = {(str(r), int(d), int(lv)): Part(int(c0), int(m), int(o)) for r, d, lv, c0, m, o in directory}
    return Overview(parts=parts, s=s, c=c)
