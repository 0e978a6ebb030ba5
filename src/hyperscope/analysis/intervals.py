"""Interval arithmetic in SQL: one sweep gives busy time, idle time and every overlap at once.

Every time-based figure (GPU busy/idle, compute vs communication, their overlap, the exclusive
"kernel type" segments) is a question about which kinds of interval are open at each instant. A
single sweep over start/end points per group answers all of them: running counts per kind, and the
length of each segment between consecutive points labelled with the set of kinds open in it. It
needs one sort of 2N points, which is what DuckDB does well, instead of one self-join per question.
Counting (not flag-setting) makes overlapping intervals of one kind on one stream harmless: a kernel
overlapping another on the same stream (bad input) adds no time twice. The GPU sweep itself is in
gpupass.py; here are its packing helpers, HTA's island merge, covered pieces and bucket sums.
"""

from __future__ import annotations

from collections.abc import Sequence


def unit_sql(bit: str, bits: Sequence[int]) -> str:
    """The packed unit an interval of kind ``bit`` adds to the running sum (20 bits per kind).

    One running sum then carries every kind's count (a million intervals of one kind open at once
    would overflow; ends sort before starts at equal times, so no count dips below zero): one
    window aggregate instead of one per kind.
    """
    return (
        "CASE "
        + bit
        + " "
        + " ".join(f"WHEN {b} THEN {1 << (20 * i)}" for i, b in enumerate(bits))
        + " END::BIGINT"
    )


def state_sql(packed: str, bits: Sequence[int]) -> str:
    """The OR of the kinds whose count in the packed running sum ``packed`` is above zero."""
    return " + ".join(
        f"(CASE WHEN ({packed} >> {20 * i}) & {(1 << 20) - 1} > 0 THEN {b} ELSE 0 END)"
        for i, b in enumerate(bits)
    )


def merge_sql(intervals: str, keys: Sequence[str], *, time_type: str = "BIGINT") -> str:
    """SQL giving ``keys..., s, t_end``: the union of ``intervals`` as disjoint merged intervals.

    Touching intervals merge (as HTA's ``merge_kernel_intervals`` does), so the result is the same
    set of islands HTA builds; its sweep over them is what HTA-compatible mode reproduces. An island
    starts where a start lies beyond every interval that started strictly earlier; intervals that
    start together share one decision, so the answer never depends on how a sort orders ties.
    """
    key_list = ", ".join(keys)
    sep = ", " if keys else ""
    partition = f"PARTITION BY {key_list}" if keys else ""
    return f"""
        WITH iv AS (SELECT {key_list}{sep} s::{time_type} AS s, t_end::{time_type} AS t_end FROM {intervals}),
        m AS (SELECT *, max(t_end) OVER ({partition} ORDER BY s
                     RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW EXCLUDE GROUP) AS prev_end FROM iv),
        g AS (SELECT *, sum(CASE WHEN prev_end IS NULL OR s > prev_end THEN 1 ELSE 0 END)
                     OVER ({partition} ORDER BY s RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
                     AS grp FROM m)
        SELECT {key_list}{sep} min(s) AS s, max(t_end) AS t_end FROM g GROUP BY {key_list}{sep} grp"""


def bucket_sum_sql(intervals: str, keys: Sequence[str], lo: int, width: int) -> str:
    """SQL giving ``keys..., b, busy``: time covered by disjoint ``intervals`` in each bucket
    ``[lo + i·width, lo + (i+1)·width)``, ``b`` being the bucket start.

    Intervals inside one bucket (nearly all of them) are summed directly; only those that cross a
    bucket edge are split, so millions of kernels cost one pass, not one row per bucket touched.
    """
    key_list = ", ".join(keys)
    sep = ", " if keys else ""
    lo, width = int(lo), int(width)
    return f"""
        WITH iv AS (SELECT {key_list}{sep} s, t_end, (s - {lo}) // {width} AS b0,
                           (t_end - 1 - {lo}) // {width} AS b1
                    FROM {intervals} WHERE t_end > s),
        one AS (SELECT {key_list}{sep} b0 AS bi, t_end - s AS busy FROM iv WHERE b0 = b1),
        cut AS (SELECT {key_list}{sep} s, t_end, unnest(range(b0, b1 + 1)) AS bi FROM iv WHERE b0 <> b1),
        split AS (SELECT {key_list}{sep} bi,
                         least(t_end, {lo} + (bi + 1) * {width}) - greatest(s, {lo} + bi * {width}) AS busy
                  FROM cut)
        SELECT {key_list}{sep} {lo} + bi * {width} AS b, sum(busy) AS busy
        FROM (SELECT * FROM one UNION ALL SELECT * FROM split) GROUP BY ALL"""


def pieces_sql(intervals: str, keys: Sequence[str]) -> str:
    """SQL giving ``keys..., s, t_end``: disjoint pieces whose union is the union of ``intervals``.

    Each interval keeps only the part beyond the furthest end of the intervals sorted before it
    (by start). One window pass, and the result does not depend on the order of equal starts: a
    cheaper stand-in for ``merge_sql`` wherever only covered time matters, not the islands.
    """
    key_list = ", ".join(keys)
    sep = ", " if keys else ""
    partition = f"PARTITION BY {key_list}" if keys else ""
    return f"""
        WITH m AS (SELECT {key_list}{sep} s, t_end, max(t_end) OVER ({partition} ORDER BY s
                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end FROM {intervals})
        SELECT {key_list}{sep} greatest(s, coalesce(prev_end, s)) AS s, t_end
        FROM m WHERE t_end > greatest(s, coalesce(prev_end, s))"""
