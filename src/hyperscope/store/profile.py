"""A profile on disk: writing its sorted, compact Parquet files atomically, and reading them back.

Writes go to a staging directory that is renamed into place only when complete, so a reader never
sees half a profile and an interrupted write leaves nothing a reader would pick up.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.parquet as pq

from hyperscope._proc import process_alive
from hyperscope.errors import StoreError
from hyperscope.schema.events import (
    DELTA_COLUMNS,
    EVENT_SCHEMA,
    SAMPLE_SCHEMA,
    SORT_KEY,
    STATS_COLUMNS,
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
from hyperscope.store._sql import empty_events

if TYPE_CHECKING:  # imported where used: a capture writes its parts without DuckDB
    import duckdb

ROW_GROUP_ROWS: Final = 128 * 1024
SMALL_PROFILE_ROWS: Final = 100_000
#: zstd level of an import's small-profile file. 17 writes the legacy ResNet's 80k events as fast
#: as 15 (import 3.22 s of CPU either way, 4.30 s at 19) and keeps the 1/50 promise that 15 broke:
#: ns_resolution_trace in 1/50.8 of its JSON at 17, 1/48.9 at 15, 1/50.9 at 19 (bench/storage.py).
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


def write_events(
    con: duckdb.DuckDBPyConnection,
    source: str,
    out_dir: Path,
    offsets: dict[int, int],
) -> int:
    """Sort staged rows by track and time, add each rank's clock offset, write one Parquet file.

    ``source`` is a table or a ``read_parquet(...)`` over staged parts. Rows are sorted by rank
    first, so row-group statistics let a reader of one rank skip the others.

    Two writers, each where it is better (measured on the real traces, see bench/): small
    profiles go through pyarrow with zstd ``IMPORT_ZSTD_LEVEL``, per-column encodings and one
    shared dictionary, where fixed costs weigh most (DuckDB's file is 1.6x larger on the 8-rank
    DLRM set); large ones through DuckDB's own writer, which streams the sort within DuckDB's
    memory limit, runs on every core and gives a smaller file on them (0.52 MB against 0.57 MB on
    df_index_resolver).
    """
    events_dir = out_dir / EVENTS_DIR
    events_dir.mkdir(parents=True, exist_ok=True)
    target = events_dir / "part-00000.parquet"
    rows = int(con.sql(f"SELECT count(*) FROM {source}").fetchall()[0][0])
    shift = " ".join(f"WHEN {int(r)} THEN {int(o)}" for r, o in offsets.items())
    select = (
        f"SELECT * REPLACE (ts_ns + CASE rank {shift} ELSE 0 END AS ts_ns) FROM {source} "
        f"ORDER BY {', '.join(SORT_KEY)}"
    )
    if rows > SMALL_PROFILE_ROWS:
        con.execute(
            f"COPY ({select}) TO '{_sq(str(target))}' (FORMAT parquet, COMPRESSION zstd, "
            f"COMPRESSION_LEVEL 9, PARQUET_VERSION V2, ROW_GROUP_SIZE {ROW_GROUP_ROWS})"
        )
        return rows
    names = [f.name for f in EVENT_SCHEMA]
    write_part(con.sql(select).to_arrow_table().select(names), target, level=IMPORT_ZSTD_LEVEL)
    return rows


def write_part(table: pa.Table, path: Path, *, level: int = 19) -> None:
    """One Parquet file of already sorted rows, in the compact layout of the event schema.

    pyarrow with zstd 19, per-column encodings and one shared dictionary: where fixed costs weigh
    most (small imports, the parts of a capture), its file is 1.6x smaller than DuckDB's. A
    capture writes at ``level`` 9: 8.7x faster than 19 for 9% more bytes (measured on CPU ops).
    """
    schema = EVENT_SCHEMA if "kind" in table.column_names else SAMPLE_SCHEMA
    strings = [f.name for f in schema if f.type == pa.string()]
    writer = pq.ParquetWriter(
        path,
        schema,
        compression="zstd",
        compression_level=level,
        use_dictionary=strings,
        column_encoding={c: "DELTA_BINARY_PACKED" for c in DELTA_COLUMNS if c in schema.names},
        write_statistics=[c for c in (*STATS_COLUMNS, "metric") if c in schema.names],
        store_schema=False,  # the Parquet schema says it all; the Arrow copy costs ~3 KB a file
    )
    try:
        writer.write_table(table.cast(schema), row_group_size=ROW_GROUP_ROWS)
    finally:
        writer.close()


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
            con.execute(
                f"{view} samples AS SELECT NULL::INTEGER AS rank, NULL::VARCHAR AS node, "
                "NULL::INTEGER AS device, NULL::VARCHAR AS metric, NULL::BIGINT AS ts_ns, "
                "NULL::DOUBLE AS value WHERE false"
            )
        return con

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())


def _sq(text: str) -> str:
    return text.replace("'", "''")
