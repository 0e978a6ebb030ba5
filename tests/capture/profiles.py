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
