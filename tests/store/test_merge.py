"""Sorted runs merged by batches (``store._merge``): the rows of every run, each once, in the order
one Arrow sort of all of them gives, whatever the runs' sizes, batches, ties and nulls, parts on
disk and tables in memory alike."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from hyperscope.schema.events import EVENT_SCHEMA, SORT_KEY
from hyperscope.store import _parts
from hyperscope.store._merge import merged, sort_order


def _rows(rng: random.Random, count: int, start: int) -> pa.Table:
    """Rows of one rank with few distinct tracks and times (many ties) and some null keys."""
    maybe = lambda v: None if rng.random() < 0.1 else v  # noqa: E731
    columns = {
        "rank": [0] * count,
        "pid": [maybe(rng.randrange(3)) for _ in range(count)],
        "tid": [maybe(rng.randrange(4)) for _ in range(count)],
        "kind": [rng.choice(["cpu_op", "kernel", "runtime"]) for _ in range(count)],
        "ts_ns": [maybe(rng.randrange(50)) for _ in range(count)],
        "name": [f"row-{start + i}" for i in range(count)],  # which row it is, to count each once
        "ph": ["X"] * count,
    }
    arrays = [
        pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(count, f.type)
        for f in EVENT_SCHEMA
    ]
    return pa.Table.from_arrays(arrays, schema=EVENT_SCHEMA)


def _keyed(table: pa.Table) -> list[tuple[object, ...]]:
    return list(zip(*(table[k].to_pylist() for k in SORT_KEY), strict=True))


@pytest.mark.parametrize("seed", range(10))
def test_merged_runs_are_the_rows_of_one_sort(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    runs: list[Path | pa.Table] = []
    tables, start = [], 0
    for number in range(rng.randrange(1, 7)):
        table = _rows(rng, rng.randrange(0, 300), start)
        start += table.num_rows
        tables.append(table)
        if rng.random() < 0.3:  # rows held in memory: one run of a single row group
            runs.append(table.take(sort_order(table)))
            continue
        path = tmp_path / f"run-{number}{_parts.SUFFIX}"
        monkeypatch.setattr(_parts, "RUN_GROUP_ROWS", rng.randrange(1, 40))
        assert _parts.write_part([table.take(sort_order(table))], path, run=True) == table.num_rows
        assert _parts.is_run(path) and _parts.part_rows(path) == table.num_rows
        runs.append(path)
    whole = pa.concat_tables(tables)
    want = whole.take(sort_order(whole))
    batch_rows = rng.randrange(1, 100)
    batches = list(merged(runs, batch_rows))
    assert all(b.num_rows == batch_rows for b in batches[:-1])
    assert all(0 < b.num_rows <= batch_rows for b in batches)
    got = pa.concat_tables(batches) if batches else EVENT_SCHEMA.empty_table()
    assert got.num_rows == whole.num_rows
    assert sorted(got["name"].to_pylist()) == sorted(whole["name"].to_pylist())  # each row once
    assert _keyed(got) == _keyed(want)  # the order of one sort, nulls last (ties may swap)


def test_no_runs_merge_to_nothing(tmp_path: Path) -> None:
    empty = tmp_path / f"empty{_parts.SUFFIX}"
    _parts.write_part([EVENT_SCHEMA.empty_table()], empty, run=True)
    assert list(merged([], 10)) == []
    assert list(merged([empty], 10)) == []
