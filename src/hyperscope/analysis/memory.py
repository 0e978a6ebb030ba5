"""Peak GPU memory per rank and device: from the allocator's ``[memory]`` events where the trace has
them (``profile_memory=True``), else from ``gpu_mem_used_bytes`` samples (NVML, per node and GPU).

The two measure different things: the allocator's ``Total Allocated`` is what PyTorch handed out,
``Total Reserved`` what its caching allocator holds, NVML's used memory everything on the device
(other processes and the CUDA context included). Each row says which it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from hyperscope.analysis._common import ALL, Scope, Source, Table, rows, windows_sql
from hyperscope.analysis._prepared import Prepared, prepared


@dataclass(frozen=True, slots=True)
class MemoryPeakRow:
    rank: int  # -1 for samples, which are per node and GPU
    node: str
    device: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None  # None from samples
    source: str  # "allocator events" | "samples"


def peak_memory(source: Source | Prepared, scope: Scope = ALL) -> Table[MemoryPeakRow]:
    """The highest allocated (and reserved) GPU memory seen in scope, per rank and device."""
    with prepared(source, scope) as ctx:
        con, windows = ctx.con, ctx.windows
        notes = list(ctx.notes)
        found = rows(
            con,
            f"""SELECT e.rank, any_value(w.node), coalesce(e.device_id, -1), max(e.total_allocated),
                       max(e.total_reserved)
                FROM events e JOIN {windows_sql(windows)} w ON e.rank = w.rank
                WHERE e.kind = 'memory' AND e.device_type = 1 AND e.total_allocated IS NOT NULL
                  AND e.ts_ns >= w.lo AND e.ts_ns <= w.hi
                GROUP BY ALL ORDER BY ALL""",
        )
        if found:
            out = tuple(
                MemoryPeakRow(
                    int(r), str(n), int(d), int(a), None if rs is None else int(rs), "allocator events"
                )
                for r, n, d, a, rs in found
            )
            return Table("Peak GPU memory", MemoryPeakRow, out, tuple(notes))
        if windows:
            lo, hi = min(w.lo_ns for w in windows), max(w.hi_ns for w in windows)
            nodes = sorted({w.node for w in windows})
            sampled = rows(
                con,
                f"""SELECT coalesce(node, ''), device, max(value) FROM samples
                    WHERE metric = 'gpu_mem_used_bytes' AND ts_ns >= {lo} AND ts_ns <= {hi}
                      AND coalesce(node, '') IN (SELECT unnest(?::VARCHAR[]))
                    GROUP BY ALL ORDER BY ALL""",
                [nodes],
            )
            if sampled:
                out = tuple(MemoryPeakRow(-1, str(n), int(d), int(v), None, "samples") for n, d, v in sampled)
                return Table("Peak GPU memory", MemoryPeakRow, out, tuple(notes))
    notes.append("no GPU memory events (profile_memory) or gpu_mem_used_bytes samples in scope")
    return Table("Peak GPU memory", MemoryPeakRow, (), tuple(notes))
