"""Import of Kineto / Chrome-trace JSON files into one profile.

Each file is streamed in chunks (``_tracefile``); each chunk becomes typed rows through the
compiled reader (``_creader``, typed by ``_arrow_rows``) where it can answer for the chunk, else
(or a batch of small files' chunks, read in one statement) through DuckDB (``_sql``), and is
held (``_staged``: Arrow tables, written out as parts past a size, ``_parts``). Chunks that DuckDB's
lenient reader cannot be trusted with go through the exact parser (``_validate``), which also
names what is wrong. Once every file has been read, ``profile.write_events`` sorts the rows into
the profile's events file (a large rank by merging sorted parts, ``_merge``). Memory stays
bounded by the chunk size, ``_staged.SPILL_BYTES`` and DuckDB's memory limit, whatever the size
of the trace.

Any error leaves nothing behind: the staging directory is removed and the catalog is not touched.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from queue import Full, Queue
from typing import Any, Final

import duckdb

from hyperscope.errors import StoreError, TraceFormatError, UsageError
from hyperscope.schema.events import MAX_NODE_CHARS, MAX_NS, MAX_RANK
from hyperscope.schema.layout import RankMeta
from hyperscope.store import _arrow_rows, _creader, _sql
from hyperscope.store._arrow_rows import Figures
from hyperscope.store._staged import StagedRows
from hyperscope.store._tracefile import Chunk, TraceFile
from hyperscope.store._validate import exact_json, fast_path_safe

_RANK_IN_NAME: Final = re.compile(r"(?:rank|worker)[-_.]?(\d+)", re.IGNORECASE)
#: Timestamps above this many microseconds are taken as Unix-epoch based (after 2001-09-09).
_EPOCH_US_MIN: Final = 10**15
#: What a directory given to the import is searched for (XPlane: ``xplane_importer``).
TRACE_SUFFIXES: Final = (".json", ".json.gz", ".xplane.pb")
#: Chunks turned into rows at once: DuckDB runs each chunk's statements on one core.
WORKERS: Final = 2
#: Small files' chunks are read together, in batches of about this many bytes: each DuckDB
#: statement costs ~25 ms of planning whatever its size, most of a 1 MB file's import.
BATCH_BYTES: Final = 4 << 20

_Item = tuple[Path, Chunk, bool, RankMeta]


@dataclass(slots=True)
class FileResult:
    path: Path
    rank: int
    events: int


@dataclass(slots=True)
class StagedImport:
    """What the importer produced in a staging directory, before it is published."""

    ranks: list[RankMeta] = field(default_factory=list)
    files: list[FileResult] = field(default_factory=list)


def trace_files(paths: Sequence[Path]) -> list[Path]:
    """Expand directories into the trace files they hold; refuse what does not exist."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.name.endswith(TRACE_SUFFIXES) and p.is_file())
            if not inside:
                raise TraceFormatError(path, "directory holds no .json, .json.gz or .xplane.pb trace file")
            found.extend(inside)
        elif path.exists():
            found.append(path)
        else:
            raise TraceFormatError(path, "file does not exist")
    if not found:
        raise UsageError("no trace file given")
    return found


def rank_from_name(path: Path) -> int | None:
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


@dataclass(slots=True)
class ReadFile:
    """One file whose events were staged: what settling it needs (a worker process sends these
    back, so it holds no open reader)."""

    path: Path
    events: int
    trailer: dict[str, Any]
    #: bytes of its events' JSON (decompressed): what the store's size is measured against
    json_bytes: int = 0


def rank_metas(
    paths: Sequence[Path], rank: int | None, default_rank: int | None, known: Sequence[RankMeta] = ()
) -> list[RankMeta]:
    """Every file's header and rank, checked before any file's events are read (fail fast)."""
    metas: list[RankMeta] = []
    for path in paths:
        metas.append(_rank_meta(path, TraceFile(path).read_header(), rank, default_rank, [*known, *metas]))
    return metas


class Importer:
    """Reads trace files, one rank each, into ``staged`` (Arrow in memory, parts beyond a size)."""

    def __init__(
        self,
        work_dir: Path,
        *,
        progress: Callable[[int], None] | None = None,
        memory_limit: str = "256MB",
        workers: int = WORKERS,
        spill_bytes: int | None = None,
    ) -> None:
        self.work_dir = work_dir
        self.progress = progress
        self.workers = workers
        self.memory_limit = memory_limit
        self._con: duckdb.DuckDBPyConnection | None = None
        self._con_lock = threading.Lock()
        self.staged = StagedRows(work_dir, spill_bytes)
        self.result = StagedImport()

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The import's DuckDB, opened on first use: a trace the compiled reader reads whole, and
        that fits in memory, never needs it (opening it costs ~80 ms)."""
        with self._con_lock:
            if self._con is None:
                con = duckdb.connect(
                    config={
                        "memory_limit": self.memory_limit,
                        "threads": 2,
                        "temp_directory": str(self.work_dir / "spill"),
                        "preserve_insertion_order": False,  # rows are sorted at the end anyway
                    }
                )
                con.execute("SET enable_progress_bar = false")  # it writes to stdout otherwise
                self._con = con
            return self._con

    def close(self) -> None:
        if self._con is not None:
            self._con.close()

    def add_files(self, paths: Sequence[Path], rank: int | None, *, default_rank: int | None) -> None:
        """Check every file's header, stage its events, and settle each rank (all in this process)."""
        metas = rank_metas(paths, rank, default_rank, self.result.ranks)
        self.result.ranks.extend(metas)
        self.settle(self.stage(paths, metas), metas, self.figures())

    def stage(self, paths: Sequence[Path], metas: Sequence[RankMeta]) -> list[ReadFile]:
        """Read every file into the staging table, ``workers`` chunks at a time.

        DuckDB runs each of these small statements on one core, so chunks (of one big file, or of
        several small ones) go to a pool of workers, each with its own connection; this thread cuts
        the files and keeps at most ``workers`` chunks in flight.
        """
        local = threading.local()
        compiled = _creader.available()

        def work(batch: list[_Item]) -> None:
            if compiled:  # the compiled reader first; what it gives back takes the DuckDB path
                batch = [
                    (path, chunk, fast_path_safe(chunk.text), meta)
                    for path, chunk, fast, meta in batch
                    if not self._add_columns(chunk, fast, meta)
                ]
            if not batch:
                return
            con = getattr(local, "con", None)
            if con is None:
                con = local.con = self.con.cursor()
                con.execute("SET enable_progress_bar = false")
            # a chunk for the exact path goes alone (the compiled reader's give-backs are checked here)
            if len(batch) == 1 or not all(item[2] for item in batch) or not self._add_batch(con, batch):
                for item in batch:
                    self._add_chunk(con, *item)

        read: list[ReadFile] = []
        running: set[Future[None]] = set()

        def settle(block: bool) -> None:
            while running and (block or len(running) >= self.workers):
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    running.discard(future)
                    future.result()  # raises the worker's error

        batch: list[_Item] = []

        def submit() -> None:
            settle(block=False)
            running.add(pool.submit(work, batch[:]))
            batch.clear()

        with ThreadPoolExecutor(self.workers, thread_name_prefix="hyperscope-import") as pool:
            try:
                for path, meta in zip(paths, metas, strict=True):
                    trace = TraceFile(path, self.progress)
                    json_bytes = 0
                    for chunk, fast in _prefetched(trace.chunks(), check=not compiled):
                        json_bytes += len(chunk.text)
                        if not fast and batch:  # a chunk for the exact path goes alone
                            submit()
                        batch.append((path, chunk, fast, meta))
                        if not fast or sum(len(item[1].text) for item in batch) >= BATCH_BYTES:
                            submit()
                    read.append(ReadFile(path, trace.events, trace.trailer, json_bytes))
                if batch:
                    submit()
                settle(block=True)
            except BaseException:
                for future in running:
                    future.cancel()
                raise
        return read

    def figures(self) -> Figures:
        """Every rank's figures, taken as its rows came in."""
        return self.staged.figures

    def settle(self, read: Sequence[ReadFile], metas: Sequence[RankMeta], figures: Figures) -> None:
        """Each staged file's trailer, clock and event count; a count that differs refuses all."""
        for done, meta in zip(read, metas, strict=True):
            meta.header.update({k: v for k, v in done.trailer.items() if k != "traceEvents"})
            stored, low, end = figures.get(meta.rank, (0, None, None))
            self._set_clock(meta, low, end)
            if stored != done.events:  # nothing may be dropped silently: refuse rather than lose events
                raise StoreError(
                    f"{done.path}: read {done.events} events but staged {stored}; nothing was imported. "
                    "This is a hyperscope bug: please report it with the file."
                )
            meta.events = stored
            self.result.files.append(FileResult(done.path, meta.rank, done.events))

    @staticmethod
    def _set_clock(meta: RankMeta, low: int | None, end: int | None) -> None:
        """The rank's clock, from its first non-metadata event (``low``) and its last end (``end``)."""
        base = meta.header.get("baseTimeNanoseconds")
        _check_base(meta.source_file, base)
        if base:
            # every event, shifted by the base, must stay within int64
            if end is not None and end + base > MAX_NS:
                raise TraceFormatError(
                    meta.source_file,
                    f"is {base}, and events end up to {end} ns after it: beyond 64-bit nanoseconds",
                    field="baseTimeNanoseconds",
                    expected=f"baseTimeNanoseconds + the last event's end at most {MAX_NS}",
                )
            meta.clock, meta.clock_offset_ns = "base_time_ns", base
            return
        meta.clock = "epoch_us" if low is not None and low >= _EPOCH_US_MIN * 1000 else "relative"

    def _add_batch(self, con: duckdb.DuckDBPyConnection, batch: list[_Item]) -> bool:
        """Chunks of several small files in one pass of each statement; False, with nothing
        staged, when one of them needs the exact path (each chunk is then added on its own)."""
        files: dict[str, tuple[int, str]] = {}
        for n, (_, chunk, _, meta) in enumerate(batch):
            events = self.work_dir / f"chunk-{threading.get_ident()}-{n}.json"
            events.write_bytes(b"[" + chunk.text + b"]")
            files[str(events)] = (meta.rank, meta.node)
        names, largest = list(files), max(len(item[1].text) for item in batch)
        try:
            con.execute(_sql.read_raw(names, largest))
            fast = (
                _count(con, _sql.invalid_rows()) == 0 and _count(con, _sql.unknown_keys(names, largest)) == 0
            )
        except duckdb.Error:
            fast = False
        if fast:
            self.staged.add(con.sql(_sql.rows_by_file(files)).to_arrow_table())
        for name in names:
            Path(name).unlink()
        return fast

    def _add_columns(self, chunk: Chunk, fast: bool, meta: RankMeta) -> bool:
        """The chunk's rows through the compiled reader (``_creader``) and Arrow (``_arrow_rows``);
        False, with nothing staged, when the reader gives the chunk back (the DuckDB path then
        reads it, and names what is wrong)."""
        table = _creader.read_columns(chunk.text, chunk.count) if fast else None
        if table is None:
            return False
        self.staged.add(_arrow_rows.from_reader_columns(table, rank=meta.rank, node=meta.node))
        return True

    def _add_chunk(
        self, con: duckdb.DuckDBPyConnection, path: Path, chunk: Chunk, fast: bool, meta: RankMeta
    ) -> None:
        """Fast path through DuckDB; falls back to the exact parser, which also names errors."""
        events = self.work_dir / f"chunk-{threading.get_ident()}.json"
        exact = not fast
        if fast:
            with events.open("wb") as fh:  # a JSON array of the events, bytes as in the source
                fh.write(b"[")
                fh.write(chunk.text)
                fh.write(b"]")
            try:
                con.execute(_sql.read_raw(str(events), len(chunk.text)))
                exact = _count(con, _sql.invalid_rows()) > 0 or (
                    _count(con, _sql.unknown_keys(str(events), len(chunk.text))) > 0
                )
            except duckdb.Error:
                exact = True
        if exact:
            text = exact_json(path, chunk)
            events.write_bytes(text)
            try:
                con.execute(_sql.read_raw(str(events), len(text)))
            except duckdb.Error as exc:
                raise TraceFormatError(
                    path,
                    f"events {chunk.first_index}..{chunk.first_index + chunk.count - 1} "
                    f"cannot be read: {str(exc).replace(str(events), 'the chunk')}",
                ) from None
            if _count(con, _sql.invalid_rows()) > 0:
                raise TraceFormatError(
                    path,
                    f"events {chunk.first_index}..{chunk.first_index + chunk.count - 1} "
                    "hold a value hyperscope cannot store",
                )
        self.staged.add(con.sql(_sql.rows(meta.rank, meta.node)).to_arrow_table())
        events.unlink()


def _rank_meta(
    path: Path,
    header: dict[str, Any],
    rank: int | None,
    default_rank: int | None,
    known: Sequence[RankMeta],
) -> RankMeta:
    info = header.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    declared = info.get("rank")
    if declared is not None and not _is_rank(declared):
        raise TraceFormatError(
            path, f"is {declared!r}", field="distributedInfo.rank", expected=f"an integer 0 to {MAX_RANK}"
        )
    if rank is None:
        rank = declared if declared is not None else rank_from_name(path)
        if rank is not None and not _is_rank(rank):
            raise UsageError(f"{path}: rank {rank} in the file name is beyond {MAX_RANK}; use --rank N")
    elif not _is_rank(rank):
        raise UsageError(f"--rank {rank}: expected an integer from 0 to {MAX_RANK}")
    if rank is None:
        rank = default_rank
    if rank is None:
        raise UsageError(
            f"{path}: cannot tell its rank (no distributedInfo.rank, no rank in the file name); "
            "import it alone with --rank N"
        )
    for other in known:
        if other.rank == rank:
            raise UsageError(
                f"{path} and {other.source_file} both hold rank {rank}; "
                "import them as separate jobs or rename the files"
            )
    _check_base(path, header.get("baseTimeNanoseconds"))  # when the header has it: fail fast
    key = "host_name" if "host_name" in header else "hostname"
    node = header.get(key) or ""
    if len(str(node)) > MAX_NODE_CHARS:
        raise TraceFormatError(
            path,
            f"is {len(str(node)):,} characters long",
            field=key,
            expected=f"a host name of at most {MAX_NODE_CHARS} characters",
        )
    world = info.get("world_size")
    world = None if isinstance(world, bool) else world
    devices = header.get("deviceProperties")
    rest = {
        k: v for k, v in header.items() if k not in ("deviceProperties", "distributedInfo", "traceEvents")
    }
    return RankMeta(
        rank=rank,
        node=str(node),
        source_file=str(path),
        world_size=world if isinstance(world, int) else None,
        device_properties=devices if isinstance(devices, list) else [],
        distributed_info=info,
        header=rest,
    )


def _prefetched(chunks: Iterator[Chunk], *, check: bool = True) -> Iterator[tuple[Chunk, bool]]:
    """Read, decompress and cut the next chunk on a thread while DuckDB works on this one.

    zlib and DuckDB release the GIL, so the two overlap; at most three chunks are held at once.
    The flag says whether the chunk may take the fast path (``fast_path_safe``); without ``check``
    it is True and the worker checks the chunks the compiled reader gives back (the check holds
    the GIL, ~0.1 s per 16 MB: on this thread it held back the workers).
    """
    done = object()
    queue: Queue[object] = Queue(maxsize=1)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                queue.put(item, timeout=0.05)
                return True
            except Full:
                continue
        return False

    def produce() -> None:
        try:
            for chunk in chunks:
                if not put((chunk, fast_path_safe(chunk.text) if check else True)):
                    return
            put(done)
        except BaseException as exc:  # handed to the consumer, which raises it
            put(exc)

    thread = threading.Thread(target=produce, name="hyperscope-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = queue.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stop.set()  # the reader gives up within 50 ms; never wait on a full queue
        thread.join()


def _check_base(path: Path | str, base: object) -> None:
    """A clock base that shifts every timestamp must itself be a time that int64 nanoseconds hold."""
    if base is None or (isinstance(base, int) and not isinstance(base, bool) and 0 <= base <= MAX_NS):
        return
    raise TraceFormatError(
        path, f"is {base!r}", field="baseTimeNanoseconds", expected=f"an integer of nanoseconds 0 to {MAX_NS}"
    )


def _is_rank(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_RANK


def _count(con: duckdb.DuckDBPyConnection, query: str) -> int:
    row = con.execute(query).fetchall()[0]
    return int(row[0]) if row else 0
