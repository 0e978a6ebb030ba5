"""One DuckDB database for the server's analyses, each analysis a connection of its own to it;
a fresh database every ``ANALYSES_PER_DATABASE`` analyses.

A fresh ``duckdb.connect()`` per analysis (what the library does) is a whole database each time:
its own thread pool, buffer pool and memory limit. In bench/soak.py a new-scope dashboard held
18-27 MB more while it ran, most of it per DuckDB thread of its database (half as much with one
thread), and two ran at once, each with its own pool: four DuckDB threads on two cores and the
server's RSS +13 % at its peak. One database shares one pool of threads and one memory limit
among every analysis; each still has its own connection (``cursor()``), so the time limit
interrupts only its own query, and its ``events``/``samples`` views are temporary ones, seen by
that connection only. Two new-scope dashboards at once over the soak's store
(bench/analysis_memory.py): +40 MB over the process before them with a database each, +13 MB with
the shared one (which keeps ~20 MB between analyses), in a third of the time.

But a database kept for the server's life keeps something of every temporary table made on it
(DuckDB 2.0.1; a dashboard materializes several): glibc's bytes in use rose ~33 KB per new-scope
dashboard, linearly, and never came back (in process: +8 MB after 300 dashboards, flat with a
database per analysis; a temp table made and dropped on a connection of its own leaves ~4 KB;
plain queries and views leave nothing). Over the soak's 10 minutes (~570 new scopes) that is
~19 MB of the server's RSS growth. So after ``ANALYSES_PER_DATABASE`` connections the next one
opens a fresh database, and the old one is closed (what it kept freed with it) as soon as its
last connection closes: the retained bytes are bounded by a few MB, and opening a database
(~3 MB, a few ms) is paid once per that many analyses. Until the old one is closed, the two
databases' memory limits are each their own.

The memory limit is then the server's analyses' together, not each one's: DuckDB's limit of the
largest profile analysed so far (``analysis._common.memory_limit_bytes``: 1 GB below 20M events). What
is over it spills to a directory of the database's own in the system's temporary folder (never
the store, which may be read-only), removed when it closes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

import duckdb

from hyperscope._proc import trim_malloc
from hyperscope.analysis._common import memory_limit_bytes
from hyperscope.store.profile import Profile

#: connections handed out by one database before the next one opens on a fresh database
ANALYSES_PER_DATABASE: Final = 64
#: the environment variable that sets it (0: one database for the server's life, never renewed)
ANALYSES_PER_DATABASE_ENV: Final = "HYPERSCOPE_ANALYSES_PER_DATABASE"


def analyses_per_database() -> int:
    """``HYPERSCOPE_ANALYSES_PER_DATABASE`` when set (0 turns renewal off), else the default."""
    text = os.environ.get(ANALYSES_PER_DATABASE_ENV, "").strip()
    if not text:
        return ANALYSES_PER_DATABASE
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(
            f"{ANALYSES_PER_DATABASE_ENV}={text!r}: expected a whole number of analyses, at least 0 "
            "(0: one database for the server's life)"
        )
    return value


@dataclass(eq=False)
class _Database:
    """One DuckDB database, how many connections it handed out and how many are still open."""

    con: duckdb.DuckDBPyConnection
    closer: Callable[[], object]  # a weakref.finalize: at exit, if not before
    handed: int = 0
    open: int = 0
    retired: bool = field(default=False)


class AnalysisDatabase:
    """The server's DuckDB database, opened at the first analysis, renewed every ``per_database``
    connections (0: never) and closed with the server (DuckDB's own number of threads, one per
    core: one thread made each new-scope dashboard slower in bench/soak.py, and its memory no
    lower within the run's noise)."""

    def __init__(self, per_database: int | None = None) -> None:
        self.per_database = analyses_per_database() if per_database is None else per_database
        if self.per_database < 0:
            raise ValueError(f"per_database {self.per_database}: expected at least 0")
        self._lock = threading.Lock()
        self._db: _Database | None = None
        self._retired: set[_Database] = set()  # renewed, but with connections still open
        self._limit = 0
        #: databases opened so far (tests, and what a bench may report)
        self.opened = 0

    def _database(self, events: int) -> _Database:
        """The current database (under ``_lock``), its limit raised to what a profile of
        ``events`` needs (never lowered); a fresh one when the current has handed out its share."""
        wanted = memory_limit_bytes(events)
        current = self._db
        if current is not None and self.per_database and current.handed >= self.per_database:
            current.retired = True
            if current.open:
                self._retired.add(current)  # closed by its last connection
            else:
                current.closer()
            current = self._db = None
        if current is None:
            # no cache of the files' bytes: over a server's life it would fill with every
            # profile read, up to the memory limit
            db = duckdb.connect(config={"enable_external_file_cache": False})
            spill = tempfile.mkdtemp(prefix="hyperscope-server-spill-")
            db.execute(f"SET temp_directory = '{spill.replace(chr(39), chr(39) * 2)}'")
            db.execute("SET enable_progress_bar = false")
            if self._limit:
                db.execute(f"SET GLOBAL memory_limit = '{self._limit}B'")
            current = self._db = _Database(db, weakref.finalize(self, _close, db, spill))
            self.opened += 1
        if wanted > self._limit:
            current.con.execute(f"SET GLOBAL memory_limit = '{wanted}B'")
            self._limit = wanted
        return current

    @contextlib.contextmanager
    def connection(self, profile: Profile) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection of the current database with ``profile``'s views, closed after."""
        with self._lock:  # making a connection is not one of the calls DuckDB says are thread-safe
            db = self._database(profile.meta.events)
            con = db.con.cursor()
            db.handed += 1
            db.open += 1
        try:
            profile.connect(into=con)
            yield con
        finally:
            con.close()
            with self._lock:
                db.open -= 1
                last = db.retired and db.open == 0 and db in self._retired
                if last:
                    self._retired.discard(db)
            if last:
                db.closer()

    def close(self) -> None:
        """Close the databases and remove their spill directories (the server's end)."""
        with self._lock:
            closing = [*self._retired, *([self._db] if self._db is not None else [])]
            self._db, self._limit = None, 0
            self._retired.clear()
        for db in closing:
            db.closer()


def _close(db: duckdb.DuckDBPyConnection, spill: str) -> None:
    with contextlib.suppress(duckdb.Error):
        db.close()
    shutil.rmtree(spill, ignore_errors=True)
    trim_malloc()
