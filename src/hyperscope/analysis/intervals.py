"""Interval arithmetic in SQL: one sweep gives busy time, idle time and every overlap at once.

Every time-based figure (GPU busy/idle, compute vs communication, their overlap, the exclusive
"kernel type" segments) is a question about which kinds of interval are open at each instant. A
single sweep over start/end points per group answers all of them: running counts per kind, and the
length of each segment between consecutive points labelled with the set of kinds open in it. It
needs one sort of 2N points, which is what DuckDB does well, instead of one self-join per question.
Counting (not flag-setting) makes overlapping intervals of one kind on one stream harmless: a kernel
overlapping another on the same stream (bad input) adds no time twice.
"""

from __future__ import annotations

from collections.abc import Sequence


def sweep_sql(intervals: str, keys: Sequence[str], bits: Sequence[int], *, time_type: str = "BIGINT") -> str:
    """SQL giving ``keys..., state, dur`` per group: time spent with exactly ``state`` kinds open.

    ``intervals`` is a relation with columns ``keys..., s, t_end, bit`` (``bit`` one of ``bits``,
    powers of two). ``state`` is the OR of the bits open in a segment (0 = none: a gap between the
    group's first start and last end). Empty and reversed intervals are ignored.
    """
    key_list = ", ".join(keys)
    sep = ", " if keys else ""
    counts = ", ".join(f"sum(CASE WHEN bit = {b} THEN d ELSE 0 END) OVER w AS c{b}" for b in bits)
    state = " + ".join(f"(CASE WHEN c{b} > 0 THEN {b} ELSE 0 END)" for b in bits)
    partition = f"PARTITION BY {key_list}" if keys else ""
    return f"""
        WITH iv AS (SELECT {key_list}{sep} s::{time_type} AS s, t_end::{time_type} AS t_end, bit
                    FROM {intervals} WHERE t_end > s),
        pts AS (SELECT {key_list}{sep} s AS t, bit, 1 AS d FROM iv
                UNION ALL SELECT {key_list}{sep} t_end AS t, bit, -1 AS d FROM iv),
        run AS (SELECT {key_list}{sep} t, {counts}, lead(t) OVER w AS nt FROM pts
                WINDOW w AS ({partition} ORDER BY t, d ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))
        SELECT {key_list}{sep} {state} AS state, sum(nt - t) AS dur
        FROM run WHERE nt IS NOT NULL AND nt > t GROUP BY ALL"""


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
