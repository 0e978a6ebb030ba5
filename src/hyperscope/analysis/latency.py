"""Launch-to-run latency: from the CPU's launch call to the start of its kernel on the GPU.

Pairs come from the ``correlation`` id that CUPTI puts on both the runtime/driver call and the
device operation (per rank: ids are per process). A long latency means work queued behind earlier
work (the GPU is the bottleneck, which is good); a short one with an idle GPU means the CPU is.
A negative latency is impossible and means the host and device clocks disagree: such pairs are
counted in the notes and left out of the statistics rather than averaged in.
"""

from __future__ import annotations

from dataclasses import dataclass

from hyperscope.analysis._common import (
    ALL,
    Level,
    Scope,
    Source,
    Table,
    Window,
    check_ranks,
    connection,
    device_ops_sql,
    in_list,
    rank_windows,
    rows,
    scope_notes,
    scoped_events_sql,
)
from hyperscope.errors import UsageError


@dataclass(frozen=True, slots=True)
class LatencyStatsRow:
    group: str
    launches: int
    mean_ns: float
    p50_ns: float
    p90_ns: float
    p99_ns: float
    max_ns: int


@dataclass(frozen=True, slots=True)
class LatencyOutlierRow:
    rank: int
    launch: str
    kernel: str
    launch_ts_ns: int
    latency_ns: int


def _pairs_sql(windows: list[Window]) -> str:
    launches = scoped_events_sql(
        windows,
        f"e.kind IN {in_list(('runtime', 'driver'))} AND e.correlation IS NOT NULL",
        "e.rank, e.node, e.correlation, e.name AS launch, e.ts_ns AS launch_ts",
    )
    return f"""SELECT l.rank, l.node, l.launch, d.name AS kernel, l.launch_ts, d.ts_ns -
        l.launch_ts AS latency
               FROM ({launches}) l JOIN ({device_ops_sql(windows)}) d
               ON l.rank = d.rank AND l.correlation = d.correlation"""


def launch_latency(source: Source, scope: Scope = ALL, level: Level = Level.JOB) -> Table[LatencyStatsRow]:
    """Distribution of launch-to-start latency per rank, node or for the job."""
    with connection(source) as con:
        check_ranks(con, scope)
        windows = rank_windows(con, scope)
        key = level.key_sql()
        found = rows(
            con,
            f"""WITH p AS ({_pairs_sql(windows)})
                SELECT {key} AS g, count(*) FILTER (WHERE latency >= 0), avg(latency) FILTER (WHERE
                    latency >= 0),
                       quantile_cont(latency, [0.5, 0.9, 0.99]) FILTER (WHERE latency >= 0),
                       max(latency), count(*) FILTER (WHERE latency < 0)
                FROM p GROUP BY g ORDER BY g""",
        )
        notes = scope_notes(windows, scope, con)
    out = []
    negative = 0
    for g, n, mean, qs, mx, neg in found:
        negative += int(neg)
        if n:
            out.append(
                LatencyStatsRow(
                    str(g), int(n), float(mean), float(qs[0]), float(qs[1]), float(qs[2]), int(mx)
                )
            )
    if negative:
        notes.append(f"{negative} launches start on the GPU before their CPU launch (clock skew): left out")
    if not out:
        notes.append("no launch → device op pairs (correlation ids) in scope")
    return Table("Launch-to-run latency", LatencyStatsRow, tuple(out), tuple(notes))


def latency_outliers(source: Source, scope: Scope = ALL, top_k: int = 10) -> Table[LatencyOutlierRow]:
    """The ``top_k`` longest launch-to-start latencies."""
    if top_k < 1:
        raise UsageError(f"top_k {top_k}: expected a positive number of outliers")
    with connection(source) as con:
        check_ranks(con, scope)
        windows = rank_windows(con, scope)
        found = rows(
            con,
            f"""SELECT rank, launch, kernel, launch_ts, latency FROM ({_pairs_sql(windows)})
                ORDER BY latency DESC, rank, launch_ts LIMIT {int(top_k)}""",
        )
        notes = scope_notes(windows, scope, con)
    out = tuple(LatencyOutlierRow(int(r), str(a), str(k), int(t), int(v)) for r, a, k, t, v in found)
    return Table(f"Top {top_k} launch-to-run latencies", LatencyOutlierRow, out, tuple(notes))
