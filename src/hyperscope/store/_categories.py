"""What an import could not place: categories left ``other`` that look like device-side work.

A trace from a device or a Kineto version hyperscope does not know yet imports all the same (every
event is kept, ``cat`` as written), but its device work then has no device row and no place in the
GPU report. Saying so at import, with the categories named, is what lets a user tell an empty GPU
report from an idle GPU.
"""

from __future__ import annotations

from typing import Final

import duckdb

from hyperscope.schema.events import DEVICE_CATEGORY_PATTERN, EventKind
from hyperscope.schema.layout import RankMeta

#: Categories named in one warning at most; the rest are counted.
_NAMED: Final = 8


def device_like_others(con: duckdb.DuckDBPyConnection, events: str, ranks: list[RankMeta]) -> list[str]:
    """One warning per source file whose events of kind ``other`` look device-side: a category
    name like ``DEVICE_CATEGORY_PATTERN`` or a ``stream`` argument. ``events`` is a relation of
    the event schema (a table, or ``read_parquet(...)``)."""
    found = con.execute(
        f"""SELECT rank, cat, count(*) AS n FROM {events}
            WHERE kind = ? AND cat IS NOT NULL AND ph IN ('X', 'B', 'E')
              AND (regexp_matches(cat, ?, 'i') OR stream IS NOT NULL)
            GROUP BY rank, cat ORDER BY rank, n DESC, cat""",
        [EventKind.OTHER.value, DEVICE_CATEGORY_PATTERN],
    ).fetchall()
    by_rank: dict[int, list[tuple[str, int]]] = {}
    for rank, cat, n in found:
        by_rank.setdefault(int(rank), []).append((str(cat), int(n)))
    files = {m.rank: m.source_file for m in ranks}
    warnings = []
    for rank, cats in by_rank.items():
        named = ", ".join(f"{cat!r} ({n:,} events)" for cat, n in cats[:_NAMED])
        if len(cats) > _NAMED:
            named += f" and {len(cats) - _NAMED} more"
        warnings.append(
            f"{files.get(rank, f'rank {rank}')}: categories hyperscope does not know but that look "
            f"device-side were stored as kind 'other' (no device row in the timeline, not in the "
            f"GPU report): {named}"
        )
    return warnings
