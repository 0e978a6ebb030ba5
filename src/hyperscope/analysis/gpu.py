"""GPU activity: utilization over time, what the GPU did (kernels, copies, sets, syncs), and memory
operations with their bytes and achieved bandwidth.

Utilization over time comes from the ``gpu_util_pct`` samples (NVML) where the profile has them,
else it is derived from device busy time (the share of each bucket covered by any kernel, copy or
set on that GPU). The two are not the same quantity: NVML counts a sample period as busy when any
kernel ran in it, so it reads higher than busy-time coverage; each row says which one it is.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from hyperscope.analysis._common import (
    ALL,
    Level,
    Scope,
    Source,
    Table,
    device_ops_sql,
    rows,
)
from hyperscope.analysis._prepared import Prepared, prepared
from hyperscope.analysis.gpupass import gpu_pass
from hyperscope.errors import UsageError


@dataclass(frozen=True, slots=True)
class UtilizationRow:
    node: str
    rank: int  # -1 for samples, which are per node and GPU
    device: int
    bucket_start_ns: int
    util_pct: float
    source: str  # "samples" (NVML gpu_util_pct) or "busy time" (derived from device events)


@dataclass(frozen=True, slots=True)
class ActivityRow:
    activity: str  # kernel | memcpy | memset | sync
    count: int
    total_ns: int
    pct_of_time: float


@dataclass(frozen=True, slots=True)
class MemoryOpRow:
    kind: str  # HtoD | DtoH | DtoD | ... | memset
    count: int
    total_ns: int
    total_bytes: int
    bandwidth_gbps: float | None  # bytes / busy time (GB/s = bytes per ns); None without bytes


def _bucket_ns(windows_span_ns: int, buckets: int, bucket_ns: int | None) -> int:
    if bucket_ns is not None:
        if bucket_ns <= 0:
            raise UsageError(f"bucket_ns {bucket_ns}: expected a positive bucket width in ns")
        return bucket_ns
    if buckets < 1:
        raise UsageError(f"buckets {buckets}: expected a positive number of time buckets")
    return max(1, -(-windows_span_ns // buckets))


def gpu_utilization(
    source: Source | Prepared,
    scope: Scope = ALL,
    level: Level = Level.RANK,
    *,
    buckets: int = 100,
    bucket_ns: int | None = None,
) -> Table[UtilizationRow]:
    """GPU utilization over time, in ``buckets`` equal buckets (or of ``bucket_ns`` each), per GPU
    (level rank) or averaged over the GPUs of each node or of the job."""
    with prepared(source, scope) as ctx:
        con, windows = ctx.con, ctx.windows
        notes = list(ctx.notes)
        if not windows:
            return Table("GPU utilization over time", UtilizationRow, (), (*notes, "no events in scope"))
        lo, hi = min(w.lo_ns for w in windows), max(w.hi_ns for w in windows)
        width = _bucket_ns(hi - lo, buckets, bucket_ns)
        nodes = sorted({w.node for w in windows})
        sampled = rows(
            con,
            f"""SELECT node, device, {lo} + (ts_ns - {lo}) // {width} * {width} AS b, avg(value)
                FROM samples WHERE metric = 'gpu_util_pct' AND ts_ns >= {lo} AND ts_ns < {hi}
                  AND coalesce(node, '') IN (SELECT unnest(?::VARCHAR[]))
                GROUP BY ALL ORDER BY ALL""",
            [nodes],
        )
        if sampled:
            found_rows = [
                UtilizationRow(str(n), -1, int(d), int(b), float(v), "samples") for n, d, b, v in sampled
            ]
            return Table(
                "GPU utilization over time", UtilizationRow, _roll_up(found_rows, level), tuple(notes)
            )
        busy = gpu_pass(ctx, width_ns=width).busy  # buckets start at lo, the scope's first instant
    win = {w.rank: w for w in windows}
    out: list[UtilizationRow] = []
    for (rank, device), buckets_ns in sorted(busy.items()):
        w = win[rank]
        for b, ns in sorted(buckets_ns.items()):
            # A bucket that the rank's window cuts short is measured against the part inside it.
            inside = min(b + width, w.hi_ns) - max(b, w.lo_ns)
            out.append(UtilizationRow(w.node, rank, device, b, round(100 * ns / inside, 3), "busy time"))
    notes.append("no gpu_util_pct samples in this profile: utilization derived from device busy time")
    return Table("GPU utilization over time", UtilizationRow, _roll_up(out, level), tuple(notes))


def _roll_up(found: list[UtilizationRow], level: Level) -> tuple[UtilizationRow, ...]:
    """Mean over the GPUs of each node (or the job) per bucket; a GPU absent from a bucket was idle."""
    if level is Level.RANK:
        return tuple(found)
    gpus: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
    sums: dict[tuple[str, int, str], float] = defaultdict(float)
    for r in found:
        group = r.node if level is Level.NODE else "job"
        gpus[group].add((r.node, r.rank, r.device))
        sums[(group, r.bucket_start_ns, r.source)] += r.util_pct
    return tuple(
        UtilizationRow(g, -1, -1, b, round(v / len(gpus[g]), 3), source)
        for (g, b, source), v in sorted(sums.items())
    )


def gpu_activity(source: Source | Prepared, scope: Scope = ALL) -> Table[ActivityRow]:
    """How device time splits between kernels, memcpy, memset and sync (sum of durations)."""
    with prepared(source, scope) as ctx:
        con, windows = ctx.con, ctx.windows
        found = rows(
            con,
            f"""SELECT kind, count(*), sum(t_end - s), sum(t_end - s) / sum(sum(t_end - s)) OVER ()
                FROM ({device_ops_sql(windows, ("kernel", "memcpy", "memset", "sync"))}) GROUP BY kind""",
        )
        notes = list(ctx.notes)
    by = {str(k): (int(c), int(t), float(p or 0)) for k, c, t, p in found}
    out = tuple(
        ActivityRow(k, by[k][0], by[k][1], round(100 * by[k][2], 3))
        for k in ("kernel", "memcpy", "memset", "sync")
        if k in by
    )
    notes.append("time is summed per operation (concurrent streams add up); sync is the GPU waiting")
    return Table("GPU activity", ActivityRow, out, tuple(notes))


def memory_operations(source: Source | Prepared, scope: Scope = ALL) -> Table[MemoryOpRow]:
    """Copies by direction and sets: count, time, bytes and achieved bandwidth."""
    with prepared(source, scope) as ctx:
        con, windows = ctx.con, ctx.windows
        found = rows(
            con,
            f"""SELECT CASE WHEN kind = 'memset' THEN 'memset' ELSE coalesce(memcpy_kind, 'unknown') END AS k,
                       count(*), sum(dur_ns), sum(bytes), sum(dur_ns) FILTER (WHERE bytes IS NOT NULL)
                FROM ({device_ops_sql(windows, ("memcpy", "memset"))}) GROUP BY k ORDER BY
                    sum(dur_ns) DESC""",
        )
        notes = list(ctx.notes)
    out = tuple(
        MemoryOpRow(str(k), int(c), int(t), int(b or 0), round(int(b) / int(bt), 3) if b and bt else None)
        for k, c, t, b, bt in found
    )
    if not out:
        notes.append("no memcpy or memset in scope")
    return Table("GPU memory operations", MemoryOpRow, out, tuple(notes))
