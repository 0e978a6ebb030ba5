"""Sorted runs merged into one sorted stream, a few batches in memory at a time.

A rank too large to sort in memory (a 1 GB single-rank trace: 5.9M rows, ~2.4 GB as Arrow) was
sorted by DuckDB in one ``COPY ... ORDER BY`` within its memory limit: 7.3 s of a 300 MB trace's
12 s import. Instead, once a rank is known to be that large, each part of it written out of
memory is sorted as it is written (an Arrow sort of at most ``_staged.SPILL_BYTES``; parts written
before are sorted at the end), and the parts of one rank are merged here.

The merge goes by batches, not by rows: each run holds one batch; the smallest of the runs'
last keys is the cut; every row up to the cut, from every run, is sorted by Arrow and handed on.
Nothing after the cut can sort before it (each run is sorted), so the batches come out in
order, and no Python code touches a row, only a few keys per batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hyperscope.schema.events import EVENT_SCHEMA, SORT_KEY
from hyperscope.store._parts import PartBatches

Key = tuple[tuple[bool, Any], ...]


def sort_order(table: pa.Table) -> pa.Array:
    """Indices that sort ``table`` by ``SORT_KEY`` (stable; nulls last, as Arrow puts them)."""
    return pc.sort_indices(table.select(list(SORT_KEY)), sort_keys=[(k, "ascending") for k in SORT_KEY])


def _key(table: pa.Table, row: int) -> Key:
    """Row ``row``'s sort key, comparable in Python the way ``sort_order`` orders rows: a null
    after every value."""
    values = (table.column(name)[row].as_py() for name in SORT_KEY)
    return tuple((v is None, v if v is not None else 0) for v in values)


def _rows_upto(table: pa.Table, cut: Key) -> int:
    """How many of sorted ``table``'s first rows have a key ≤ ``cut`` (a binary search).

    Its ends first: a large rank's runs are its spills, each a stretch of the trace's time, so at
    most cuts one run's batch lies wholly at or below the cut and the others' wholly above it.
    (Searching every run in full was ~1 s of Python's scalar reads on the 1 GB trace.)"""
    low, high = 0, int(table.num_rows)
    if high == 0 or _key(table, 0) > cut:
        return 0
    if _key(table, high - 1) <= cut:
        return high
    while low < high:
        mid = (low + high) // 2
        if _key(table, mid) <= cut:
            low = mid + 1
        else:
            high = mid
    return low


class _Run:
    """One sorted run, a batch at a time: a part (``_parts``), or a table held in memory."""

    def __init__(self, source: Path | pa.Table) -> None:
        self._file = PartBatches(source) if isinstance(source, Path) else None
        self._table = source if isinstance(source, pa.Table) else None
        self._groups = self._file.count if self._file is not None else 1
        self._next = 0
        self.rows: pa.Table | None = None
        self._fill()

    def _fill(self) -> None:
        """Reads the next non-empty batch, or leaves ``rows`` None at the end."""
        self.rows = None
        while self.rows is None and self._next < self._groups:
            if self._file is not None:
                group = self._file.batch(self._next)
            else:
                assert self._table is not None
                group, self._table = self._table, None
            self._next += 1
            self.rows = group if group.num_rows else None

    def last_key(self) -> Key:
        assert self.rows is not None
        return _key(self.rows, self.rows.num_rows - 1)

    def take_upto(self, cut: Key) -> pa.Table | None:
        """Its rows up to ``cut``, let go (the next batch read when all are taken)."""
        assert self.rows is not None
        count = _rows_upto(self.rows, cut)
        if count == 0:
            return None
        taken = self.rows.slice(0, count)
        if count == self.rows.num_rows:
            self._fill()
        else:
            self.rows = self.rows.slice(count)
        return taken


def merged(sources: Sequence[Path | pa.Table], batch_rows: int) -> Iterator[pa.Table]:
    """Every row of the sorted runs ``sources`` (parts, or tables), sorted, as tables of
    ``batch_rows`` rows (the last one shorter): a writer's row groups. A single run is only
    cut into batches."""
    runs = [run for run in (_Run(s) for s in sources) if run.rows is not None]
    pending: list[pa.Table] = []
    held = 0
    while runs:
        cut = min(run.last_key() for run in runs)
        pieces = [piece for piece in (run.take_upto(cut) for run in runs) if piece is not None]
        runs = [run for run in runs if run.rows is not None]
        batch = _joined(pieces)
        pending.append(_taken(batch, sort_order(batch)) if len(pieces) > 1 else batch)
        held += batch.num_rows
        while held >= batch_rows:
            out, pending, held = _split(pending, batch_rows)
            yield out
    if held:
        yield _joined(pending)


def _split(pending: list[pa.Table], rows: int) -> tuple[pa.Table, list[pa.Table], int]:
    """The first ``rows`` rows of ``pending`` as one table; the rest and how many they are."""
    whole = pa.concat_tables(pending)
    rest = whole.slice(rows)
    return _joined([whole.slice(0, rows)]), [rest] if rest.num_rows else [], rest.num_rows


def columnwise(
    tables: list[pa.Table], rows: int, make: Callable[[pa.ChunkedArray], pa.Array | pa.ChunkedArray]
) -> pa.Table:
    """One table of ``rows`` rows whose columns are ``make`` of each column of ``tables`` (rows of
    the event schema), a column at a time, each column's chunks let go once it is made: the rows
    are never twice in memory. A column null throughout is one shared null array of its type, not
    made: most typed args columns are null for most events (a take of a whole batch of the 1 GB
    trace spent 0.60 of its 0.73 s on them)."""
    chunks = [[c for t in tables for c in t.column(i).chunks] for i in range(len(EVENT_SCHEMA))]
    tables.clear()
    nulls: dict[pa.DataType, pa.Array] = {}
    columns: list[pa.Array | pa.ChunkedArray] = []
    for field, parts in zip(EVENT_SCHEMA, chunks, strict=True):
        if all(p.null_count == len(p) for p in parts):
            if field.type not in nulls:
                nulls[field.type] = pa.nulls(rows, field.type)
            columns.append(nulls[field.type])
        else:
            columns.append(make(pa.chunked_array(parts, field.type)))
        parts.clear()
    return pa.Table.from_arrays(columns, schema=EVENT_SCHEMA)


def _joined(tables: list[pa.Table]) -> pa.Table:
    """``tables`` as one table of one chunk per column."""
    return columnwise(list(tables), sum(t.num_rows for t in tables), lambda column: column.combine_chunks())


def _taken(table: pa.Table, order: pa.Array) -> pa.Table:
    return columnwise([table], len(order), lambda column: column.take(order))
