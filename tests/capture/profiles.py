"""Reading what a capture stored, for the capture tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hyperscope import Store


def query(home: Path, job: str, sql: str) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` over the newest profile of ``job`` (views ``events`` and ``samples``)."""
    with Store(home) as store:
        con = store.profile(job).connect()
        try:
            return con.sql(sql).fetchall()
        finally:
            con.close()


def imported_rows(result: Any, work: Path) -> list[tuple[Any, ...]]:
    """Kineto's ``result`` saved as torch's own JSON, imported, and read back as the direct
    reading reads it: without rank and node, and without what Kineto's exporter writes beside the
    activities (process and thread names, the profiler's own span, two instants). Sorted."""
    result.save(str(work / "trace.json"))
    with Store(work / "home") as store:
        store.import_traces([work / "trace.json"], "imported")
        con = store.profile("imported").connect()
        try:
            return con.sql(
                "SELECT * EXCLUDE (rank, node) FROM events WHERE ph NOT IN ('M', 'i') AND cat <> 'Trace' "
                "ORDER BY ALL"
            ).fetchall()
        finally:
            con.close()
