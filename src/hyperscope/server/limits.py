"""Query limits: every analysis runs in a worker thread on a DuckDB connection of its own, under a
time limit and a row cap, so one heavy request cannot stall the server for everyone else.

DuckDB can be interrupted from another thread (``con.interrupt()``), but only on the connection
running the query: hence one connection per query, owned by its worker thread, and never shared.
On timeout the request is answered at once (504) and the worker is interrupted; it closes its
connection as it unwinds. The connections are all of one database (server/analysis_db.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar, cast

import duckdb

from hyperscope.analysis import Table
from hyperscope.server.analysis_db import AnalysisDatabase
from hyperscope.store.profile import Profile

T = TypeVar("T")
H = TypeVar("H")

#: how often a timed-out query is interrupted again until its worker has stopped
INTERRUPT_EVERY_S: Final = 0.05
#: how long a light thread waits for work before it ends
IDLE_THREAD_S: Final = 60.0

#: how a request waits for its worker: ``(done, seconds left, what)`` → whether it finished in time
WaitForWorker = Callable[[threading.Event, float, str], bool]


def wait_for_worker(done: threading.Event, left_s: float, what: str) -> bool:
    """The server's own wait: the worker's ``done`` for what is left of the time limit."""
    return done.wait(left_s)


class QueryTimeout(Exception):
    """The analysis ran past the server's time limit (the API answers 504)."""


class RowCapExceeded(Exception):
    """A table has more rows than the server's row cap (the API answers 413)."""


@dataclass
class _Slot(Generic[T]):
    """What the worker hands back, and the connection the waiting request may interrupt."""

    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    con: duckdb.DuckDBPyConnection | None = None
    cancelled: bool = False
    #: a light worker has taken it up (before that, a time-out only cancels it)
    started: bool = False
    result: T | None = None
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class QueryLimits:
    """The server's limits on analyses: time, rows, and how many run at once.

    The analyses together take DuckDB's memory limit (1 GB below 20M events) and its threads (one
    per core), and a burst of requests (a user clicking through filters, several users) queues for
    one of ``concurrent`` slots instead of multiplying the memory; the wait counts in the time limit.
    Work run ``lazy`` (timeline tiles, links, searches: answered from the memory-mapped index in
    milliseconds, DuckDB only for sample rows) has ``light`` slots of its own, so that a tile
    never waits behind two dashboards of seconds each (it waited up to 25 s in bench/soak.py).
    The light slots are threads kept for the server's life (``run_async`` hands them a tile from
    the event loop directly): in bench/soak.py a tile cost ~4 ms of CPU but waited 375 ms at p50,
    most of it for the GIL at each of the six hand-overs between threads it took (event loop →
    request thread → a new query thread, its start-up handshake, and back), each one a wait behind
    every other runnable thread; now it takes two. Every connection is one of ``database``, the
    server's one DuckDB database (server/analysis_db.py), so that the analyses share its threads
    and memory limit instead of each starting a database of its own.
    """

    timeout_s: float = 30.0
    max_rows: int = 100_000
    concurrent: int = 2
    light: int = 6
    #: the seam of the time limit's end (tests: a wait that ends when the work is where the test
    #: wants it, not after a fraction of a second that a loaded machine spends opening DuckDB)
    wait: WaitForWorker = field(default=wait_for_worker, repr=False, compare=False)
    database: AnalysisDatabase = field(default_factory=AnalysisDatabase, repr=False, compare=False)
    _slots: threading.BoundedSemaphore = field(init=False, repr=False, compare=False)
    _pool: _Threads = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"query_timeout_s {self.timeout_s}: expected a positive number of seconds")
        if self.max_rows < 1:
            raise ValueError(f"max_rows {self.max_rows}: expected a positive number of rows")
        if self.concurrent < 1:
            raise ValueError(f"concurrent {self.concurrent}: expected at least 1")
        if self.light < 1:
            raise ValueError(f"light {self.light}: expected at least 1")
        object.__setattr__(self, "_slots", threading.BoundedSemaphore(self.concurrent))
        object.__setattr__(self, "_pool", _Threads(self.light, "hyperscope-light"))

    def run(
        self,
        profile: Profile,
        work: Callable[[duckdb.DuckDBPyConnection], T],
        what: str,
        *,
        lazy: bool = False,
    ) -> T:
        """``work(con)`` on a fresh connection over ``profile``, within ``timeout_s``.

        With ``lazy``, the connection opens at its first use: a timeline tile of event rows is
        answered from the memory-mapped index alone and need not pay for one (15-25 ms).
        Raises :class:`QueryTimeout` (after interrupting DuckDB) or whatever ``work`` raised.
        """
        started = time.monotonic()
        slot: _Slot[T] = _Slot()
        if lazy:
            self._pool.submit(
                _light_work, slot, self.database, lambda: (None, profile), lambda _, p, con: work(con)
            )
        else:
            if not self._slots.acquire(timeout=self.timeout_s):
                raise self._waited(what, self.concurrent)
            threading.Thread(
                target=_work,
                args=(slot, self.database, profile, work, self._slots),
                name=f"hyperscope-query-{what}",
                daemon=True,
            ).start()
        if not self.wait(slot.done, max(0.0, self.timeout_s - (time.monotonic() - started)), what):
            raise self._stop(slot, what, lazy)
        if slot.error is not None:
            raise slot.error
        return slot.result  # type: ignore[return-value]  # set whenever error is not

    def kept_or_run(
        self,
        kept: dict[str, Any] | None,
        profile: Profile,
        work: Callable[[duckdb.DuckDBPyConnection], T],
        what: str,
        *,
        table: str | None = None,
        tables: bool = True,
    ) -> dict[str, Any] | T:
        """The answer kept beside a finished profile (``analysis/stored.py``: computed at import,
        without the server's row cap, so held to it here), else ``run(profile, work, what)``.

        ``kept`` is a dict of Table dicts, or one Table dict named ``table``, or (``tables``
        false: the filter choices) no tables at all, with no rows to hold to the cap.
        """
        if kept is None:
            return self.run(profile, work, what)
        if tables:
            named = {table: kept} if table is not None else kept
            self.check_rows([(k, len(t.get("rows", ()))) for k, t in named.items()])
        return kept

    async def run_async(
        self,
        opened: Callable[[], tuple[H, Profile]],
        work: Callable[[H, Profile, duckdb.DuckDBPyConnection], T],
        what: str,
    ) -> T:
        """``run(..., lazy=True)`` for an ``async`` route: ``opened()`` (the catalog look-up) and
        then ``work(hit, profile, con)`` on one of the light threads while the event loop awaits
        it, within ``timeout_s`` (the wait for a free light thread included)."""
        slot: _Slot[T] = _Slot()
        done = asyncio.wrap_future(self._pool.submit(_light_work, slot, self.database, opened, work))
        try:
            await asyncio.wait_for(asyncio.shield(done), self.timeout_s)
        except TimeoutError:
            raise self._stop(slot, what, True) from None
        if slot.error is not None:
            raise slot.error
        return slot.result  # type: ignore[return-value]  # set whenever error is not

    def _waited(self, what: str, count: int) -> QueryTimeout:
        return QueryTimeout(
            f"{what} waited {self.timeout_s:g} s for one of the server's {count} analysis "
            "slots, all busy with other requests; retry, or start the server with a larger "
            "--query-timeout"
        )

    def _stop(self, slot: _Slot[Any], what: str, light: bool) -> QueryTimeout:
        """Past the time limit: light work is cancelled if no thread took it up yet, else the
        DuckDB query is interrupted until it stops (an analysis has its thread from the start)."""
        with slot.lock:
            slot.cancelled = True
            started = slot.started or slot.con is not None
        if light and not started:
            return self._waited(what, self.light)
        threading.Thread(target=_interrupt, args=(slot,), name="hyperscope-interrupt", daemon=True).start()
        return QueryTimeout(
            f"{what} took longer than the server's {self.timeout_s:g} s query limit and was "
            "stopped; narrow the scope (rank, node, steps) or start the server with a larger "
            "--query-timeout"
        )

    def check_rows(self, tables: dict[str, Table[Any]] | Sequence[tuple[str, int]]) -> None:
        """413 rather than a response too large for a browser to render."""
        sizes = [(k, len(t)) for k, t in tables.items()] if isinstance(tables, dict) else list(tables)
        for name, rows in sizes:
            if rows > self.max_rows:
                raise RowCapExceeded(
                    f"table {name!r} has {rows:,} rows, over the server's cap of {self.max_rows:,}; "
                    "ask for fewer (top_k, buckets, bins) or start the server with a larger --max-rows"
                )


class _Threads:
    """Up to ``size`` daemon threads, started as work arrives and kept until idle for
    ``IDLE_THREAD_S`` (an app made and dropped, as in tests, leaves none behind for long): a
    ThreadPoolExecutor's threads are joined when the interpreter exits, so one long index build
    would hold up Ctrl+C."""

    def __init__(self, size: int, name: str) -> None:
        self._size, self._name = size, name
        self._tasks: queue.SimpleQueue[tuple[Future[None], Callable[..., None], tuple[Any, ...]]] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._started = 0
        self._idle = 0  # threads waiting for work
        self._queued = 0  # work no thread has taken yet

    def submit(self, fn: Callable[..., None], *args: Any) -> Future[None]:
        future: Future[None] = Future()
        self._tasks.put((future, fn, args))
        with self._lock:
            self._queued += 1
            if self._queued > self._idle and self._started < self._size:
                self._started += 1
                name = f"{self._name}-{self._started}"
                threading.Thread(target=self._serve, name=name, daemon=True).start()
        return future

    def _serve(self) -> None:
        with self._lock:
            self._idle += 1
        while True:
            try:
                future, fn, args = self._tasks.get(timeout=IDLE_THREAD_S)
            except queue.Empty:
                with self._lock:
                    if self._queued == 0:  # else work came just now, counted on this thread
                        self._idle -= 1
                        self._started -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
                self._queued -= 1
            if future.set_running_or_notify_cancel():
                try:
                    fn(*args)
                except BaseException as exc:  # _light_work hands its errors over itself
                    future.set_exception(exc)
                else:
                    future.set_result(None)
            with self._lock:
                self._idle += 1


def _interrupt(slot: _Slot[Any]) -> None:
    """Interrupt until the worker is gone: DuckDB drops an interrupt that arrives between two
    statements, and an analysis runs many; Python-side work in between is not interruptible."""
    while not slot.done.is_set():
        with slot.lock:
            if slot.con is not None:
                # the worker may be closing it at this very moment
                with contextlib.suppress(duckdb.Error):
                    slot.con.interrupt()
        slot.done.wait(INTERRUPT_EVERY_S)


def _light_work(
    slot: _Slot[T],
    database: AnalysisDatabase,
    opened: Callable[[], tuple[H, Profile]],
    work: Callable[[H, Profile, duckdb.DuckDBPyConnection], T],
) -> None:
    """On a light thread: nothing if the request already gave up, else the work on a connection
    opened at its first use."""
    try:
        with slot.lock:
            if slot.cancelled:
                return
            slot.started = True
        hit, profile = opened()
        with _LazyConnection(database, profile, slot) as con:
            slot.result = work(hit, profile, cast(duckdb.DuckDBPyConnection, con))
    except BaseException as exc:  # handed to the waiting request, which re-raises it
        slot.error = exc
    finally:
        slot.done.set()


def _work(
    slot: _Slot[T],
    database: AnalysisDatabase,
    profile: Profile,
    work: Callable[[duckdb.DuckDBPyConnection], T],
    slots: threading.BoundedSemaphore,
) -> None:
    try:
        # the server's database: its memory limit and spill directory are every analysis' together
        with database.connection(profile) as con:
            with slot.lock:
                if slot.cancelled:  # timed out before the connection even opened
                    return
                slot.con = con
            try:
                slot.result = work(con)
            finally:
                with slot.lock:
                    slot.con = None
    except BaseException as exc:  # handed to the waiting request, which re-raises it
        slot.error = exc
    finally:
        slots.release()  # only once DuckDB has let go: an interrupted query still holds memory
        slot.done.set()


class _LazyConnection:
    """A profile's analysis connection opened at the first attribute asked of it (and registered
    for interruption then); closed with the ``with`` block if it was ever opened."""

    def __init__(self, database: AnalysisDatabase, profile: Profile, slot: _Slot[Any]) -> None:
        self._database = database
        self._profile = profile
        self._slot = slot
        self._stack = contextlib.ExitStack()
        self._con: duckdb.DuckDBPyConnection | None = None

    def __getattr__(self, name: str) -> Any:
        if self._con is None:
            con = self._stack.enter_context(self._database.connection(self._profile))
            with self._slot.lock:
                if self._slot.cancelled:
                    raise QueryTimeout("cancelled before the connection opened")
                self._slot.con = con
            self._con = con
        return getattr(self._con, name)

    def __enter__(self) -> _LazyConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        with self._slot.lock:
            self._slot.con = None
        self._stack.close()
