"""One DuckDB database for all the server's analyses, each analysis a connection of its own to it.

A fresh ``duckdb.connect()`` per analysis (what the library does) is a whole database each time:
its own thread pool, buffer pool and memory limit. In bench/soak.py a new-scope dashboard held
18-27 MB more while it ran, most of it per DuckDB thread of its database (half as much with one
thread), and two ran at once, each with its own pool: four DuckDB threads on two cores and the
server's RSS +13 % at its peak. One database for the server's life shares one pool of threads and
one memory limit among every analysis; each still has its own connection (``cursor()``), so the
time limit interrupts only its own query, and its ``events``/``samples`` views are temporary ones,
seen by that connection only. Measured in process over the soak's store, two new-scope dashboards
at once: +37-42 MB over the process before them with a database each, +10-16 MB over it with the
shared one (whose threads and caches stay, ~15 MB).

The memory limit is then the server's analyses' together, not each one's: DuckDB's limit of the
largest profile analysed so far (``analysis._common.memory_limit``: 1 GB below 20M events), or
the operator's ``--analysis-memory``. What is over it spills to a directory of the server's own
in the system's temporary folder (never the store, which may be read-only), removed at exit.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import weakref
from collections.abc import Iterator
from typing import Final

import duckdb

from hyperscope.analysis._common import memory_limit
from hyperscope.store.profile import Profile

_UNITS: Final = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def parse_bytes(text: str) -> int:
    """``"512MB"``, ``"2GB"`` (1024-based, as DuckDB reads them) → bytes; a clear error otherwise."""
    cleaned = text.strip().upper().replace(" ", "").removesuffix("IB").removesuffix("B")
    unit = next((u for u in _UNITS if cleaned.endswith(u[0]) and cleaned[:-1].isdigit()), None)
    if unit is not None:
        value = int(cleaned[:-1]) * _UNITS[unit]
    elif cleaned.isdigit():
        value = int(cleaned)
    else:
        raise ValueError(f"{text!r}: expected a size such as 512MB or 2GB")
    if value < 64 << 20:
        raise ValueError(f"{text!r}: expected at least 64MB (DuckDB needs room for its buffers)")
    return value


class AnalysisDatabase:
    """The server's DuckDB database, opened at the first analysis and closed with the server.

    ``memory_bytes``: the limit of every analysis together (None: the largest profile's default).
    ``threads``: DuckDB's worker threads (None: DuckDB's default, one per core).
    """

    def __init__(self, memory_bytes: int | None = None, threads: int | None = None) -> None:
        self.memory_bytes = memory_bytes
        self.threads = threads
        self._lock = threading.Lock()
        self._db: duckdb.DuckDBPyConnection | None = None
        self._closer: weakref.finalize[..., None] | None = None
        self._limit = 0

    def _database(self, events: int) -> duckdb.DuckDBPyConnection:
        """The database, its limit raised to what a profile of ``events`` needs (never lowered)."""
        wanted = self.memory_bytes or parse_bytes(memory_limit(events))
        with self._lock:
            if self._db is None:
                config: dict[str, str | int | bool] = {"enable_external_file_cache": False}
                if self.threads is not None:
                    config["threads"] = self.threads
                db = duckdb.connect(config=config)
                spill = tempfile.mkdtemp(prefix="hyperscope-server-spill-")
                db.execute(f"SET temp_directory = '{spill.replace(chr(39), chr(39) * 2)}'")
                db.execute("SET enable_progress_bar = false")
                self._closer = weakref.finalize(self, _close, db, spill)  # at exit, if not before
                self._db = db
            if wanted > self._limit:
                self._db.execute(f"SET GLOBAL memory_limit = '{wanted >> 20}MB'")
                self._limit = wanted
            return self._db

    @contextlib.contextmanager
    def connection(self, profile: Profile) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection of the shared database with ``profile``'s views, closed after."""
        db = self._database(profile.meta.events)
        with self._lock:  # making a connection is not one of the calls DuckDB says are thread-safe
            con = db.cursor()
        try:
            profile.connect(into=con)
            yield con
        finally:
            con.close()

    def close(self) -> None:
        """Close the database and remove its spill directory (the server's end)."""
        with self._lock:
            closer, self._closer, self._db, self._limit = self._closer, None, None, 0
        if closer is not None:
            closer()


def _close(db: duckdb.DuckDBPyConnection, spill: str) -> None:
    with contextlib.suppress(duckdb.Error):
        db.close()
    shutil.rmtree(spill, ignore_errors=True)
