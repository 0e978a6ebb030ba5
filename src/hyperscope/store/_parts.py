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

A column null in every row written (most of the ~30 typed args columns, for most traces) is left
out of the file and read back as one null array per type, shared, instead of 8 bytes a row of
zeros compressed, written, read and decompressed. On the generated 8-rank set (three imports
each, alternated): 8.1-9.2 s against 9.1-9.9 s, peak 635-703 MiB against 645-693 MiB, no
difference in memory beyond the spread (Parquet parts: 621-688 MiB).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.ipc as ipc

from hyperscope.schema.events import EVENT_SCHEMA, SORT_KEY

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
    kept = [
        f.name
        for f in EVENT_SCHEMA
        if f.name in SORT_KEY or any(t.column(f.name).null_count < t.num_rows for t in tables)
    ]
    schema = pa.schema([EVENT_SCHEMA.field(name) for name in kept], metadata=meta)
    options = ipc.IpcWriteOptions(compression=CODEC)
    try:
        with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, schema, options=options) as writer:
            while tables:
                table = tables.pop(0).select(kept).cast(schema)
                writer.write_table(table, max_chunksize=RUN_GROUP_ROWS if run else None)
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
    """A part's rows with every column of the event schema, those left out as shared nulls."""
    nulls: dict[pa.DataType, pa.Array] = {}
    columns: list[pa.Array | pa.ChunkedArray] = []
    for field in EVENT_SCHEMA:
        if field.name in table.column_names:
            columns.append(table.column(field.name))
            continue
        if field.type not in nulls:
            nulls[field.type] = pa.nulls(table.num_rows, field.type)
        columns.append(nulls[field.type])
    return pa.Table.from_arrays(columns, schema=EVENT_SCHEMA)


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
        if self.count == 0:
            self._source.close()

    def batch(self, index: int) -> pa.Table:
        table = pa.Table.from_batches([self._reader.get_batch(index)])
        if index == self.count - 1:
            self._source.close()
        return _plain(table)
