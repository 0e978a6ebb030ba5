"""The Tables page's tables: every kernel, CPU operator and annotation name in scope, with full
names and the statistics a sortable table shows (the dashboard's charts show only the top k).

- kernels: launches, total, mean, min, p50, p99, max, and where the trace recorded them (Kineto
  does for CUDA kernels) the grid, block, registers per thread and estimated occupancy;
- CPU operators: calls, total (inclusive) and *self* time (the operator's own, without the
  operators it called on its thread), and the input shapes most often recorded (``record_shapes``);
- annotations: :func:`~hyperscope.analysis.annotations.annotation_stats`, every name.

Self time needs each operator's direct parent, which SQL cannot find cheaply without the nesting
depth; it is found here over the operators sorted by start (longest first among equal starts), as
a trace viewer's stack of open ones nests them, by array passes (``self_times``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from hyperscope.analysis._common import ALL, TYPE_SQL, Scope, Source, Table, rows, scoped_events_sql
from hyperscope.analysis._prepared import Prepared, prepared
from hyperscope.analysis.annotations import AnnotationRow, annotation_stats

__all__ = ["KernelTableRow", "OperatorTableRow", "annotation_table", "kernel_table", "operator_table"]

#: what "every name" means for annotations (the API's row cap refuses more anyway)
_ALL_NAMES: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class KernelTableRow:
    name: str
    kernel_type: str  # computation | communication
    launches: int
    total_ns: int
    mean_ns: float
    min_ns: int
    p50_ns: float
    p99_ns: float
    max_ns: int
    grid: str | None  # the most frequent (ties: the first in order), "32×2×1"; "(+N more)" when it varies
    block: str | None
    registers_per_thread: str | None  # "72", or "32–72" when it varies
    occupancy_pct: float | None  # mean of the estimated achieved occupancy


@dataclass(frozen=True, slots=True)
class OperatorTableRow:
    name: str
    calls: int
    total_ns: int
    self_ns: int
    mean_ns: float
    min_ns: int
    max_ns: int
    input_shapes: str | None  # the most frequent "Input Dims"; "(+N more)" when they vary


def _varied(most: object, distinct: object) -> str | None:
    if most is None:
        return None
    more = int(str(distinct)) - 1 if distinct is not None else 0
    return f"{most} (+{more} more)" if more > 0 else str(most)


def kernel_table(source: Source | Prepared, scope: Scope = ALL) -> Table[KernelTableRow]:
    """Every GPU kernel name in scope, longest total first."""
    with prepared(source, scope) as ctx:
        sql = scoped_events_sql(
            ctx.windows,
            "e.kind = 'kernel'",
            "e.name, e.kind, e.dur_ns, array_to_string(e.grid, '×') AS g, "
            "array_to_string(e.block, '×') AS b, e.registers_per_thread AS regs, e.occupancy_pct AS occ",
        )
        found = rows(
            ctx.con,
            f"""SELECT name, any_value({TYPE_SQL}), count(*), sum(dur_ns), avg(dur_ns), min(dur_ns),
                       quantile_cont(dur_ns, [0.5, 0.99]), max(dur_ns),
                       mode(g ORDER BY g), count(DISTINCT g), mode(b ORDER BY b), count(DISTINCT b),
                       min(regs), max(regs), avg(occ)
                FROM ({sql}) GROUP BY name ORDER BY sum(dur_ns) DESC, name""",
        )
        notes = list(ctx.notes)
    out = []
    for n, t, c, s, m, lo, q, hi, g, gn, b, bn, rlo, rhi, occ in found:
        regs = None if rlo is None else (str(rlo) if rlo == rhi else f"{rlo}–{rhi}")
        out.append(
            KernelTableRow(
                str(n), str(t), int(c), int(s), float(m), int(lo), float(q[0]), float(q[1]), int(hi),
                _varied(g, gn), _varied(b, bn), regs, None if occ is None else round(float(occ), 2),
            )
        )  # fmt: skip
    if not out:
        notes.append("no GPU kernels in scope")
    elif all(r.grid is None for r in out):
        notes.append("the trace recorded no grid, block, registers or occupancy")
    return Table("GPU kernels", KernelTableRow, tuple(out), tuple(notes))


def self_times(thread: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each interval's length minus its direct children's (clipped to it), for intervals sorted by
    thread, then start, longest first among equal starts. Intervals that nest are a trace's call
    tree; one that overlaps its parent's end counts only up to that end.

    The parent is the one a trace viewer's stack of open intervals gives: the top of the stack
    once the intervals ended by the start are popped, which is the latest earlier interval of the
    thread still open at that start (every interval popped or below ended by then). It is found
    for all intervals at once by pointer jumping (a Python loop over 3M operators took 20 s): each
    interval's candidate starts as the one before it; a candidate already ended is replaced by its
    own parent, or its own candidate, and nothing skipped can be open (it had ended by the
    candidate's start, which is no later)."""
    n = len(ts)
    thread, ts, end = np.asarray(thread), np.asarray(ts, np.int64), np.asarray(end, np.int64)
    own: np.ndarray = (end - ts).astype(np.int64)
    if n == 0:
        return own
    first = np.r_[True, thread[1:] != thread[:-1]]
    floor = np.maximum.accumulate(np.where(first, np.arange(n), 0))  # each thread's first interval
    cand = np.arange(n) - 1
    parent = np.full(n, -2, dtype=np.int64)  # -2: not known yet, -1: none
    parent[_outermost(first, ts, end)] = -1
    todo = np.flatnonzero(parent == -2)
    while len(todo):
        c = cand[todo]
        none = c < floor[todo]
        found = ~none & (end[np.maximum(c, 0)] > ts[todo])
        parent[todo[none]] = -1
        parent[todo[found]] = c[found]
        more = ~(none | found)
        todo, c = todo[more], c[more]
        known = parent[c] != -2
        cand[todo] = np.where(known, parent[c], cand[c])  # -1 (no parent) reads as "none" next
    child = np.flatnonzero(parent >= 0)
    up = parent[child]
    inside = np.minimum(end[child], end[up]) - ts[child]
    own -= np.bincount(up, weights=inside, minlength=n).astype(np.int64)
    return own


def _outermost(first: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The intervals that start once every earlier one of their thread has ended (no parent),
    by a running maximum of the ends per thread: most of a trace's operators are outermost, and
    they would take pointer jumping the most rounds (each candidate an ended sibling)."""
    lo = int(min(ts.min(), end.min()))
    span = int(max(ts.max(), end.max())) - lo + 1
    threads = np.cumsum(first) - 1
    if int(threads[-1]) + 1 > np.iinfo(np.int64).max // span:
        return first  # no packed key fits: the first of each thread only
    base = threads * span
    running = np.maximum.accumulate(base + (end - lo))  # per thread: its base only grows
    before = np.r_[np.int64(0), running[:-1]] - base
    out: np.ndarray = first | (before <= ts - lo)
    return out


def operator_table(source: Source | Prepared, scope: Scope = ALL) -> Table[OperatorTableRow]:
    """Every CPU operator name in scope with its total and self time, longest total first."""
    with prepared(source, scope) as ctx:
        base = scoped_events_sql(
            ctx.windows,
            "e.kind = 'cpu_op'",
            "e.rank, e.pid, e.tid, e.name, e.ts_ns, e.dur_ns, "
            """json_extract_string(e.args, '$."Input Dims"') AS dims""",
        )
        ctx.con.execute(f"CREATE OR REPLACE TEMP TABLE _ops AS SELECT * FROM ({base})")
        try:
            stats = rows(
                ctx.con,
                """SELECT name, count(*), sum(dur_ns), avg(dur_ns), min(dur_ns), max(dur_ns),
                          mode(dims ORDER BY dims), count(DISTINCT dims)
                   FROM _ops GROUP BY name""",
            )
            tree = ctx.con.execute(
                """SELECT dense_rank() OVER (ORDER BY rank, pid, tid) AS thread, ts_ns,
                          ts_ns + dur_ns AS t_end, name
                   FROM _ops ORDER BY rank, pid, tid, ts_ns, dur_ns DESC"""
            ).fetchnumpy()
        finally:
            ctx.con.execute("DROP TABLE IF EXISTS _ops")
        notes = list(ctx.notes)
    own = self_times(
        np.asarray(tree["thread"]), np.asarray(tree["ts_ns"], np.int64), np.asarray(tree["t_end"], np.int64)
    )
    names = np.asarray(tree["name"], dtype=object)
    self_by_name: dict[str, int] = {}
    if len(names):
        uniq, codes = np.unique(names.astype(str), return_inverse=True)
        sums = np.bincount(codes, weights=own.astype(np.float64), minlength=len(uniq))
        self_by_name = {str(u): round(float(v)) for u, v in zip(uniq, sums, strict=True)}
    out = sorted(
        (
            OperatorTableRow(
                str(n),
                int(c),
                int(t),
                self_by_name.get(str(n), 0),
                float(m),
                int(lo),
                int(hi),
                _varied(d, dn),
            )
            for n, c, t, m, lo, hi, d, dn in stats
        ),
        key=lambda r: (-r.total_ns, r.name),
    )
    if not out:
        notes.append("no CPU operators in scope")
    else:
        notes.append("total is inclusive (an operator contains the ones it calls); self leaves them out")
        if all(r.input_shapes is None for r in out):
            notes.append("no input shapes recorded (profile with record_shapes=True to see them)")
    return Table("CPU operators", OperatorTableRow, tuple(out), tuple(notes))


def annotation_table(source: Source | Prepared, scope: Scope = ALL) -> Table[AnnotationRow]:
    """Every annotation name in scope, longest total first."""
    return annotation_stats(source, scope, top_k=_ALL_NAMES)
