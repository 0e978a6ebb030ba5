"""What a profile's filter bar can offer: its nodes, ranks (and each rank's nodes), the range of
ProfilerStep numbers and the most frequent annotation names.

Three scans of the events (a second or more at 10M events on 2 cores), asked by every first look
at a profile beside its dashboard, so ``hyperscope import`` keeps the answer beside a finished
profile (:mod:`hyperscope.analysis.stored`). Plain JSON types, since it is stored and served as is.
"""

from __future__ import annotations

from typing import Any, Final

from hyperscope.analysis._common import STEP_NAME_SQL, Source, connection

#: the annotation names offered at most (most frequent first): a list a person can scroll
MAX_ANNOTATION_NAMES: Final = 1000


def profile_filters(source: Source) -> dict[str, Any]:
    """``{nodes, ranks, steps: {min, max} | None, annotations, rank_nodes}``; ``rank_nodes`` maps
    each rank (a decimal string) to its node(s), ``''`` for an unnamed node."""
    with connection(source) as con:
        have = con.execute("SELECT DISTINCT rank, coalesce(node, '') FROM events ORDER BY 1, 2").fetchall()
        step_range = con.execute(
            "SELECT min(n), max(n) FROM (SELECT TRY_CAST(regexp_extract(name, $re, 1) AS BIGINT) AS n "
            "FROM events WHERE kind = 'step') WHERE n IS NOT NULL",
            {"re": STEP_NAME_SQL},
        ).fetchone()
        names = con.execute(
            "SELECT name FROM events WHERE kind = 'annotation' AND name IS NOT NULL GROUP BY name "
            f"ORDER BY count(*) DESC, name LIMIT {MAX_ANNOTATION_NAMES}"
        ).fetchall()
    lo, hi = step_range if step_range else (None, None)
    ranks = sorted({int(r) for r, _ in have})
    return {
        "nodes": sorted({str(n) for _, n in have if n}),
        "ranks": ranks,
        "steps": {"min": int(lo), "max": int(hi)} if lo is not None and hi is not None else None,
        "annotations": [str(n) for (n,) in names],
        "rank_nodes": {str(r): sorted({str(n) for rr, n in have if rr == r}) for r in ranks},
    }
