"""An import's parts: rows written out of memory during an import and read back once, as Arrow IPC.

A part lives for one import (``_staged``): written when the rows held pass ``SPILL_BYTES``, or by a
rank worker process for the parent (``_rankpool``), then read whole or merged a batch at a time
(``_merge``), and deleted with the import's work directory. Nothing queries it, so it needs none of
Parquet's encodings: an IPC file is the Arrow buffers as they are, each compressed with lz4. On
330k stored rows (118 MB of Arrow), Parquet with lz4_raw wrote in 0.141 s and read back in 0.058 s;
IPC with lz4 in 0.035 s and 0.029 s, at 2.6x Parquet's bytes (11.5 MB against 4.4 MB), a
price paid only on the work directory's disk and only while the import runs.

Two facts travel in the schema's metadata, since parts cross processes: how many rows the part
holds (a footer read per size asked cost a 300 MB trace 0.9 s), and whether it is a sorted run of
``RUN_GROUP_ROWS`` batches that ``_merge.merged`` can take as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.ipc as ipc

from hyperscope.schema.events import EVENT_SCHEMA

#: Rows of a batch in a sorted part: what one run holds in memory while it is merged
#: (~6.5 MB of rows; 18 runs of a 1 GB trace, ~120 MB in all).
RUN_GROUP_ROWS: Final = 16 * 1024
#: Written once and read once: the cheapest codec that still shrinks the mostly-null columns.
CODEC: Final = "lz4"
SUFFIX: Final = ".arrow"
_ROWS: Final = b"hyperscope.part_rows"
_SORTED: Final = b"hyperscope.part_sorted"


def write_part(tables: list[pa.Table], path: Path, *, run: bool) -> int:
    """``tables`` (let go as they are written) as one part; a ``run`` is one sorted table, written
    in batches of ``RUN_GROUP_ROWS``. Returns the rows written. A part cut short (a full disk)
    raises and is removed, so no half part is ever read."""
    rows: int = sum(t.num_rows for t in tables)
    meta = {_ROWS: str(rows).encode(), _SORTED: b"1" if run else b"0"}
    options = ipc.IpcWriteOptions(compression=CODEC)
    try:
        with (
            pa.OSFile(str(path), "wb") as sink,
            ipc.new_file(sink, EVENT_SCHEMA.with_metadata(meta), options=options) as writer,
        ):
            while tables:
                writer.write_table(tables.pop(0), max_chunksize=RUN_GROUP_ROWS if run else None)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return rows


def _schema(path: Path) -> pa.Schema:
    with pa.OSFile(str(path), "rb") as source:
        return ipc.open_file(source).schema


def part_rows(path: Path) -> int:
    return int((_schema(path).metadata or {})[_ROWS])


def is_run(path: Path) -> bool:
    """Whether a part was written sorted (``write_part(run=True)``)."""
    return (_schema(path).metadata or {}).get(_SORTED) == b"1"


def _plain(table: pa.Table) -> pa.Table:
    table = table.replace_schema_metadata(EVENT_SCHEMA.metadata)
    return table if table.schema == EVENT_SCHEMA else table.cast(EVENT_SCHEMA)


def read_part(path: Path) -> pa.Table:
    """Every row of a part, as the event schema."""
    with pa.OSFile(str(path), "rb") as source:
        return _plain(ipc.open_file(source).read_all())


class PartBatches:
    """A part read a batch at a time (a run being merged: one batch of it in memory)."""

    def __init__(self, path: Path) -> None:
        self._source = pa.OSFile(str(path), "rb")
        self._reader = ipc.open_file(self._source)
        self.count = self._reader.num_record_batches

    def batch(self, index: int) -> pa.Table:
        table = pa.Table.from_batches([self._reader.get_batch(index)])
        if index == self.count - 1:
            self._source.close()
        return _plain(table)
