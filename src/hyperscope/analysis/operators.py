"""CPU operators (``cpu_op`` events: ``aten::*`` and the like) by name: how often each ran and how
long it took, the host-side counterpart of the kernel table.

Durations are inclusive, as the profiler records them: ``aten::linear`` contains the
``aten::addmm`` it calls, so the column does not add up to the thread's busy time (``cpu_time``
gives that). An operator belongs to the scope when it overlaps the window; its full duration counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from hyperscope.analysis._common import ALL, Scope, Source, Table, rows, scoped_events_sql
from hyperscope.analysis._prepared import Prepared, prepared
from hyperscope.errors import UsageError


@dataclass(frozen=True, slots=True)
class OperatorRow:
    name: str
    calls: int
    total_ns: int
    mean_ns: float
    min_ns: int
    max_ns: int


def cpu_operators(
    source: Source | Prepared, scope: Scope = ALL, top_k: int | None = None
) -> Table[OperatorRow]:
    """Every CPU operator name in scope (or the ``top_k`` longest in total), longest total first."""
    if top_k is not None and top_k < 1:
        raise UsageError(f"top_k {top_k}: expected a positive number of operators")
    with prepared(source, scope) as ctx:
        sql = scoped_events_sql(ctx.windows, "e.kind = 'cpu_op'", "e.name, e.dur_ns")
        limit = f"LIMIT {int(top_k)}" if top_k is not None else ""
        found = rows(
            ctx.con,
            f"""SELECT name, count(*), sum(dur_ns), avg(dur_ns), min(dur_ns), max(dur_ns)
                FROM ({sql}) GROUP BY name ORDER BY sum(dur_ns) DESC, name {limit}""",
        )
        notes = list(ctx.notes)
    out = tuple(
        OperatorRow(str(n), int(c), int(t), float(m), int(lo), int(hi)) for n, c, t, m, lo, hi in found
    )
    if not out:
        notes.append("no CPU operators in scope")
    notes.append("operator durations are inclusive (an operator contains the ones it calls)")
    return Table("CPU operators", OperatorRow, out, tuple(notes))
