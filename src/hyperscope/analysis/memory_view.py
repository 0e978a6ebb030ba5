"""The dashboard's memory view, from the allocator's ``[memory]`` events (``profile_memory``):
the allocation curve per rank and GPU, and the largest allocations alive at each one's peak.

- :func:`memory_curve`: ``Total Allocated`` and ``Total Reserved`` over time, per rank and GPU, in
  ``buckets`` equal slices of the scope; each bucket keeps its *highest* value (a peak is never
  averaged away), so the curve's top is :func:`~hyperscope.analysis.memory.peak_memory`'s peak.
- :func:`allocations_at_peak`: at the first moment a GPU's allocated total reached its peak, the
  blocks then alive (allocated at or before it, not freed by then: an allocation's free is the next
  event at the same address with negative bytes), largest first.

Peak allocated and reserved per rank come from :func:`~hyperscope.analysis.memory.peak_memory`;
:func:`memory_view` is all three, as the UI asks for them (and as ``import`` keeps them for a whole
profile: at 10M events they cost seconds, which the view's first look should not wait for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from hyperscope.analysis._common import ALL, Scope, Source, Table, rows, windows_sql
from hyperscope.analysis._prepared import Prepared, prepared
from hyperscope.analysis.memory import peak_memory

__all__ = ["AllocationRow", "MemoryPointRow", "allocations_at_peak", "memory_curve", "memory_view"]

#: the UI's defaults: points of the curve per GPU, allocations listed per GPU
BUCKETS: Final = 200
TOP: Final = 10

_GPU_MEMORY = "e.kind = 'memory' AND e.device_type = 1 AND e.total_allocated IS NOT NULL"


@dataclass(frozen=True, slots=True)
class MemoryPointRow:
    rank: int
    device: int
    bucket_start_ns: int
    allocated_bytes: int  # the highest Total Allocated in the bucket
    reserved_bytes: int | None


@dataclass(frozen=True, slots=True)
class AllocationRow:
    rank: int
    device: int
    peak_ts_ns: int  # when the GPU's allocated total first reached its peak
    bytes: int
    allocated_ts_ns: int
    addr: int | None


def memory_view(
    source: Source | Prepared, scope: Scope = ALL, buckets: int = BUCKETS, top: int = TOP
) -> dict[str, Table[Any]]:
    """``{peaks, curve, allocations}``: the three tables of the memory view, on one resolved scope."""
    with prepared(source, scope) as ctx:
        return {
            "peaks": peak_memory(ctx, scope),
            "curve": memory_curve(ctx, scope, buckets),
            "allocations": allocations_at_peak(ctx, scope, top),
        }


def memory_curve(
    source: Source | Prepared, scope: Scope = ALL, buckets: int = BUCKETS
) -> Table[MemoryPointRow]:
    """The allocated and reserved totals per rank and GPU, the highest in each of ``buckets``."""
    with prepared(source, scope) as ctx:
        notes = list(ctx.notes)
        if not ctx.windows:
            return Table("GPU memory over time", MemoryPointRow, (), (*notes, "no ranks in scope"))
        lo = min(w.lo_ns for w in ctx.windows)
        hi = max(w.hi_ns for w in ctx.windows)
        width = max(1, -(-(hi - lo) // max(1, buckets)))  # ceil: the last bucket holds hi
        found = rows(
            ctx.con,
            f"""SELECT e.rank, coalesce(e.device_id, -1), {lo} + ((e.ts_ns - {lo}) // {width}) * {width},
                       max(e.total_allocated), max(e.total_reserved)
                FROM events e JOIN {windows_sql(ctx.windows)} w ON e.rank = w.rank
                WHERE {_GPU_MEMORY} AND e.ts_ns >= w.lo AND e.ts_ns <= w.hi
                GROUP BY ALL ORDER BY ALL""",
        )
    out = tuple(
        MemoryPointRow(int(r), int(d), int(b), int(a), None if rs is None else int(rs))
        for r, d, b, a, rs in found
    )
    if not out:
        notes.append("no GPU memory events in scope (profile with profile_memory=True to record them)")
    return Table("GPU memory over time", MemoryPointRow, out, tuple(notes))


def allocations_at_peak(
    source: Source | Prepared, scope: Scope = ALL, top: int = TOP
) -> Table[AllocationRow]:
    """Per rank and GPU, the ``top`` largest blocks alive when its allocated total peaked."""
    with prepared(source, scope) as ctx:
        notes = list(ctx.notes)
        if not ctx.windows:
            return Table("Largest allocations at the peak", AllocationRow, (), (*notes, "no ranks in scope"))
        found = rows(
            ctx.con,
            f"""WITH m AS (
                    SELECT e.rank, coalesce(e.device_id, -1) AS device, e.ts_ns, e.addr, e.alloc_bytes,
                           e.total_allocated
                    FROM events e JOIN {windows_sql(ctx.windows)} w ON e.rank = w.rank
                    WHERE {_GPU_MEMORY} AND e.ts_ns >= w.lo AND e.ts_ns <= w.hi),
                peak AS (SELECT rank, device, first(ts_ns ORDER BY total_allocated DESC, ts_ns) AS peak_at
                         FROM m GROUP BY rank, device),
                alive AS (
                    SELECT a.rank, a.device, p.peak_at, a.alloc_bytes, a.ts_ns, a.addr,
                           row_number() OVER (PARTITION BY a.rank, a.device
                                              ORDER BY a.alloc_bytes DESC, a.ts_ns) AS n
                    FROM m a JOIN peak p ON a.rank = p.rank AND a.device = p.device
                    WHERE a.alloc_bytes > 0 AND a.ts_ns <= p.peak_at
                      AND NOT EXISTS (SELECT 1 FROM m f WHERE f.rank = a.rank AND f.device = a.device
                                      AND f.addr = a.addr AND f.alloc_bytes < 0
                                      AND f.ts_ns > a.ts_ns AND f.ts_ns <= p.peak_at))
                SELECT rank, device, peak_at, alloc_bytes, ts_ns, addr FROM alive WHERE n <= {int(top)}
                ORDER BY rank, device, n""",
        )
    out = tuple(
        AllocationRow(int(r), int(d), int(at), int(b), int(ts), None if a is None else int(a))
        for r, d, at, b, ts, a in found
    )
    if not out:
        notes.append("no GPU allocations in scope (profile with profile_memory=True to record them)")
    return Table("Largest allocations at the peak", AllocationRow, out, tuple(notes))
