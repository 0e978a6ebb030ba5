"""What an import could not place: categories left ``other`` that look like device-side work.

A trace from a device or a Kineto version hyperscope does not know yet imports all the same (every
event is kept, ``cat`` as written), but its device work then has no device row and no place in the
GPU report. Saying so at import, with the categories named, is what lets a user tell an empty GPU
report from an idle GPU.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from hyperscope.schema.events import DEVICE_CATEGORY_PATTERN, EventKind
from hyperscope.schema.layout import RankMeta

#: Categories named in one warning at most; the rest are counted.
_NAMED: Final = 8


def device_like_others(events: pa.Table, ranks: list[RankMeta]) -> list[str]:
    """One warning per source file whose events of kind ``other`` look device-side: a category
    name like ``DEVICE_CATEGORY_PATTERN`` or a ``stream`` argument. ``events``: rows of the event
    schema, or just those of kind ``other`` (``profile.Written.others``)."""
    kept = pc.fill_null(
        pc.and_(
            pc.and_(pc.equal(events["kind"], EventKind.OTHER.value), pc.is_valid(events["cat"])),
            pc.is_in(events["ph"], pa.array(["X", "B", "E"])),
        ),
        False,
    )
    named = pc.match_substring_regex(events["cat"], DEVICE_CATEGORY_PATTERN, ignore_case=True)
    looks = pc.or_(pc.fill_null(named, False), pc.is_valid(events["stream"]))
    found = events.select(["rank", "cat"]).filter(pc.and_(kept, looks))
    if found.num_rows == 0:
        return []
    counted = found.group_by(["rank", "cat"]).aggregate([([], "count_all")]).to_pylist()
    counted.sort(key=lambda r: (r["rank"], -r["count_all"], r["cat"]))
    by_rank: dict[int, list[tuple[str, int]]] = {}
    for row in counted:
        by_rank.setdefault(int(row["rank"]), []).append((str(row["cat"]), int(row["count_all"])))
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
