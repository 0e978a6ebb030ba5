"""One DuckDB database for all the server's analyses, each analysis a connection of its own to it.

A fresh ``duckdb.connect()`` per analysis (what the library does) is a whole database each time:
its own thread pool, buffer pool and memory limit. In bench/soak.py a new-scope dashboard held
18-27 MB more while it ran, most of it per DuckDB thread of its database (half as much with one
thread), and two ran at once, each with its own pool: four DuckDB threads on two cores and the
server's RSS +13 % at its peak. One database for the server's life shares one pool of threads and
one memory limit among every analysis; each still has its own connection (``cursor()``), so the
time limit interrupts only its own query, and its ``events``/``samples`` views are temporary ones,
seen by that connection only. Two new-scope dashboards at once over the soak's store
(bench/analysis_memory.py): +40 MB over the process before them with a database each, +13 MB with
the shared one (which keeps ~20 MB between analyses), in a third of the time.

The memory limit is then the server's analyses' together, not each one's: DuckDB's limit of the
largest profile analysed so far (``analysis._common.memory_limit_bytes``: 1 GB below 20M events). What
is over it spills to a directory of the server's own in the system's temporary folder (never the
store, which may be read-only), removed at exit.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator

import duckdb

from hyperscope.analysis._common import memory_limit_bytes
from hyperscope.store.profile import Profile


class AnalysisDatabase:
    """The server's DuckDB database, opened at the first analysis and closed with the server
    (DuckDB's own number of threads, one per core: one thread made each new-scope dashboard
    slower in bench/soak.py, and its memory no lower within the run's noise)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._db: duckdb.DuckDBPyConnection | None = None
        self._closer: Callable[[], object] | None = None  # a weakref.finalize
        self._limit = 0

    def _database(self, events: int) -> duckdb.DuckDBPyConnection:
        """The database, its limit raised to what a profile of ``events`` needs (never lowered)."""
        wanted = memory_limit_bytes(events)
        with self._lock:
            if self._db is None:
                # no cache of the files' bytes: over a server's life it would fill with every
                # profile read, up to the memory limit
                db = duckdb.connect(config={"enable_external_file_cache": False})
                spill = tempfile.mkdtemp(prefix="hyperscope-server-spill-")
                db.execute(f"SET temp_directory = '{spill.replace(chr(39), chr(39) * 2)}'")
                db.execute("SET enable_progress_bar = false")
                self._closer = weakref.finalize(self, _close, db, spill)  # at exit, if not before
                self._db = db
            if wanted > self._limit:
                self._db.execute(f"SET GLOBAL memory_limit = '{wanted}B'")
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
