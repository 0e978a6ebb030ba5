"""One sweep over each GPU's operations that answers three tables at once: time per set of kernel
types (gpu_time, kernel_type_segments, rank_comparison), idle gaps by cause (idle_breakdown) and
busy time per time bucket (gpu_utilization without samples).

The sweep (intervals.py) sorts each GPU's start and end points once. A segment where nothing runs
is an idle gap, and the point that ends it is the start of the operation that ended the wait, so
that operation's launch time (carried on each device op, see _prepared.py) tells whether the host
was late. Segments are summed by (state, cause, bucket of their start and end): the answer is a
few hundred rows per GPU whatever the profile's size, and the rare segment that crosses a bucket
edge is the only one in its group, so it is split exactly in Python.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from hyperscope.analysis._common import TYPE_BITS, rows
from hyperscope.analysis._prepared import Prepared
from hyperscope.analysis.intervals import state_sql, unit_sql

#: HTA's kernel-wait threshold: a shorter gap with the work already queued is launch overhead.
SHORT_GAP_NS = 30_000
_BITS = list(TYPE_BITS.values())


@dataclass(frozen=True, slots=True)
class GpuSweep:
    rank: int
    node: str
    device: int
    span_ns: int
    states: dict[int, int]  # state bitmask → ns (0 = idle)


@dataclass(frozen=True, slots=True)
class GpuPass:
    width_ns: int
    short_gap_ns: int
    sweeps: tuple[GpuSweep, ...]
    gaps: dict[tuple[int, int], dict[str, tuple[int, int]]]  # (rank, device) → cause → (gaps, ns)
    busy: dict[tuple[int, int], dict[int, int]]  # (rank, device) → bucket start → busy ns


def bucket_origin(ctx: Prepared) -> int:
    return min((w.lo_ns for w in ctx.windows), default=0)


def gpu_pass(ctx: Prepared, *, width_ns: int | None = None, short_gap_ns: int | None = None) -> GpuPass:
    """The pass for these parameters; ``None`` accepts any already computed (states do not depend
    on them), else the defaults (100 buckets over the scope, 30 µs)."""
    for key, found in ctx.cache.items():
        if (
            key.startswith("gpu_pass:")
            and isinstance(found, GpuPass)
            and width_ns in (None, found.width_ns)
            and short_gap_ns in (None, found.short_gap_ns)
        ):
            return found
    if width_ns is None:
        span = max((w.hi_ns for w in ctx.windows), default=1) - bucket_origin(ctx)
        width_ns = max(1, -(-span // 100))
    short = SHORT_GAP_NS if short_gap_ns is None else short_gap_ns
    result = _compute(ctx, width_ns, short)
    ctx.cache[f"gpu_pass:{width_ns}:{short}"] = result
    return result


def _compute(ctx: Prepared, width: int, short: int) -> GpuPass:
    lo = bucket_origin(ctx)
    found = rows(
        ctx.con,
        f"""WITH iv AS (SELECT rank, device, s, t_end, {unit_sql("bit", _BITS)} AS unit, launch_ts
                        FROM {ctx.devn} WHERE kind <> 'sync' AND t_end > s),
            pts AS (SELECT rank, device, s AS t, unit AS d, launch_ts AS la FROM iv
                    UNION ALL SELECT rank, device, t_end, -unit, NULL FROM iv),
            run AS (SELECT rank, device, t, sum(d) OVER w AS c, lead(t) OVER w AS nt, lead(la) OVER w AS nla
                    FROM pts WINDOW w AS (PARTITION BY rank, device ORDER BY t, d
                                          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)),
            seg AS (SELECT rank, device, t, nt, {state_sql("c", _BITS)} AS state,
                           CASE WHEN c <> 0 THEN NULL WHEN nla > t THEN 'host wait'
                                WHEN nt - t < {int(short)} THEN 'launch gap' ELSE 'other' END AS cause,
                           (t - {lo}) // {width} AS b0, (nt - 1 - {lo}) // {width} AS b1
                    FROM run WHERE nt > t)
        SELECT rank, device, state, cause, b0, b1, sum(nt - t)::BIGINT, count(*), min(t), max(nt)
        FROM seg GROUP BY ALL""",
    )
    states: dict[tuple[int, int], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    gaps: dict[tuple[int, int], dict[str, tuple[int, int]]] = defaultdict(dict)
    busy: dict[tuple[int, int], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for rank, device, state, cause, b0, b1, total, count, first, last in found:
        gpu = (int(rank), int(device))
        states[gpu][int(state)] += int(total)
        if cause is not None:
            n, ns = gaps[gpu].get(str(cause), (0, 0))
            gaps[gpu][str(cause)] = (n + int(count), ns + int(total))
        elif b0 == b1:
            busy[gpu][lo + int(b0) * width] += int(total)
        else:  # one segment across bucket edges: split it exactly
            for b in range(int(b0), int(b1) + 1):
                start, end = lo + b * width, lo + (b + 1) * width
                busy[gpu][start] += min(int(last), end) - max(int(first), start)
    win = {w.rank: w for w in ctx.windows}
    sweeps = []
    for (rank, device), by_state in sorted(states.items()):
        extent = sum(by_state.values())
        span = win[rank].hi_ns - win[rank].lo_ns if ctx.explicit else extent
        final = dict(by_state)
        final[0] = final.get(0, 0) + (span - extent)
        sweeps.append(GpuSweep(rank, win[rank].node, device, span, final))
    return GpuPass(
        width,
        short,
        tuple(sweeps),
        {k: dict(v) for k, v in gaps.items()},
        {k: dict(v) for k, v in busy.items()},
    )
