"""A profile on disk: writing its sorted, compact Parquet files atomically, and reading them back.

Writes go to a staging directory that is renamed into place only when complete, so a reader never
sees half a profile and an interrupted write leaves nothing a reader would pick up.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hyperscope._proc import process_alive
from hyperscope.errors import StoreError
from hyperscope.schema.events import (
    DELTA_COLUMNS,
    EVENT_SCHEMA,
    SAMPLE_SCHEMA,
    STATS_COLUMNS,
    EventKind,
)
from hyperscope.schema.layout import (
    EVENTS_DIR,
    META_FILE,
    PROFILES_DIR,
    RANKS_DIR,
    SAMPLES_DIR,
    STAGING_PREFIX,
    ProfileMeta,
    RankMeta,
)
from hyperscope.store._arrow_rows import release_freed
from hyperscope.store._merge import merged, sort_order
from hyperscope.store._sql import empty_events

if TYPE_CHECKING:  # imported where used: a capture writes its parts without DuckDB
    import duckdb

    from hyperscope.store._staged import StagedRows

ROW_GROUP_ROWS: Final = 128 * 1024
#: zstd level of an import's events file: 0.15 s for df_index_resolver's 216k rows (562 KB), where
#: 17 takes 0.56 s (508 KB); the legacy ResNet 0.06 s at 9 (317 KB), 0.36 s at 17 (286 KB).
IMPORT_FAST_LEVEL: Final = 9
#: zstd level of a second write where the first is over its share of the 1/50 promise: only
#: ns_resolution_trace among the shared traces (302 KB at 9, 293 KB at 17, of 308 KB in all).
IMPORT_ZSTD_LEVEL: Final = 17


def new_profile_id() -> str:
    return uuid.uuid4().hex[:16]


@contextmanager
def staging(home: Path) -> Iterator[Path]:
    """A private work directory under the store root; removed whatever happens."""
    root = home / PROFILES_DIR
    root.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(root)
    path = root / f"{STAGING_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _remove_abandoned(root: Path) -> None:
    """Staging directories of processes that no longer run (killed imports, crashed captures)."""
    for entry in root.glob(f"{STAGING_PREFIX}*"):
        pid_text = entry.name[len(STAGING_PREFIX) :].split("-", 1)[0]
        if pid_text.isdigit() and not process_alive(int(pid_text)):
            shutil.rmtree(entry, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class Written:
    """What ``write_events`` wrote: its rows, the profile's time bounds (metadata events aside)
    and the rows of kind ``other`` that have a category (for ``_categories.device_like_others``)."""

    rows: int
    ts_min_ns: int | None
    ts_max_ns: int | None
    others: pa.Table


def write_events(
    staged: StagedRows,
    out_dir: Path,
    offsets: dict[int, int],
    *,
    budget_bytes: int | None = None,
    rows_held: Callable[[pa.Table], None] | None = None,
) -> Written:
    """Sort the staged rows by track and time, add each rank's clock offset, write one Parquet file.

    Rows are sorted by rank first, so row-group statistics let a reader of one rank skip the
    others. Rows held in memory are sorted by Arrow and written by pyarrow at zstd
    ``IMPORT_FAST_LEVEL``, per-column encodings and one shared dictionary; where that file is
    over ``budget_bytes`` (the share of the promise ``raw JSON / 50`` the events file may take) it
    is written again at ``IMPORT_ZSTD_LEVEL``. Rows written out as parts (a trace too large to
    hold) are sorted a rank at a time by Arrow into the same writer where the rank's rows weigh
    at most ``_staged.RANK_SORT_BYTES``; a larger rank's parts, each sorted as it was written, are merged.

    ``rows_held(events)``, where every row is in memory: called with them (as they will be
    stored, in no particular order) before they are sorted and written, for what runs beside the
    import (``_beside``): the Parquet writer keeps one core busy and leaves the other mostly idle.
    """
    events_dir = out_dir / EVENTS_DIR
    events_dir.mkdir(parents=True, exist_ok=True)
    target = events_dir / "part-00000.parquet"
    table = staged.in_memory()
    if table is None:
        return _write_by_rank(staged, target, offsets)
    table = _shifted(table, offsets)
    if rows_held is not None:
        rows_held(table)
    order = sort_order(table)
    write_sorted(table, order, target, level=IMPORT_FAST_LEVEL)
    if budget_bytes is not None and target.stat().st_size > budget_bytes:
        write_sorted(table, order, target, level=IMPORT_ZSTD_LEVEL)
    return Written(table.num_rows, *_bounds(table), _others(table))


def _bounds(table: pa.Table) -> tuple[int | None, int | None]:
    """The first start and the last end of ``table``'s rows, metadata events aside."""
    timed = table.select(["ts_ns", "dur_ns"]).filter(pc.not_equal(table["ph"], "M"))
    ends = pc.add(timed["ts_ns"], pc.fill_null(timed["dur_ns"], 0))
    return pc.min(timed["ts_ns"]).as_py(), pc.max(ends).as_py()


def _others(table: pa.Table) -> pa.Table:
    return table.select(["rank", "cat", "kind", "ph", "stream"]).filter(
        pc.and_(pc.equal(table["kind"], EventKind.OTHER.value), pc.is_valid(table["cat"]))
    )


def _shifted(table: pa.Table, offsets: dict[int, int]) -> pa.Table:
    """``table`` with each rank's clock offset added to its ``ts_ns``."""
    shifts = {r: o for r, o in offsets.items() if o}
    if not shifts:
        return table
    ranks = pa.array(list(shifts), pa.int32())
    by_row = pc.fill_null(
        pc.take(pa.array(list(shifts.values()), pa.int64()), pc.index_in(table["rank"], ranks)), 0
    )
    column = EVENT_SCHEMA.get_field_index("ts_ns")
    return table.set_column(column, "ts_ns", pc.add_checked(table["ts_ns"], by_row))


def _write_by_rank(staged: StagedRows, target: Path, offsets: dict[int, int]) -> Written:
    """Rows too many to hold at once, a rank at a time (the events are sorted by rank first).

    A rank of at most ``_staged.RANK_SORT_BYTES`` is read whole and sorted by Arrow (the generated 8-rank
    set's 2.6M rows: 3.0 s, where DuckDB's sort of all of them took 8 s). A larger one is never
    whole in memory: its parts, each sorted as it was written, and what is held of it are merged
    (``_merge``): 2.1 s on a 300 MB single-rank trace, where DuckDB's sort took 7.3 s. (Merging
    every rank cost the 8-rank set 1.5 s more: many small row groups read, batches joined.)"""
    tally = _Tally()
    writer: _Behind | None = None
    try:
        for rank in staged.ranks():
            writer = writer or _Behind(_writer(target, EVENT_SCHEMA, IMPORT_FAST_LEVEL))
            _write_rank(writer, staged, rank, offsets.get(rank, 0), tally)
    finally:
        if writer is not None:
            writer.close()
    release_freed()  # what the sort took, for the precompute that follows
    return tally.written()


def _write_rank(writer: _Behind, staged: StagedRows, rank: int, offset: int, tally: _Tally) -> None:
    if not staged.large(rank):
        table = _shifted(staged.rank_rows(rank), {rank: offset})
        _write_groups(writer, table, sort_order(table))
        tally.add(table)
        return
    for batch in merged(staged.rank_runs(rank), ROW_GROUP_ROWS):
        table = _shifted(batch, {rank: offset})
        writer.write_table(table)
        tally.add(table)


@dataclass
class _Tally:
    """What ``_write_by_rank`` wrote, table by table."""

    rows: int = 0
    lows: list[int] = field(default_factory=list)
    highs: list[int] = field(default_factory=list)
    others: list[pa.Table] = field(default_factory=list)

    def add(self, table: pa.Table) -> None:
        low, high = _bounds(table)
        self.rows += table.num_rows
        self.lows += [low] if low is not None else []
        self.highs += [high] if high is not None else []
        self.others.append(_others(table))

    def written(self) -> Written:
        kept = pa.concat_tables(self.others) if self.others else _others(EVENT_SCHEMA.empty_table())
        return Written(self.rows, min(self.lows, default=None), max(self.highs, default=None), kept)


def write_sorted(table: pa.Table, order: pa.Array, path: Path, *, level: int) -> None:
    """``table``'s rows in ``order`` into one Parquet file, in the layout of ``write_part``, a row
    group at a time (so the sorted copy is never whole in memory).

    One file: two files written at once (a run of row groups each) saved nothing on
    df_index_resolver's import and cost its precompute 0.08 s (median of 5, quiet). Its row
    groups are written behind the taking of the next (``_Behind``)."""
    writer = _Behind(_writer(path, EVENT_SCHEMA, level))
    try:
        _write_groups(writer, table, order)
    finally:
        writer.close()


class _Behind:
    """A Parquet writer that encodes and compresses each row group on a thread of its own while
    the caller takes (or merges) the next: pyarrow's write and Arrow's take both release the GIL,
    and on 2 cores they overlap. One group waits at most; an error in the write is raised at the
    next ``write_table`` or at ``close``."""

    def __init__(self, writer: pq.ParquetWriter) -> None:
        self._writer = writer
        self._queue: queue.Queue[pa.Table | None] = queue.Queue(maxsize=1)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="hyperscope-write", daemon=True)
        self._thread.start()

    def write_table(self, table: pa.Table) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(table)

    def _run(self) -> None:
        while (table := self._queue.get()) is not None:
            if self._error is None:  # after an error: taken and dropped, so the caller never waits
                try:
                    self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
                except BaseException as exc:  # raised in the caller's thread
                    self._error = exc

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self._writer.close()
        if self._error is not None:
            raise self._error


def _write_groups(writer: _Behind, table: pa.Table, order: pa.Array) -> None:
    # a column null throughout (most typed args of most traces) is not taken but shared, per type
    empty = {f.name for f in EVENT_SCHEMA if table[f.name].null_count == table.num_rows}
    size = min(ROW_GROUP_ROWS, len(order))
    nulls = {f.type: pa.nulls(size, f.type) for f in EVENT_SCHEMA if f.name in empty}
    for start in range(0, len(order), ROW_GROUP_ROWS):
        rows = order.slice(start, ROW_GROUP_ROWS)
        columns = [
            nulls[f.type].slice(0, len(rows)) if f.name in empty else pc.take(table[f.name], rows)
            for f in EVENT_SCHEMA
        ]
        writer.write_table(pa.Table.from_arrays(columns, schema=EVENT_SCHEMA))


def write_part(table: pa.Table, path: Path, *, level: int = 19) -> None:
    """One Parquet file of already sorted rows, in the compact layout of the event schema.

    pyarrow with zstd 19, per-column encodings and one shared dictionary: where fixed costs weigh
    most (small imports, the parts of a capture), its file is 1.6x smaller than DuckDB's. A
    capture writes at ``level`` 9: 8.7x faster than 19 for 9% more bytes (measured on CPU ops).
    """
    schema = EVENT_SCHEMA if "kind" in table.column_names else SAMPLE_SCHEMA
    writer = _writer(path, schema, level)
    try:
        writer.write_table(table.cast(schema), row_group_size=ROW_GROUP_ROWS)
    finally:
        writer.close()


def _writer(path: Path, schema: pa.Schema, level: int) -> pq.ParquetWriter:
    strings = [f.name for f in schema if f.type == pa.string()]
    return pq.ParquetWriter(
        path,
        schema,
        compression="zstd",
        compression_level=level,
        use_dictionary=strings,
        column_encoding={c: "DELTA_BINARY_PACKED" for c in DELTA_COLUMNS if c in schema.names},
        write_statistics=[c for c in (*STATS_COLUMNS, "metric") if c in schema.names],
        store_schema=False,  # the Parquet schema says it all; the Arrow copy costs ~3 KB a file
    )


def publish(home: Path, staged: Path, meta: ProfileMeta) -> Path:
    """Write the metadata, flush everything to disk, and make the profile visible in one rename."""
    (staged / META_FILE).write_text(meta.to_json())
    for path in staged.rglob("*"):
        if path.is_file():
            _fsync(path)
    target = home / PROFILES_DIR / meta.profile_id
    os.rename(staged, target)
    _fsync_dir(target.parent)
    return target


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    # Some filesystems refuse fsync on directories; the rename is atomic all the same.
    with contextlib.suppress(OSError):
        _fsync(path)


@dataclass(frozen=True, slots=True)
class Profile:
    """A published profile: its metadata and SQL access to its tables."""

    path: Path
    meta: ProfileMeta

    @classmethod
    def open(cls, path: Path) -> Profile:
        meta_path = path / META_FILE
        try:
            text = meta_path.read_text()
        except FileNotFoundError:
            raise StoreError(f"{meta_path}: profile metadata is missing") from None
        meta = ProfileMeta.from_json(text, meta_path)
        rank_files = sorted((path / RANKS_DIR).glob("*.json"))
        if rank_files:  # a capture: each rank keeps its own metadata up to date as it flushes
            ranks = (RankMeta.from_json(f.read_text(), f) for f in rank_files)
            meta.ranks = sorted(ranks, key=lambda r: r.rank)
            meta.events = sum(r.events for r in meta.ranks)
            starts = [r.ts_min_ns for r in meta.ranks if r.ts_min_ns is not None]
            ends = [r.ts_max_ns for r in meta.ranks if r.ts_max_ns is not None]
            meta.ts_min_ns = min(starts) if starts else None
            meta.ts_max_ns = max(ends) if ends else None
        return cls(path, meta)

    @property
    def events_glob(self) -> str:
        return str(self.path / EVENTS_DIR / "*.parquet")

    @property
    def has_events(self) -> bool:
        return any((self.path / EVENTS_DIR).glob("*.parquet"))

    @property
    def has_samples(self) -> bool:
        return any((self.path / SAMPLES_DIR).glob("*.parquet"))

    def connect(self, into: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection with views ``events`` and ``samples`` over this profile.

        ``into``: a connection of a database shared with other profiles (the server's), given the
        views as temporary ones, seen by that connection only; else a database of its own.
        """
        import duckdb

        con = duckdb.connect() if into is None else into
        view = "CREATE VIEW" if into is None else "CREATE TEMP VIEW"
        con.execute("SET enable_progress_bar = false")
        if self.has_events:
            con.execute(f"{view} events AS SELECT * FROM read_parquet('{_sq(self.events_glob)}')")
        else:  # a capture that has not flushed yet
            con.execute(f"{view} events AS {empty_events()}")
        if self.has_samples:
            glob = str(self.path / SAMPLES_DIR / "*.parquet")
            con.execute(f"{view} samples AS SELECT * FROM read_parquet('{_sq(glob)}')")
        else:
            con.execute(f"{view} samples AS {_NO_SAMPLES}")
        return con

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())


def connect_rows(
    events: pa.Table | None, into: duckdb.DuckDBPyConnection | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection whose ``events`` are rows still in memory (an import's, being written:
    ``store._beside``) and whose ``samples`` are none, as ``Profile.connect`` gives for the stored
    profile. DuckDB scans the Arrow columns where they are, without a copy.

    ``events`` None: no ``events`` yet (given later, ``into`` this connection). ``into``: a
    connection made so, or another connection to its database (``con.cursor()``), given these
    ``events``: what is registered is seen by its own connection only."""
    import duckdb

    con = into
    if con is None:
        con = duckdb.connect()
        con.execute(f"CREATE VIEW samples AS {_NO_SAMPLES}")
    con.execute("SET enable_progress_bar = false")
    if events is not None:
        con.register("events", events)
    return con


#: the samples of a profile that has none
_NO_SAMPLES: Final = (
    "SELECT NULL::INTEGER AS rank, NULL::VARCHAR AS node, NULL::INTEGER AS device, "
    "NULL::VARCHAR AS metric, NULL::BIGINT AS ts_ns, NULL::DOUBLE AS value WHERE false"
)


def _sq(text: str) -> str:
    return text.replace("'", "''")
