"""Launch-to-run latency: from the CPU's launch call to the start of its kernel on the GPU.

Pairs come from the ``correlation`` id that CUPTI puts on both the runtime/driver call and the
device operation (per rank: ids are per process). A long latency means work queued behind earlier
work (the GPU is the bottleneck, which is good); a short one with an idle GPU means the CPU is.
A negative latency is impossible and means the host and device clocks disagree: such pairs are
counted in the notes and left out of the statistics rather than averaged in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hyperscope.analysis._common import (
    ALL,
    Level,
    Scope,
    Source,
    Table,
    rows,
    windows_sql,
)
from hyperscope.analysis._prepared import Prepared, prepared
from hyperscope.analysis.steps import HistogramBin
from hyperscope.errors import UsageError

_HOST = "('runtime', 'driver')"


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


def _pairs_sql(ctx: Prepared) -> str:
    """Launch → device op pairs (numbers only: statistics over millions of launches)."""
    return f"""SELECT d.rank, w.node, d.launch_ts, d.ts_ns - d.launch_ts AS latency
               FROM {ctx.devn} d JOIN {windows_sql(ctx.windows)} w ON d.rank = w.rank
               WHERE d.kind <> 'sync' AND d.launch_ts IS NOT NULL"""


def launch_latency(
    source: Source | Prepared, scope: Scope = ALL, level: Level = Level.JOB
) -> Table[LatencyStatsRow]:
    """Distribution of launch-to-start latency per rank, node or for the job."""
    with prepared(source, scope) as ctx:
        con = ctx.con
        key = level.key_sql()
        found = rows(
            con,
            f"""WITH p AS ({_pairs_sql(ctx)})
                SELECT {key} AS g, count(*) FILTER (WHERE latency >= 0), avg(latency) FILTER (WHERE
                    latency >= 0),
                       quantile_cont(latency, [0.5, 0.9, 0.99]) FILTER (WHERE latency >= 0),
                       max(latency), count(*) FILTER (WHERE latency < 0)
                FROM p GROUP BY g ORDER BY g""",
        )
        notes = list(ctx.notes)
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


def launch_latency_histogram(
    source: Source | Prepared, scope: Scope = ALL, bins: int = 20
) -> Table[HistogramBin]:
    """Equal-width histogram of launch-to-start latencies (all ranks of the scope together).

    Bins follow ``steps.histogram``: integer nanoseconds, [lo, hi), the last bin holding the maximum.
    Binned in SQL, so millions of launches never become Python numbers.
    """
    if bins < 1:
        raise UsageError(f"bins {bins}: expected a positive number of histogram bins")
    with prepared(source, scope) as ctx:
        con = ctx.con
        pairs = f"WITH p AS ({_pairs_sql(ctx)}) "
        lo, hi, n = rows(
            con, pairs + "SELECT min(latency), max(latency), count(*) FROM p WHERE latency >= 0"
        )[0]
        notes = list(ctx.notes)
        if not n:
            notes.append("no launch → device op pairs (correlation ids) in scope")
            return Table("Launch-to-run latency histogram", HistogramBin, (), tuple(notes))
        lo, hi = int(lo), int(hi)
        if lo == hi:
            return Table(
                "Launch-to-run latency histogram",
                HistogramBin,
                (HistogramBin(lo, hi + 1, int(n)),),
                tuple(notes),
            )
        width = math.ceil((hi - lo + 1) / bins)
        counts = dict(
            rows(
                con,
                pairs + f"SELECT least((latency - {lo}) // {width}, {bins - 1}) AS b, count(*) FROM p "
                "WHERE latency >= 0 GROUP BY b",
            )
        )
    out = tuple(
        HistogramBin(lo + i * width, lo + (i + 1) * width, int(counts.get(i, 0))) for i in range(bins)
    )
    return Table("Launch-to-run latency histogram", HistogramBin, out, tuple(notes))


def latency_outliers(
    source: Source | Prepared, scope: Scope = ALL, top_k: int = 10
) -> Table[LatencyOutlierRow]:
    """The ``top_k`` longest launch-to-start latencies."""
    if top_k < 1:
        raise UsageError(f"top_k {top_k}: expected a positive number of outliers")
    with prepared(source, scope) as ctx:
        con = ctx.con
        found = rows(
            con,
            f"""WITH top AS (SELECT rank, correlation, launch_ts, ts_ns - launch_ts AS latency
                             FROM {ctx.devn} WHERE kind <> 'sync' AND launch_ts IS NOT NULL
                             ORDER BY latency DESC, rank, launch_ts LIMIT {int(top_k)}),
                    named AS (SELECT e.rank, e.correlation,
                                     any_value(e.name) FILTER (WHERE e.kind IN {_HOST}) AS launch,
                                     any_value(e.name) FILTER (WHERE e.kind NOT IN {_HOST}) AS kernel
                              FROM events e
                              SEMI JOIN top ON e.rank = top.rank AND e.correlation = top.correlation
                              WHERE e.kind IN ('kernel', 'memcpy', 'memset', 'runtime', 'driver')
                              GROUP BY ALL)
                SELECT top.rank, coalesce(named.launch, '?'), coalesce(named.kernel, '?'), top.launch_ts,
                       top.latency
                FROM top LEFT JOIN named ON named.rank = top.rank AND named.correlation = top.correlation
                ORDER BY top.latency DESC, top.rank, top.launch_ts""",
        )
        notes = list(ctx.notes)
    out = tuple(LatencyOutlierRow(int(r), str(a), str(k), int(t), int(v)) for r, a, k, t, v in found)
    return Table(f"Top {top_k} launch-to-run latencies", LatencyOutlierRow, out, tuple(notes))
