"""Custom annotations (``record_function`` / ``hyperscope.annotate`` ranges, kind ``annotation``):
duration statistics per name, and the histogram of the one a user picks.
"""

from __future__ import annotations

from dataclasses import dataclass

from hyperscope.analysis._common import (
    ALL,
    Scope,
    Source,
    Table,
    rows,
    scoped_events_sql,
)
from hyperscope.analysis._prepared import Prepared, prepared
from hyperscope.analysis.steps import HistogramBin, histogram
from hyperscope.errors import UsageError


@dataclass(frozen=True, slots=True)
class AnnotationRow:
    name: str
    count: int
    total_ns: int
    mean_ns: float
    min_ns: int
    p50_ns: float
    p90_ns: float
    p99_ns: float
    max_ns: int


def annotation_stats(
    source: Source | Prepared, scope: Scope = ALL, *, name: str | None = None, top_k: int = 20
) -> Table[AnnotationRow]:
    """Duration statistics per annotation name (``name``: only that one), longest total first."""
    with prepared(source, scope) as ctx:
        con, windows = ctx.con, ctx.windows
        where = "e.kind = 'annotation'" + (" AND e.name = $name" if name is not None else "")
        sql = scoped_events_sql(windows, where, "e.name, e.dur_ns")
        found = con.execute(
            f"""SELECT name, count(*), sum(dur_ns), avg(dur_ns), min(dur_ns),
                       quantile_cont(dur_ns, [0.5, 0.9, 0.99]), max(dur_ns)
                FROM ({sql}) GROUP BY name ORDER BY sum(dur_ns) DESC, name LIMIT {int(top_k)}""",
            {"name": name} if name is not None else {},
        ).fetchall()
        notes = list(ctx.notes)
        if name is not None and not found:
            known = [
                str(n)
                for (n,) in rows(
                    con,
                    "SELECT name FROM events WHERE kind = 'annotation' GROUP BY name ORDER BY "
                    "count(*) DESC LIMIT 5",
                )
            ]
            raise UsageError(
                f"annotation {name!r}: none in scope"
                + (
                    f" (the profile has e.g. {', '.join(map(repr, known))})"
                    if known
                    else " (the profile has no annotations)"
                )
            )
    out = tuple(
        AnnotationRow(
            str(n), int(c), int(t), float(m), int(lo), float(q[0]), float(q[1]), float(q[2]), int(hi)
        )
        for n, c, t, m, lo, q, hi in found
    )
    if not out:
        notes.append("no annotations in scope")
    return Table("Annotations", AnnotationRow, out, tuple(notes))


def annotation_histogram(
    source: Source | Prepared, name: str, scope: Scope = ALL, bins: int = 20
) -> Table[HistogramBin]:
    """Equal-width histogram of one annotation's durations."""
    if bins < 1:
        raise UsageError(f"bins {bins}: expected a positive number of histogram bins")
    with prepared(source, scope) as ctx:
        con, windows = ctx.con, ctx.windows
        sql = scoped_events_sql(windows, "e.kind = 'annotation' AND e.name = $name", "e.dur_ns")
        durs = [int(d) for (d,) in con.execute(f"SELECT dur_ns FROM ({sql})", {"name": name}).fetchall()]
        notes = list(ctx.notes)
    if not durs:
        raise UsageError(f"annotation {name!r}: none in scope")
    return Table(f"Duration histogram of {name}", HistogramBin, histogram(durs, bins), tuple(notes))
