"""The public surface of hyperscope.analysis is what __all__ lists, and all of it exists."""

from __future__ import annotations

import duckdb

import hyperscope.analysis as analysis


def test_all_is_complete_and_sorted() -> None:
    assert len(set(analysis.__all__)) == len(analysis.__all__)
    for name in analysis.__all__:
        assert hasattr(analysis, name), name
    public = {n for n in vars(analysis) if not n.startswith("_")}
    submodules = {
        "annotations",
        "breakdown",
        "collective_waits",
        "collectives",
        "compare",
        "cpu",
        "dashboard",
        "filters",
        "gpu",
        "gpupass",
        "groundtruth",
        "groundtruth_np",
        "idle",
        "intervals",
        "kernels",
        "latency",
        "memory",
        "memory_view",
        "operators",
        "ranks",
        "slowdown",
        "steps",
        "stored",
        "tables",
    }
    assert public - set(analysis.__all__) <= submodules


def test_tables_serialize_to_plain_json() -> None:
    import json

    from hyperscope.analysis import HistogramBin, Table

    table = Table("h", HistogramBin, (HistogramBin(0, 10, 3),), ("note",))
    assert json.loads(json.dumps(table.to_dict())) == {
        "title": "h",
        "columns": ["lo_ns", "hi_ns", "count"],
        "rows": [{"lo_ns": 0, "hi_ns": 10, "count": 3}],
        "notes": ["note"],
    }


def test_memory_limit_grows_only_for_large_profiles() -> None:
    from hyperscope.analysis._common import LARGE_PROFILE_EVENTS, MEMORY_LIMIT, memory_limit

    assert memory_limit(10_000_000) == MEMORY_LIMIT == "1GB"
    large = memory_limit(LARGE_PROFILE_EVENTS + 1)
    assert large.endswith("MB") and 1024 <= int(large[:-2]) <= 8 * 1024


def test_memory_limit_in_bytes_is_what_duckdb_reads_of_the_setting() -> None:
    """The server sets its one database's limit in bytes (server/analysis_db.py): the same limit."""
    from hyperscope.analysis._common import MEMORY_LIMIT, memory_limit_bytes

    con = duckdb.connect()
    con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    as_text = con.execute("SELECT current_setting('memory_limit')").fetchall()
    con.execute(f"SET memory_limit = '{memory_limit_bytes(10_000_000)}B'")
    assert con.execute("SELECT current_setting('memory_limit')").fetchall() == as_text
