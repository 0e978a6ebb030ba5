"""CPU time: how busy the profiled threads were, and host CPU utilization over time.

Active time of a thread is the union of its operator, Python, CUDA runtime and driver events (the
CPU doing work for the program); idle is the rest of the window. That is a statement about the
profiled threads only. Whole-host utilization needs the ``cpu_util_pct`` samples that hyperscope's
capture writes; imported Kineto traces have none, and the table says so instead of inventing them.
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
    rows,
)
from hyperscope.analysis._prepared import Prepared, prepared
from hyperscope.analysis.gpu import _bucket_ns
from hyperscope.analysis.intervals import bucket_sum_sql, pieces_sql


@dataclass(frozen=True, slots=True)
class CpuTimeRow:
    group: str
    tid: int  # -1 when summed over threads (node or job level)
    threads: int
    span_ns: int
    active_ns: int
    idle_ns: int
    active_pct: float


@dataclass(frozen=True, slots=True)
class CpuUtilizationRow:
    node: str
    rank: int  # -1 for host-wide samples
    bucket_start_ns: int
    util_pct: float
    source: str  # samples metric name, or "event coverage"


def _merged(ctx: Prepared) -> str:
    """Each thread's busy time as disjoint pieces, computed once for cpu_time and cpu_utilization."""
    return ctx.shared(
        "host_merged", pieces_sql(f"(SELECT rank, tid, s, t_end FROM {ctx.host})", ["rank", "tid"])
    )


def cpu_time(source: Source | Prepared, scope: Scope = ALL, level: Level = Level.RANK) -> Table[CpuTimeRow]:
    """Active vs idle time of each profiled host thread (rank level) or summed over a node / the job."""
    with prepared(source, scope) as ctx:
        con, windows = ctx.con, ctx.windows
        found = rows(con, f"SELECT rank, tid, sum(t_end - s) FROM {_merged(ctx)} GROUP BY ALL ORDER BY ALL")
        notes = list(ctx.notes)
    win = {w.rank: w for w in windows}
    groups: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for rank, tid, active in found:
        w = win[int(rank)]
        key = str(rank) if level is Level.RANK else (w.node or "?") if level is Level.NODE else "job"
        groups[(key, int(tid) if level is Level.RANK else -1)].append((w.hi_ns - w.lo_ns, int(active)))
    out: list[CpuTimeRow] = []
    for (key, tid), members in groups.items():
        span = sum(m[0] for m in members)
        active = sum(m[1] for m in members)
        out.append(
            CpuTimeRow(
                key,
                tid,
                len(members),
                span,
                active,
                span - active,
                round(100 * active / span, 3) if span else 0.0,
            )
        )
    out.sort(key=lambda r: (r.group, -r.active_ns))
    if not out:
        notes.append("no host CPU events in scope")
    notes.append(
        "active = union of cpu_op, python, runtime and driver events of a thread; idle = the rest "
        "of the window"
    )
    return Table("CPU time of profiled threads", CpuTimeRow, tuple(out), tuple(notes))


def cpu_utilization(
    source: Source | Prepared, scope: Scope = ALL, *, buckets: int = 100, bucket_ns: int | None = None
) -> Table[CpuUtilizationRow]:
    """Host CPU utilization over time from samples; else the profiled threads' event coverage."""
    with prepared(source, scope) as ctx:
        con, windows = ctx.con, ctx.windows
        notes = list(ctx.notes)
        if not windows:
            return Table("CPU utilization over time", CpuUtilizationRow, (), (*notes, "no events in scope"))
        lo, hi = min(w.lo_ns for w in windows), max(w.hi_ns for w in windows)
        width = _bucket_ns(hi - lo, buckets, bucket_ns)
        nodes = sorted({w.node for w in windows})
        for metric in ("cpu_util_pct", "process_cpu_util_pct"):
            sampled = rows(
                con,
                f"""SELECT node, {lo} + (ts_ns - {lo}) // {width} * {width} AS b, avg(value)
                    FROM samples WHERE metric = ? AND ts_ns >= {lo} AND ts_ns < {hi}
                      AND coalesce(node, '') IN (SELECT unnest(?::VARCHAR[]))
                    GROUP BY ALL ORDER BY ALL""",
                [metric, nodes],
            )
            if sampled:
                found_rows = tuple(
                    CpuUtilizationRow(str(n), -1, int(b), float(v), metric) for n, b, v in sampled
                )
                return Table("CPU utilization over time", CpuUtilizationRow, found_rows, tuple(notes))
        derived = rows(
            con,
            f"SELECT rank, b, sum(busy) FROM ({bucket_sum_sql(_merged(ctx), ['rank', 'tid'], lo, width)}) "
            "GROUP BY ALL ORDER BY ALL",
        )
    win = {w.rank: w for w in windows}
    out: list[CpuUtilizationRow] = []
    for rank, b, busy in derived:
        w = win[int(rank)]
        inside = min(int(b) + width, w.hi_ns) - max(int(b), w.lo_ns)
        # 100 = one thread busy all the time, as process CPU % (several threads can exceed 100).
        out.append(
            CpuUtilizationRow(w.node, int(rank), int(b), round(100 * int(busy) / inside, 3), "event coverage")
        )
    notes.append(
        "no cpu_util_pct samples in this profile (imported traces have none): showing the profiled "
        "threads' event coverage instead (100 = one thread busy), not host CPU utilization"
    )
    return Table("CPU utilization over time", CpuUtilizationRow, tuple(out), tuple(notes))
