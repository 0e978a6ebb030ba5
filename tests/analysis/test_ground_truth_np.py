"""The numpy writer of the ground-truth profile (groundtruth_np.py) writes DuckDB's events."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from hyperscope.analysis import groundtruth as gt
from hyperscope.analysis import groundtruth_np as gn
from hyperscope.schema.events import SORT_KEY
from hyperscope.schema.layout import EVENTS_DIR


def _same_parts(a: Path, b: Path) -> int:
    """Both profiles' parts hold the same rows (as multisets), columns and types, in the store's
    order; the number of parts."""
    left, right = sorted((a / EVENTS_DIR).iterdir()), sorted((b / EVENTS_DIR).iterdir())
    assert [p.name for p in left] == [p.name for p in right]
    con = duckdb.connect()
    key = ", ".join(SORT_KEY)
    for x, y in zip(left, right, strict=True):
        assert (
            con.execute(f"DESCRIBE SELECT * FROM '{x}'").fetchall()
            == con.execute(f"DESCRIBE SELECT * FROM '{y}'").fetchall()
        )
        for p, q in ((x, y), (y, x)):
            assert con.execute(f"SELECT * FROM '{p}' EXCEPT ALL SELECT * FROM '{q}'").fetchall() == []
        # sorted by the store's key within the part, as DuckDB's ORDER BY leaves it
        rows = con.execute(f"SELECT {key} FROM '{y}'").fetchall()
        assert rows == sorted(rows)
    return len(left)


@pytest.mark.parametrize(
    ("part_events", "parts"),
    [(2_000_000, 1), (60, 15)],  # one part for all ranks; several parts per rank
)
def test_the_same_events_in_the_same_parts_as_duckdb_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, part_events: int, parts: int
) -> None:
    monkeypatch.setattr(gt, "_PART_EVENTS", part_events)
    spec = gt.GroundTruthSpec(ranks=3, nodes=2, steps=10, kernels_per_step=5)
    slow = gt.write_profile(tmp_path / "duckdb", spec)
    fast = gn.write_profile(tmp_path / "numpy", spec)
    assert _same_parts(slow.path, fast.path) == parts
    assert fast.meta.events == slow.meta.events == gt.expected(spec).events
    assert (fast.meta.ts_min_ns, fast.meta.ts_max_ns) == (slow.meta.ts_min_ns, slow.meta.ts_max_ns)
    assert fast.meta.ranks == slow.meta.ranks


def test_a_spec_with_options_is_written_by_duckdb(tmp_path: Path) -> None:
    spec = gt.GroundTruthSpec(ranks=2, steps=4, memory=True, clock_jump=True)
    assert gn.plain(gt.GroundTruthSpec()) and not gn.plain(spec)
    slow = gt.write_profile(tmp_path / "duckdb", spec)
    fast = gn.write_profile(tmp_path / "numpy", spec)
    assert _same_parts(slow.path, fast.path) == 1
    assert fast.meta.events == gt.expected(spec).events
