"""An import's parts (``store._parts``): rows written out of memory come back as they went, with
every column of the event schema, whether a column was null throughout (left out of the file)
or not, and a part the disk could not take is not left behind."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from hyperscope.schema.events import EVENT_SCHEMA
from hyperscope.store import _parts


def _rows(count: int, start: int = 0) -> pa.Table:
    columns = {
        "rank": pa.array([0] * count, pa.int32()),
        "pid": pa.array([1] * count, pa.int64()),
        "tid": pa.array([i % 3 for i in range(count)], pa.int64()),
        "kind": pa.array(["kernel"] * count),
        "ts_ns": pa.array(range(start, start + count), pa.int64()),
        "name": pa.array([f"k{i}" for i in range(start, start + count)]),
        "correlation": pa.array([i if i % 2 else None for i in range(count)], pa.int64()),
    }
    arrays = [columns.get(f.name, pa.nulls(count, f.type)) for f in EVENT_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=EVENT_SCHEMA)


@pytest.mark.parametrize("run", [False, True])
def test_rows_come_back_with_every_column(tmp_path: Path, run: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_parts, "RUN_GROUP_ROWS", 7)
    tables = [_rows(20), _rows(5, 20)] if not run else [_rows(25)]
    want = pa.concat_tables(tables)
    path = tmp_path / f"part{_parts.SUFFIX}"
    assert _parts.write_part(list(tables), path, run=run) == 25
    assert _parts.part_rows(path) == 25 and _parts.is_run(path) == run
    back = _parts.read_part(path)
    assert back.schema == EVENT_SCHEMA
    assert back.to_pylist() == want.to_pylist()
    with pa.OSFile(str(path), "rb") as source:  # null throughout: not in the file
        stored = ipc.open_file(source).schema.names
    assert "correlation" in stored and "stream" not in stored and "rank" in stored
    batches = _parts.PartBatches(path)
    got = [batches.batch(i) for i in range(batches.count)]
    assert all(b.schema == EVENT_SCHEMA for b in got)
    assert pa.concat_tables(got).to_pylist() == want.to_pylist()
    if run:
        assert [b.num_rows for b in got] == [7, 7, 7, 4]


def test_a_column_null_in_one_table_only_is_kept(tmp_path: Path) -> None:
    second = _rows(4, 10)
    second = second.set_column(
        EVENT_SCHEMA.get_field_index("stream"), "stream", pa.array([7] * 4, pa.int64())
    )
    path = tmp_path / f"part{_parts.SUFFIX}"
    _parts.write_part([_rows(3), second], path, run=False)
    assert _parts.read_part(path)["stream"].to_pylist() == [None] * 3 + [7] * 4


def test_a_part_the_disk_cannot_take_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*_: object, **__: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pa.ipc.RecordBatchFileWriter, "write_table", full)
    path = tmp_path / f"part{_parts.SUFFIX}"
    with pytest.raises(OSError, match="No space left"):
        _parts.write_part([_rows(3)], path, run=False)
    assert not path.exists()
