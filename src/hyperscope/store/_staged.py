"""An import's rows between reading and sorting: Arrow tables in memory, Parquet parts past a size.

Inserting every chunk's rows into a DuckDB table and sorting them there with ``COPY ... ORDER
BY`` cost more than reading them (df_index_resolver: ~0.5 s of sort and write, plus the inserts,
of 1.6 s). Most imports fit in memory as Arrow tables many times over, so rows are held as they
come, sorted by Arrow and written by pyarrow (``profile.write_sorted``). Past ``SPILL_BYTES`` of
rows held, they are written out as unsorted Parquet parts in the import's work directory, and
DuckDB sorts the parts into the events file within its memory limit, spilling to disk as it needs:
memory stays bounded whatever the trace's size.

Rows come in from the importer's workers (threads), from XPlane files, or as Parquet parts that
worker processes wrote (``_rankpool``). Each table's figures (rows, first time, last end per rank)
are taken as it comes, so settling a rank never scans the rows again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from hyperscope.schema.events import EVENT_SCHEMA
from hyperscope.store import _sql
from hyperscope.store._arrow_rows import Figures, figures, merge_figures

#: Arrow bytes of rows held in memory before they move into DuckDB: a 54 MB trace's 216k rows
#: weigh 83 MB (most of it 30-odd typed arg columns, null for most events). Sorting and writing
#: them takes about twice that again, so an import held in memory peaks near 3x this plus the
#: libraries (~95 MB): under the 1 GB that a 1 GB trace may take.
SPILL_BYTES: Final = 128 << 20
#: Rows of a worker's part are written once and read once: a cheap codec, not a small file.
PART_CODEC: Final = "lz4_raw"


class StagedRows:
    """Rows of the event schema, unsorted; safe to add to from several threads."""

    def __init__(
        self,
        connect: Callable[[], duckdb.DuckDBPyConnection],
        work_dir: Path,
        spill_bytes: int | None = None,
    ) -> None:
        self._connect = connect  # the importer's connection, opened on first use
        self.work_dir = work_dir  # where rows past ``spill_bytes`` go, as Parquet parts
        self.spill_bytes = SPILL_BYTES if spill_bytes is None else spill_bytes
        self.figures: Figures = {}
        self._tables: list[pa.Table] = []
        self._held = 0
        self._parts: list[Path] = []
        self._spills = 0
        self._lock = threading.Lock()

    @property
    def rows(self) -> int:
        return sum(count for count, _, _ in self.figures.values())

    def add(self, table: pa.Table) -> None:
        """Rows with the event schema's columns (by name, types castable to it)."""
        if table.num_rows == 0:
            return
        if table.schema != EVENT_SCHEMA:
            table = table.select(EVENT_SCHEMA.names).cast(EVENT_SCHEMA)
        found = figures(table)
        with self._lock:
            merge_figures(self.figures, found)
            self._tables.append(table)
            self._held += table.nbytes
            spill = self._take() if self._held > self.spill_bytes else None
        if spill is not None:  # written without the lock: the other workers go on adding
            self._write_spill(*spill)

    def add_part(self, path: Path, found: Figures) -> None:
        """A Parquet file of rows a worker process wrote (``write_part``), with its figures: read
        into memory while the rows held stay under ``SPILL_BYTES``, else read by DuckDB."""
        with self._lock:
            merge_figures(self.figures, found)
            meta = pq.read_metadata(path)
            size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
            if not self._parts and self._held + size <= self.spill_bytes:
                table = pq.read_table(path)
                self._tables.append(table.cast(EVENT_SCHEMA))
                self._held += table.nbytes
            else:
                self._parts.append(path)

    def in_memory(self) -> pa.Table | None:
        """Every row as one table of contiguous columns, when all of them are held here (they
        are then no longer: call this once); else None (see ``relation``).

        Columns are joined one at a time, each chunk let go as soon as it is copied, so the rows
        are never twice in memory; a column that is null throughout is one shared array of its
        type. (Taking rows out of order from a column of many chunks costs a join per call:
        0.35 s for df_index_resolver's two row groups, against 0.03 s here.)"""
        if self._parts:
            return None
        with self._lock:
            tables, self._tables, self._held = self._tables, [], 0
        if not tables:
            return EVENT_SCHEMA.empty_table()
        rows = sum(t.num_rows for t in tables)
        chunks = [[c for t in tables for c in t.column(i).chunks] for i in range(len(EVENT_SCHEMA))]
        del tables
        nulls: dict[pa.DataType, pa.Array] = {}
        columns: list[pa.Array] = []
        for field, parts in zip(EVENT_SCHEMA, chunks, strict=True):
            if all(p.null_count == len(p) for p in parts):
                columns.append(nulls.setdefault(field.type, pa.nulls(rows, field.type)))
            else:
                columns.append(pa.chunked_array(parts, field.type).combine_chunks())
            parts.clear()
        return pa.Table.from_arrays(columns, schema=EVENT_SCHEMA)

    def relation(self) -> str:
        """Every row as one DuckDB relation (what is held in memory is written as a part first)."""
        with self._lock:
            spill = self._take()
        if spill is not None:
            self._write_spill(*spill)
        if not self._parts:
            return f"({_sql.empty_events()})"
        files = ", ".join(_sql.quote(str(p)) for p in self._parts)
        return f"read_parquet([{files}])"

    def write_part(self, path: Path) -> None:
        """Every row, unsorted, into one Parquet file (a worker process's result)."""
        table = self.in_memory()
        if table is not None:
            pq.write_table(table, path, compression=PART_CODEC)
            return
        con = self._connect()
        con.execute(
            f"COPY (SELECT * FROM {self.relation()}) TO {_sql.quote(str(path))} "
            f"(FORMAT parquet, COMPRESSION {PART_CODEC})"
        )

    def connection(self) -> duckdb.DuckDBPyConnection:
        return self._connect()

    def _take(self) -> tuple[list[pa.Table], Path] | None:
        """The rows held, let go, and the part they go to (the caller holds the lock)."""
        if not self._tables:
            return None
        tables, self._tables, self._held = self._tables, [], 0
        self._spills += 1
        path = self.work_dir / f"spill-{self._spills:05d}.parquet"
        self._parts.append(path)
        return tables, path

    def _write_spill(self, tables: list[pa.Table], path: Path) -> None:
        """Rows moved out of memory: a Parquet part written by pyarrow, which DuckDB sorts with
        the others at the end. (Inserting them into a DuckDB table that spilled to disk itself
        took 3.7 s of a 300 MB trace's 10.5 s import.)"""
        writer = pq.ParquetWriter(path, EVENT_SCHEMA, compression=PART_CODEC)
        try:
            while tables:
                writer.write_table(tables.pop())
        finally:
            writer.close()
