"""An import's rows between reading and sorting: Arrow tables in memory, parts on disk past a size.

Inserting every chunk's rows into a DuckDB table and sorting them there with ``COPY ... ORDER
BY`` cost more than reading them (df_index_resolver: ~0.5 s of sort and write, plus the inserts,
of 1.6 s). Most imports fit in memory as Arrow tables many times over, so rows are held as they
come, sorted by Arrow and written by pyarrow (``profile.write_sorted``). Past ``SPILL_BYTES`` of
rows held, they are written out as parts (Arrow IPC, ``_parts``) of one rank each in the import's
work directory, and sorted into the events file a rank at a time (``profile.write_events``): a rank
of at most ``RANK_SORT_BYTES`` whole by Arrow; a larger one by merging its parts, which are
written sorted once the rank is known to be large (``_merge``). Memory stays bounded whatever the
trace's size: a 1 GB single-rank trace (5.9M rows) peaks at 0.77-0.82 GB.

Rows come in from the importer's workers (threads), from XPlane files, or as parts that worker
processes wrote (``_rankpool``). Each table's figures (rows, first time, last end per rank)
are taken as it comes, so settling a rank never scans the rows again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from hyperscope.schema.events import EVENT_SCHEMA, SORT_KEY
from hyperscope.store._arrow_rows import Figures, figures, merge_figures, release_freed
from hyperscope.store._merge import columnwise, sort_order
from hyperscope.store._parts import SUFFIX, is_run, part_rows, read_part, write_part

#: Arrow bytes of rows held in memory before they are written out as parts: a 54 MB trace's 216k rows
#: weigh 83 MB (most of it 30-odd typed arg columns, null for most events). Sorting and writing
#: them takes about twice that again, so an import held in memory peaks near 3x this plus the
#: libraries (~95 MB): under the 1 GB that a 1 GB trace may take.
SPILL_BYTES: Final = 128 << 20
#: Arrow bytes of a stored row, about (df_index_resolver: 385; the generated traces: ~370).
ROW_BYTES: Final = 400
#: Arrow bytes of one rank's rows that ``profile.write_events`` sorts whole (a generated rank of
#: 322k rows: 120 MB); a larger rank's parts are written sorted and merged (``_merge``).
RANK_SORT_BYTES: Final = 256 << 20


class StagedRows:
    """Rows of the event schema, unsorted; safe to add to from several threads."""

    def __init__(self, work_dir: Path, spill_bytes: int | None = None) -> None:
        self.work_dir = work_dir  # where rows past ``spill_bytes`` go, as parts
        self.spill_bytes = SPILL_BYTES if spill_bytes is None else spill_bytes
        self.figures: Figures = {}
        self._tables: list[tuple[int | None, pa.Table]] = []  # with its rank, None for several
        self._held = 0
        self._parts: list[tuple[int, Path]] = []  # each holds rows of one rank
        self._part_rows: dict[Path, int] = {}  # known when written: a footer read costs (0.9 s)
        self._spills = 0
        self._lock = threading.Lock()
        self._spilling = threading.Lock()

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
            self._tables.append((next(iter(found)) if len(found) == 1 else None, table))
            self._held += table.nbytes
            over = self._held > self.spill_bytes
        if over:
            self._spill(lambda: self._held > self.spill_bytes)

    def _spill(self, needed: Callable[[], bool]) -> None:
        """What is held written out, if ``needed()`` still says so once no other spill runs.

        One spill at a time: a worker that finds the rows held over the limit while another
        spill runs waits for it (and its reads with it) instead of holding a second batch. With
        sorted spills, a 1 GB single-rank trace peaked at 1.42 GB while spills ran side by side
        and each sort copied its rows twice; one at a time, sorted a column at a time and memory
        handed back after each (``release_freed``), 0.83 GB. The other workers go on adding."""
        with self._spilling:
            with self._lock:
                spill = self._take() if needed() else None
            if spill is not None:
                self._write_spill(*spill)
                release_freed()

    def add_parts(self, parts: list[tuple[int, Path]], found: Figures) -> None:
        """Parts of one rank's rows each that a worker process wrote (``hand_over``), with
        their figures: read into memory while the rows held stay under ``SPILL_BYTES``, else kept
        as they are."""
        with self._lock:
            merge_figures(self.figures, found)
            for rank, path in parts:
                self._part_rows[path] = part_rows(path)
                size = self._part_bytes(path)
                if not self._parts and self._held + size <= self.spill_bytes:
                    table = read_part(path)
                    self._tables.append((rank, table))
                    self._held += table.nbytes
                else:
                    self._parts.append((rank, path))

    def in_memory(self) -> pa.Table | None:
        """Every row as one table of contiguous columns, when all of them are held here (they
        are then no longer: call this once); else None (see ``rank_rows``, ``rank_runs``).

        Columns are joined one at a time, each chunk let go as soon as it is copied, so the rows
        are never twice in memory; a column that is null throughout is one shared array of its
        type. (Taking rows out of order from a column of many chunks costs a join per call:
        0.35 s for df_index_resolver's two row groups, against 0.03 s here.)"""
        if self._parts:
            return None
        with self._lock:
            tables, self._tables, self._held = [t for _, t in self._tables], [], 0
        return _contiguous(tables)

    def ranks(self) -> list[int]:
        return sorted(self.figures)

    def rank_bytes(self, rank: int) -> int:
        """About the Arrow bytes of one rank's rows, held or in parts."""
        with self._lock:
            held = sum(int(t.nbytes) for r, t in self._tables if r in (rank, None))  # mixed: at most
            return held + sum(self._part_bytes(p) for r, p in self._parts if r == rank)

    def _part_bytes(self, path: Path) -> int:
        """About the Arrow bytes a part's rows take once read: by its rows, since its compressed
        size says little (most typed arg columns are mostly null, 8 bytes a row in Arrow). The rows
        are known from its writing: reading the footers of a 300 MB trace's parts, each time a
        rank's size was asked, took 0.9 s."""
        rows = self._part_rows.get(path)
        return (part_rows(path) if rows is None else rows) * ROW_BYTES

    def rank_rows(self, rank: int) -> pa.Table:
        """One rank's rows as one contiguous table (once all are added, after ``in_memory`` said
        None, where ``rank_bytes`` says they fit)."""
        mine, paths = self._take_rank(rank)
        return _contiguous([*mine, *(read_part(p) for p in paths)])

    def large(self, rank: int) -> bool:
        """Whether a rank's rows are too many to sort whole (``rank_runs``, not ``rank_rows``)."""
        return self.rank_bytes(rank) > RANK_SORT_BYTES

    def rank_runs(self, rank: int) -> list[Path | pa.Table]:
        """One rank's rows as sorted runs for ``_merge.merged`` (once all are added, after
        ``in_memory`` said None): its parts, each sorted as it was written (or here, if it was
        written before the rank was known to be large), and what is held of it, sorted here."""
        mine, parts = self._take_rank(rank)
        runs: list[Path | pa.Table] = [_sorted(mine)] if mine else []
        for path in parts:
            if not is_run(path):
                run = path.with_name(f"run-{path.name}")
                _write_run(_sorted([read_part(path)]), run)
                with self._lock:  # the part is the run now, for whoever lists the parts after
                    self._parts = [(r, run if p == path else p) for r, p in self._parts]
                    self._part_rows[run] = self._part_rows.pop(path, 0)
                path.unlink()
                path = run
            runs.append(path)
        return runs

    def _take_rank(self, rank: int) -> tuple[list[pa.Table], list[Path]]:
        """One rank's rows held, let go (those of tables of several ranks filtered out of them),
        and its parts."""
        with self._lock:
            mine = [t for r, t in self._tables if r == rank]
            mine += [t.filter(pc.equal(t["rank"], rank)) for r, t in self._tables if r is None]
            self._tables = [(r, t) for r, t in self._tables if r != rank]
            return mine, [p for r, p in self._parts if r == rank]

    def hand_over(self) -> list[tuple[int, Path]]:
        """Every row as parts of one rank each (sorted where the rank is large) for
        another process to read (a worker's result): what is held in memory written out, and the
        parts written already as they are (not read and written again: 2.6M generated rows, ~4 s
        of each worker's time)."""
        self._spill(lambda: True)
        return list(self._parts)

    def _take(self) -> tuple[list[tuple[int | None, pa.Table]], int] | None:
        """The rows held, let go, and the number of the spill they go to (the caller holds the
        lock)."""
        if not self._tables:
            return None
        tables, self._tables, self._held = self._tables, [], 0
        self._spills += 1
        return tables, self._spills

    def _write_spill(self, tables: list[tuple[int | None, pa.Table]], number: int) -> None:
        """Rows moved out of memory: a part per rank, sorted now where
        the rank is already too large to sort whole at the end. (Inserting them into a DuckDB
        table that spilled to disk itself took 3.7 s of a 300 MB trace's 10.5 s import.)"""
        by_rank: dict[int, list[pa.Table]] = {}
        for rank, table in tables:
            if rank is not None:
                by_rank.setdefault(rank, []).append(table)
                continue
            for r in pc.unique(table["rank"]).to_pylist():  # rows of several small files
                by_rank.setdefault(int(r), []).append(table.filter(pc.equal(table["rank"], r)))
        tables.clear()
        written = []
        for rank, mine in by_rank.items():
            path = self.work_dir / f"spill-{number:05d}-rank{rank}{SUFFIX}"
            rows = sum(t.num_rows for t in mine)
            if self.figures[rank][0] * ROW_BYTES > RANK_SORT_BYTES:  # sure to be merged: a run
                _write_run(_sorted(mine), path)
            else:  # most likely sorted whole by Arrow at the end: sorting it now would be lost
                _write(mine, path)
            written.append((rank, path, rows))
        with self._lock:
            self._parts.extend((rank, path) for rank, path, _ in written)
            self._part_rows.update((path, rows) for _, path, rows in written)


def _contiguous(tables: list[pa.Table]) -> pa.Table:
    """``tables`` as one table of contiguous columns (``StagedRows.in_memory``)."""
    return columnwise(tables, sum(t.num_rows for t in tables), lambda column: column.combine_chunks())


def _write(tables: list[pa.Table], path: Path) -> None:
    """Rows as they came."""
    write_part(tables, path, run=False)


def _sorted(tables: list[pa.Table]) -> pa.Table:
    """``tables`` as one table sorted by ``SORT_KEY``, taken a column at a time (``_merge.columnwise``:
    joined first, then taken, the rows were in memory twice, ~130 MB more of each spill's peak)."""
    keys = pa.Table.from_arrays(
        [
            pa.chunked_array([c for t in tables for c in t.column(k).chunks], EVENT_SCHEMA.field(k).type)
            for k in SORT_KEY
        ],
        names=list(SORT_KEY),
    )
    order = sort_order(keys)
    del keys
    return columnwise(tables, len(order), lambda column: column.take(order))


def _write_run(table: pa.Table, path: Path) -> None:
    """Sorted rows as a part of small batches: a run for ``_merge.merged``. (Sorting a part as it
    is written, in a worker, overlaps the reading of the next; merging the runs then takes no
    sort of the whole rank.)"""
    write_part([table], path, run=True)
