"""The catalog's attempts table: a field once known is kept, and a catalog with none reads as {}."""

from __future__ import annotations

from pathlib import Path

from hyperscope.store import attempts
from hyperscope.store.attempts import Attempt
from hyperscope.store.catalog import Catalog


def test_attempts_are_merged_field_by_field_and_read_back_in_order(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "catalog.sqlite")
    assert attempts.read(cat, "c:1") == {}
    attempts.record(cat, "c:1", 7, 1, start_ns=30)
    attempts.record(cat, "c:1", 7, 0, start_ns=10, end_ns=20, end_state="REQUEUED", last_beat_ns=18)
    attempts.record(cat, "c:1", 7, 0, start_ns=None, end_ns=25, end_state="FAILED")  # later, knows less
    attempts.record(cat, "c:1", 7, 1, end_ns=40, end_state="COMPLETED", last_beat_ns=39)
    attempts.record(cat, "other:2", 7, 0, start_ns=1)
    assert attempts.read(cat, "c:1") == {
        7: [Attempt(7, 0, 10, 20, "REQUEUED", 18), Attempt(7, 1, 30, 40, "COMPLETED", 39)]
    }
    cat.close()
    ro = Catalog(tmp_path / "catalog.sqlite", read_only=True)
    assert attempts.read(ro, "other:2") == {7: [Attempt(7, 0, 1, None, "", None)]}
    ro.close()
