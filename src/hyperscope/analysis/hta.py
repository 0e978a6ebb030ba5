"""HTA-compatible mode: HolisticTraceAnalysis 0.5.0's temporal breakdown, kernel breakdown and
communication/computation overlap, with its definitions and quirks, from the store.

People compare our numbers with HTA's; this mode lets them get HTA's numbers (and lets our tests
prove we read the same events HTA reads) without HTA's pandas load. What it reproduces, from
``hta/analyzers/breakdown_analysis.py``, ``communication_analysis.py``, ``common/trace.py`` and
``trace_parser.py`` of 0.5.0:

* the events HTA keeps: rows with a duration and a category, not ``cat == "Trace"``;
  "GPU events" are those whose ``stream`` arg is not -1 (so ``cuda_sync`` rows with a stream, and a
  ``Context Sync`` on stream 4294967295, count as GPU time);
* kernel types by name regex (``^nccl.*Kernel`` communication, ``^Memcpy|^Memset|^dma`` memory,
  computation unless ``re.match((^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync))``, else other);
* the last-step drop: with ≥ 2 distinct ``ProfilerStep`` names in the whole trace, only host rows
  starting before the rank's last step starts are kept, and device rows joined to them on
  ``correlation`` (an inner join: duplicated correlations duplicate rows, as in HTA);
* optional ns rounding of float-µs traces (start rounded up, end down, to whole µs, computed on the
  float64 values HTA parses, so a timestamp's 0.25 µs float quantisation is reproduced too);
* the kernel table's "others" grouping and its re-aggregation over per-name sums;
* ``kernel_type_df`` segment lengths truncated to whole µs one segment at a time.

Times are in µs, as HTA reports them. Where our own definitions differ, see docs/analysis.md.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import duckdb

from hyperscope.analysis._common import Source, Table, connection, rows
from hyperscope.analysis.intervals import merge_sql
from hyperscope.store.profile import Profile

COMPUTATION: Final = "COMPUTATION"
COMMUNICATION: Final = "COMMUNICATION"
MEMORY: Final = "MEMORY"
OTHER: Final = "OTHER"
#: Bit of each type in HTA's sweep, in HTA's order (which fixes the "A overlapping B" labels).
_TYPE_BITS: Final = {COMPUTATION: 1, COMMUNICATION: 2, MEMORY: 4}
_IS_COMP: Final = f"ktype = '{COMPUTATION}'"
_IS_COMM: Final = f"ktype = '{COMMUNICATION}'"

#: HTA 0.5.0's kernel-type rules (hta/utils/utils.py), as RE2 for DuckDB. ``re.match`` anchors at
#: the start, hence the ``^`` around the whole compute exclusion.
KERNEL_TYPE_SQL: Final = f"""CASE
    WHEN regexp_matches(name, '^nccl.*Kernel') THEN '{COMMUNICATION}'
    WHEN regexp_matches(name, '^(Memcpy|Memset|dma)') THEN '{MEMORY}'
    WHEN NOT regexp_matches(name, '^((nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync))') THEN '{COMPUTATION}'
    ELSE '{OTHER}' END"""


@dataclass(frozen=True, slots=True)
class HtaOptions:
    """``ns_rounding``: HTA's default on float-µs traces (``HTA_DISABLE_NS_ROUNDING`` unset).
    ``include_last_step``: HTA's ``include_last_profiler_step``."""

    ns_rounding: bool = True
    include_last_step: bool = False


@dataclass(frozen=True, slots=True)
class HtaTemporalRow:
    rank: int
    idle_us: float
    compute_us: float
    non_compute_us: float
    kernel_us: float
    idle_pct: float
    compute_pct: float
    non_compute_pct: float


@dataclass(frozen=True, slots=True)
class HtaKernelTypeRow:
    kernel_type: str
    sum_us: float
    percentage: float


@dataclass(frozen=True, slots=True)
class HtaKernelRow:
    rank: int
    kernel_type: str
    name: str
    sum_us: float
    max_us: float
    min_us: float
    std_us: float
    mean_us: float


@dataclass(frozen=True, slots=True)
class HtaOverlapRow:
    rank: int
    overlap_pct: float | None  # None where HTA prints NaN: a rank without communication kernels


def _offsets(source: Source) -> dict[int, int]:
    """Each rank's clock offset: HTA reads the file's own timestamps, before the store's shift."""
    if isinstance(source, Profile):
        return {m.rank: m.clock_offset_ns for m in source.meta.ranks if m.clock_offset_ns}
    return {}


def _gpu_rows_sql(con: duckdb.DuckDBPyConnection, opts: HtaOptions, offsets: dict[int, int]) -> str:
    """HTA's per-rank frame after load and filtering, restricted to rows with a stream: SQL text.

    Columns: rank, name, ts (float µs, rebased), t_end, dur, ktype. Timestamps are taken back to
    the source file's clock first: rounding to whole µs and float64 quantisation depend on it.
    """
    shift = (
        "(ts_ns - CASE rank " + " ".join(f"WHEN {r} THEN {o}" for r, o in offsets.items()) + " ELSE 0 END)"
        if offsets
        else "ts_ns"
    )
    float_ranks = [
        int(r)
        for (r,) in rows(
            con,
            "SELECT rank FROM events WHERE dur_ns IS NOT NULL GROUP BY rank "
            f"HAVING bool_or({shift} % 1000 <> 0 OR dur_ns % 1000 <> 0)",
        )
    ]
    # A rank's trace has float timestamps (so HTA rounds it) when any ts or dur is not whole µs.
    rounding = opts.ns_rounding and float_ranks
    in_float = "rank IN (" + ", ".join(map(str, float_ranks)) + ")" if rounding else "false"
    base = f"""
        raw AS (SELECT rank, name, coalesce(stream, -1) AS stream, coalesce(correlation, -1) AS corr,
                       ({shift} // 1000)::DOUBLE + ({shift} % 1000) / 1000.0 AS ts_d, dur_ns / 1000.0 AS dur_d
                FROM events WHERE dur_ns IS NOT NULL AND cat IS NOT NULL AND cat <> 'Trace'),
        rnd AS (SELECT rank, name, stream, corr,
                       CASE WHEN {in_float} THEN ceil(ts_d) ELSE ts_d END AS ts0,
                       CASE WHEN {in_float} THEN floor(ts_d + dur_d) - ceil(ts_d) ELSE dur_d END AS dur
                FROM raw),
        base AS (SELECT rank, name, stream, corr, ts0 - (SELECT min(ts0) FROM rnd) AS ts, dur,
                        ((stream >= 0 AND corr >= 0) OR name IN ('Event Sync', 'Context Sync')) AS is_gpu
                 FROM rnd)"""
    steps = rows(
        con, "SELECT count(DISTINCT name) FROM events WHERE name LIKE '%ProfilerStep%' AND dur_ns IS NOT NULL"
    )
    if int(steps[0][0]) >= 2:
        keep = "ts <= last_end" if opts.include_last_step else "ts < last_start"
        filtered = f"""
        marks AS (SELECT rank, max(ts) AS last_start, max(ts + dur) AS last_end FROM base
                  WHERE NOT is_gpu AND name LIKE '%ProfilerStep%' GROUP BY rank),
        cpu AS (SELECT b.* FROM base b JOIN marks m USING (rank) WHERE NOT b.is_gpu AND {keep}),
        kept AS (SELECT g.* FROM base g JOIN cpu c ON g.rank = c.rank AND g.corr = c.corr WHERE g.is_gpu
                 UNION ALL SELECT * FROM cpu)"""
    else:
        filtered = "kept AS (SELECT * FROM base)"
    return f"""WITH {base}, {filtered},
        gpu AS (SELECT rank, name, ts, ts + dur AS t_end, dur, {KERNEL_TYPE_SQL} AS ktype
                FROM kept WHERE stream <> -1)"""


@dataclass(frozen=True, slots=True)
class HtaFrame:
    """HTA's filtered GPU rows for one profile, computed once: pass it to several HTA tables."""

    con: duckdb.DuckDBPyConnection
    prefix: str  # a WITH clause defining ``gpu``


@contextmanager
def frame(source: Source | HtaFrame, opts: HtaOptions) -> Iterator[HtaFrame]:
    """The caller's frame as it is, else HTA's rows of ``source`` as inline SQL."""
    if isinstance(source, HtaFrame):
        yield source
        return
    with connection(source) as con:
        yield HtaFrame(con, _gpu_rows_sql(con, opts, _offsets(source)))


def breakdowns(source: Source, opts: HtaOptions | None = None) -> dict[str, Table[Any]]:
    """All four HTA tables from one pass over the events (HTA's rows materialized once)."""
    opts = opts or HtaOptions()
    with connection(source) as con:
        table = f"_hs_hta_gpu_{id(con):x}"
        con.execute(
            f"CREATE TEMP TABLE {table} AS {_gpu_rows_sql(con, opts, _offsets(source))} SELECT * FROM gpu"
        )
        try:
            shared = HtaFrame(con, f"WITH gpu AS (SELECT * FROM {table})")
            return {
                "hta_temporal": temporal_breakdown(shared, opts),
                "hta_kernel_types": kernel_type_breakdown(shared, opts),
                "hta_kernels": kernel_breakdown(shared, opts),
                "hta_overlap": comm_comp_overlap(shared, opts),
            }
        finally:
            con.execute(f"DROP TABLE IF EXISTS {table}")


def _merge_where(where: str) -> str:
    """Merged (HTA ``merge_kernel_intervals``) intervals per rank of the GPU rows matching ``where``."""
    return merge_sql(f"(SELECT rank, ts AS s, t_end FROM gpu WHERE {where})", ["rank"], time_type="DOUBLE")


def temporal_breakdown(source: Source | HtaFrame, opts: HtaOptions | None = None) -> Table[HtaTemporalRow]:
    """HTA ``get_temporal_breakdown``: per rank, idle / compute / non-compute within the GPU span."""
    opts = opts or HtaOptions()
    with frame(source, opts) as fr:
        con, prefix = fr.con, fr.prefix
        allm = rows(
            con,
            f"""{prefix},
                m AS ({_merge_where("true")}),
                c AS ({_merge_where(_IS_COMP)}),
                ma AS (SELECT rank, arg_max(t_end, s) - min(s) AS kernel, sum(t_end - s) AS busy
                       FROM m GROUP BY rank),
                ca AS (SELECT rank, sum(t_end - s) AS comp FROM c GROUP BY rank)
                SELECT ma.rank, ma.kernel, ma.busy, coalesce(ca.comp, 0)
                FROM ma LEFT JOIN ca USING (rank) ORDER BY ma.rank""",
        )
    out = []
    for rank, kernel, busy, comp in allm:
        idle = kernel - busy
        non = kernel - comp - idle
        out.append(
            HtaTemporalRow(
                int(rank),
                idle,
                comp,
                non,
                kernel,
                round(100 * idle / kernel, 2) if kernel else math.nan,
                round(100 * comp / kernel, 2) if kernel else math.nan,
                round(100 * non / kernel, 2) if kernel else math.nan,
            )
        )
    return Table("Temporal breakdown (HTA 0.5.0 definitions, µs)", HtaTemporalRow, tuple(out))


def kernel_type_breakdown(
    source: Source | HtaFrame, opts: HtaOptions | None = None
) -> Table[HtaKernelTypeRow]:
    """HTA ``get_gpu_kernel_breakdown`` ``kernel_type_df`` (with memory kernels), summed over ranks."""
    opts = opts or HtaOptions()
    with frame(source, opts) as fr:
        con, prefix = fr.con, fr.prefix
        merged = " UNION ALL ".join(
            "SELECT rank, s, t_end, " + str(bit) + " AS bit FROM (" + _merge_where(f"ktype = '{t}'") + ")"
            for t, bit in _TYPE_BITS.items()
        )
        # at a tie the starts go first (ORDER BY t, v DESC): a kernel that begins where another ends
        # touches it, and HTA lists such a 0 µs overlap (resnet50_legacy: "COMPUTATION overlapping
        # MEMORY 0"); ordered by t alone the row came and went from run to run
        found = rows(
            con,
            f"""{prefix}, iv AS ({merged}),
                pts AS (SELECT rank, s AS t, bit AS v FROM iv UNION ALL SELECT rank, t_end, -bit FROM iv),
                run AS (SELECT rank, t, sum(v) OVER w AS running, lead(t) OVER w AS nt FROM pts
                        WINDOW w AS (PARTITION BY rank ORDER BY t, v DESC ROWS UNBOUNDED PRECEDING))
                SELECT running, sum(trunc(nt - t)) FROM run
                WHERE running > 0 AND nt IS NOT NULL GROUP BY running""",
        )
    sums: dict[str, float] = {}
    for running, dur in found:
        labels = [t for t, bit in _TYPE_BITS.items() if int(running) & bit]
        sums[" overlapping ".join(labels)] = sums.get(" overlapping ".join(labels), 0.0) + float(dur)
    total = sum(sums.values())
    out = sorted(
        (HtaKernelTypeRow(k, v, round(100 * v / total, 1) if total else math.nan) for k, v in sums.items()),
        key=lambda r: -r.sum_us,
    )
    return Table("GPU kernel types (HTA 0.5.0 definitions, µs)", HtaKernelTypeRow, tuple(out))


def kernel_breakdown(
    source: Source | HtaFrame,
    opts: HtaOptions | None = None,
    *,
    duration_ratio: float = 0.8,
    num_kernels: int = 10,
) -> Table[HtaKernelRow]:
    """HTA ``get_gpu_kernel_breakdown`` ``kernel_df``: top kernels per rank and type, rest "others".

    Only ``sum_us`` is comparable with a plain per-name aggregate once "others" exists: HTA then
    re-aggregates over per-name sums, which this reproduces (max = min = mean = sum for named rows).
    """
    opts = opts or HtaOptions()
    with frame(source, opts) as fr:
        con, prefix = fr.con, fr.prefix
        found = rows(
            con,
            f"""{prefix}
                SELECT rank, ktype, name, sum(dur), max(dur), min(dur), avg(dur), stddev_samp(dur)
                FROM gpu WHERE ktype IN ('{COMPUTATION}', '{COMMUNICATION}', '{MEMORY}')
                GROUP BY ALL ORDER BY rank, ktype, sum(dur) DESC, name""",
        )
    groups: dict[tuple[int, str], list[tuple[str, float, float, float, float, float]]] = {}
    for rank, ktype, name, total, mx, mn, mean, std in found:
        groups.setdefault((int(rank), str(ktype)), []).append(
            (
                str(name),
                float(total),
                float(mx),
                float(mn),
                float(mean),
                float(std) if std is not None else 0.0,
            )
        )
    out: list[HtaKernelRow] = []
    for (rank, ktype), kernels in groups.items():
        if len(kernels) <= num_kernels:
            out.extend(HtaKernelRow(rank, ktype, n, s, mx, mn, sd, m) for n, s, mx, mn, m, sd in kernels)
            continue
        cums = []
        acc = 0.0
        for k in kernels:
            acc += k[1]
            cums.append(acc)
        q = _quantile_linear(cums, duration_ratio)
        named: dict[str, list[float]] = {}
        for i, (k, c) in enumerate(zip(kernels, cums, strict=True)):
            label = "others" if c > q or i >= num_kernels else k[0]
            named.setdefault(label, []).append(k[1])
        for label, sums in named.items():
            out.append(
                HtaKernelRow(
                    rank,
                    ktype,
                    label,
                    sum(sums),
                    max(sums),
                    min(sums),
                    statistics.stdev(sums) if len(sums) > 1 else 0.0,
                    sum(sums) / len(sums),
                )
            )
    out.sort(key=lambda r: (r.kernel_type, r.name, r.rank))
    return Table("GPU kernels per rank and type (HTA 0.5.0 definitions, µs)", HtaKernelRow, tuple(out))


def _quantile_linear(values: list[float], q: float) -> float:
    """pandas ``Series.quantile`` (linear) of an unsorted list."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def comm_comp_overlap(source: Source | HtaFrame, opts: HtaOptions | None = None) -> Table[HtaOverlapRow]:
    """HTA ``get_comm_comp_overlap``: |comm ∩ compute| / |comm| per rank, in % (2 decimals)."""
    opts = opts or HtaOptions()
    with frame(source, opts) as fr:
        con, prefix = fr.con, fr.prefix
        found = rows(
            con,
            f"""{prefix},
                cm AS ({_merge_where(_IS_COMM)}),
                cp AS ({_merge_where(_IS_COMP)}),
                iv AS (SELECT rank, s, t_end, 1 AS v FROM cm UNION ALL SELECT rank, s, t_end, 2 FROM cp),
                pts AS (SELECT rank, s AS t, v FROM iv UNION ALL SELECT rank, t_end, -v FROM iv),
                run AS (SELECT rank, t, sum(v) OVER w AS running, lead(t) OVER w AS nt FROM pts
                        WINDOW w AS (PARTITION BY rank ORDER BY t ROWS UNBOUNDED PRECEDING)),
                ov AS (SELECT rank, sum(nt - t) AS both FROM run
                       WHERE running = 3 AND nt IS NOT NULL GROUP BY rank),
                cmt AS (SELECT rank, sum(t_end - s) AS comm FROM cm GROUP BY rank),
                ranks AS (SELECT DISTINCT rank FROM events)
                SELECT ranks.rank, coalesce(ov.both, 0), cmt.comm FROM ranks
                LEFT JOIN ov USING (rank) LEFT JOIN cmt USING (rank) ORDER BY ranks.rank""",
        )
    out = [
        HtaOverlapRow(int(r), round(100 * float(both) / float(comm), 2) if comm else None)
        for r, both, comm in found
    ]
    return Table("Communication/computation overlap (HTA 0.5.0 definitions, %)", HtaOverlapRow, tuple(out))
