"""Import of Kineto / Chrome-trace JSON files into one profile.

Each file is streamed in chunks (``_tracefile``); each chunk becomes typed rows through DuckDB
(``_sql``) and lands in an unsorted staging part. Once every file has been read, the parts are sorted
by track and time and written as the profile's single events file. Memory stays bounded by the
chunk size and DuckDB's memory limit, whatever the size of the trace.

Any error leaves nothing behind: the staging directory is removed and the catalog is not touched.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from queue import Full, Queue
from typing import Any, Final

import duckdb
import orjson

from hyperscope.errors import TraceFormatError, UsageError
from hyperscope.schema.events import PHASES, PHASES_WITHOUT_TS
from hyperscope.schema.layout import RankMeta
from hyperscope.store import _sql
from hyperscope.store._tracefile import Chunk, TraceFile, split_events

_RANK_IN_NAME: Final = re.compile(r"(?:rank|worker)[-_.]?(\d+)", re.IGNORECASE)
#: What DuckDB would accept leniently (a boolean or a string as a time, integers beyond 64 bits
#: read as doubles): a chunk holding one goes through the exact parser, which refuses it clearly.
_SUSPECT_TIME: Final = re.compile(rb'"(?:ts|dur)"\s*:\s*(?:true|false|null|"|\[|\{)')
_TRAILING_COMMA: Final = re.compile(rb",[ \t\r\n]*[\]}]")
#: Digits become 0 and E becomes e, so plain substring searches find long numbers: a regex with a
#: digit class is ten times slower. A false alarm (inside a string) only costs speed.
_NORMALIZE: Final = bytes.maketrans(b"123456789E", b"000000000e")
_SUSPECT_NUMBERS: Final = (
    b"0" * 20,  # an integer of 20 digits may exceed 64 bits (2**64 has 20 digits)
    b"e000",  # exponents of 3 digits may overflow or underflow a double
    b"e+000",
    b"e-000",
    b"NaN",  # not JSON; DuckDB would accept it
    b"Infinity",
)


def _fast_path_safe(text: bytes) -> bool:
    """Whether DuckDB's reader would accept exactly what the exact parser accepts."""
    if _SUSPECT_TIME.search(text) or _TRAILING_COMMA.search(text):
        return False
    normalized = text.translate(_NORMALIZE)
    return not any(s in normalized for s in _SUSPECT_NUMBERS)


_DOUBLE_MAX: Final = Decimal("1.7976931348623157e308")
_DOUBLE_MIN: Final = Decimal("4.9406564584124654e-324")
#: The largest |ts| or |dur| in microseconds whose nanoseconds fit in a signed 64-bit integer.
_MAX_US: Final = Decimal(2**63 - 1) / 1000
_KNOWN: Final = frozenset(_sql.KNOWN_KEYS)
#: Timestamps above this many microseconds are taken as Unix-epoch based (after 2001-09-09).
_EPOCH_US_MIN: Final = 10**15
STAGED_TABLE: Final = "staged_rows"


@dataclass(slots=True)
class FileResult:
    path: Path
    rank: int
    events: int
    exact_chunks: int = 0


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
            inside = sorted(
                p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")) and p.is_file()
            )
            if not inside:
                raise TraceFormatError(path, "directory holds no .json or .json.gz trace file")
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


class Importer:
    """Reads trace files into staging parts; ``finish`` writes the sorted events file."""

    def __init__(
        self,
        work_dir: Path,
        *,
        progress: Callable[[int], None] | None = None,
        memory_limit: str = "256MB",
    ) -> None:
        self.work_dir = work_dir
        self.progress = progress
        self.con = duckdb.connect(
            config={
                "memory_limit": memory_limit,
                "threads": 2,
                "temp_directory": str(work_dir / "spill"),
                "preserve_insertion_order": True,
            }
        )
        self.con.execute("SET enable_progress_bar = false")  # it writes to stdout otherwise
        # Rows of every chunk, unsorted; DuckDB spills them to work_dir beyond its memory limit.
        self.con.execute(f"CREATE TABLE {STAGED_TABLE} AS SELECT * FROM ({_sql.empty_events()})")
        self.result = StagedImport()

    def close(self) -> None:
        self.con.close()

    def add_file(self, path: Path, rank: int | None, *, default_rank: int | None = None) -> RankMeta:
        trace = TraceFile(path, self.progress)
        chunks = _prefetched(trace.chunks())
        # The header (distributedInfo, host name) is known once the first chunk has been cut.
        first = next(chunks, None)
        meta = self._rank_meta(path, trace.header, rank, default_rank)
        exact = 0
        for item in [first] if first is not None else []:
            exact += self._add_chunk(path, *item, meta)
        for item in chunks:
            exact += self._add_chunk(path, *item, meta)
        meta.header.update({k: v for k, v in trace.trailer.items() if k != "traceEvents"})
        self._set_clock(meta)
        meta.events = trace.events
        self.result.ranks.append(meta)
        self.result.files.append(FileResult(path, meta.rank, trace.events, exact))
        return meta

    def _rank_meta(
        self, path: Path, header: dict[str, Any], rank: int | None, default_rank: int | None
    ) -> RankMeta:
        info = header.get("distributedInfo")
        info = info if isinstance(info, dict) else {}
        if rank is None:
            declared = info.get("rank")
            rank = declared if isinstance(declared, int) else rank_from_name(path)
        if rank is None:
            rank = default_rank
        if rank is None:
            raise UsageError(
                f"{path}: cannot tell its rank (no distributedInfo.rank, no rank in the file name); "
                "import it alone with --rank N"
            )
        for other in self.result.ranks:
            if other.rank == rank:
                raise UsageError(
                    f"{path} and {other.source_file} both hold rank {rank}; "
                    "import them as separate jobs or rename the files"
                )
        node = header.get("host_name") or header.get("hostname") or ""
        world = info.get("world_size")
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

    def _set_clock(self, meta: RankMeta) -> None:
        base = meta.header.get("baseTimeNanoseconds")
        if isinstance(base, int) and base > 0:
            meta.clock, meta.clock_offset_ns = "base_time_ns", base
            return
        row = self.con.execute(
            f"SELECT min(ts_ns) FROM {STAGED_TABLE} WHERE rank = ? AND ph <> 'M'", [meta.rank]
        ).fetchall()[0]
        low = row[0] if row else None
        meta.clock = "epoch_us" if low is not None and low >= _EPOCH_US_MIN * 1000 else "relative"

    def _add_chunk(self, path: Path, chunk: Chunk, fast: bool, meta: RankMeta) -> int:
        """Fast path through DuckDB; falls back to the exact parser, which also names errors."""
        events = self.work_dir / "chunk.json"
        exact = not fast
        if fast:
            with events.open("wb") as fh:  # a JSON array of the events, bytes as in the source
                fh.write(b"[")
                fh.write(chunk.text)
                fh.write(b"]")
            try:
                self.con.execute(_sql.read_raw(str(events)))
                exact = _count(self.con, _sql.invalid_rows()) > 0 or (
                    _count(self.con, _sql.unknown_keys(str(events))) > 0
                )
            except duckdb.Error:
                exact = True
        if exact:
            events.write_bytes(_exact_json(path, chunk))
            try:
                self.con.execute(_sql.read_raw(str(events)))
            except duckdb.Error as exc:
                raise TraceFormatError(
                    path,
                    f"events {chunk.first_index}..{chunk.first_index + chunk.count - 1} "
                    f"cannot be read: {exc}",
                ) from None
            if _count(self.con, _sql.invalid_rows()) > 0:
                raise TraceFormatError(
                    path,
                    f"events {chunk.first_index}..{chunk.first_index + chunk.count - 1} "
                    "hold a value hyperscope cannot store",
                )
        self.con.execute(f"INSERT INTO {STAGED_TABLE} {_sql.rows(meta.rank, meta.node)}")
        events.unlink()
        return int(exact)


def _prefetched(chunks: Iterator[Chunk]) -> Iterator[tuple[Chunk, bool]]:
    """Read, decompress and cut the next chunk on a thread while DuckDB works on this one.

    zlib and DuckDB release the GIL, so the two overlap; at most three chunks are held at once.
    The flag says whether the chunk may take the fast path (``_fast_path_safe``).
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
                if not put((chunk, _fast_path_safe(chunk.text))):
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


def _count(con: duckdb.DuckDBPyConnection, query: str) -> int:
    row = con.execute(query).fetchall()[0]
    return int(row[0]) if row else 0


def _decimal(value: object) -> orjson.Fragment:
    if isinstance(value, Decimal):
        return orjson.Fragment(str(value).encode())
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _exact_json(path: Path, chunk: Chunk) -> bytes:
    """The chunk parsed event by event, validated, unknown top-level fields moved to ``__extra``."""
    lines = []
    for index, event in split_events(path, chunk):
        _validate(path, index, event)
        extra = {k: event.pop(k) for k in [k for k in event if k not in _KNOWN]}
        if extra:
            event["__extra"] = extra
        try:
            lines.append(orjson.dumps(event, default=_decimal))
        except TypeError as exc:  # lone surrogate escapes ("\ud800") cannot be stored as UTF-8
            raise TraceFormatError(
                path, f"holds a value that cannot be stored: {exc}", event_index=index
            ) from None
    return b"[" + b",\n".join(lines) + b"]"


def _is_number(value: object) -> bool:
    return isinstance(value, (int, Decimal)) and not isinstance(value, bool)


def _validate(path: Path, index: int, event: object) -> None:
    """The rules of the fast path's ``invalid_rows``, with a message that says which one failed."""

    def fail(field: str | None, problem: str, expected: str | None = None) -> None:
        raise TraceFormatError(path, problem, event_index=index, field=field, expected=expected)

    if not isinstance(event, dict):
        fail(None, f"is a {type(event).__name__}", "an object")
        return
    ph = event.get("ph")
    if ph is None:
        fail("ph", "is missing", "a Chrome-trace phase such as 'X'")
    if not isinstance(ph, str):
        fail("ph", f"is {ph!r}", "a string")
    elif ph not in PHASES:
        fail("ph", f"unknown event phase {ph!r}", "one of " + "".join(sorted(PHASES)))
    for key in ("cat", "name"):
        if event.get(key) is not None and not isinstance(event[key], str):
            fail(key, f"is {event[key]!r}", "a string")
    if ph == "X" and event.get("name") is None:
        fail("name", "is missing", "a string")
    ts = event.get("ts")
    if ts is None and ph not in PHASES_WITHOUT_TS:
        fail("ts", "is missing", "a number of microseconds")
    if ts is not None and not _is_number(ts):
        fail("ts", f"is {ts!r}", "a number of microseconds")
    dur = event.get("dur")
    if dur is None and ph == "X":
        fail("dur", "is missing", "a number of microseconds")
    if dur is not None and not _is_number(dur):
        fail("dur", f"is {dur!r}", "a number of microseconds")
    for key in ("ts", "dur"):
        value = event.get(key)
        if _is_number(value) and abs(value) > _MAX_US:  # type: ignore[arg-type]
            fail(key, f"is {value} microseconds, beyond what 64-bit nanoseconds hold", "at most 9.2e15")
    for key in ("pid", "tid"):
        value = event.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, str))):
            fail(key, f"is {value!r}", "an integer or a string")
    if event.get("args") is not None and not isinstance(event["args"], dict):
        fail("args", f"is {type(event['args']).__name__}", "an object")
    for key, value in event.items():
        found = _unstorable(value, key)
        if found is not None:
            fail(found[0], found[1], found[2])


def _unstorable(value: object, where: str) -> tuple[str, str, str] | None:
    """The first value that would not come back as written: (field path, problem, expected).

    Integers beyond 64 bits (DuckDB's JSON reads them as doubles) and NaN or Infinity (not JSON;
    they would come back as null).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if not -(2**63) <= value < 2**64:
            return where, "is an integer beyond 64 bits", "an integer between -2**63 and 2**64-1"
    elif isinstance(value, float):
        return where, f"is {value}, which JSON does not allow", "a finite number"
    elif isinstance(value, Decimal) and value != 0 and not _DOUBLE_MIN <= abs(value) <= _DOUBLE_MAX:
        return where, f"is {value}, beyond the range of a 64-bit float", "a number a double holds"
    elif isinstance(value, dict):
        for k, v in value.items():
            found = _unstorable(v, f"{where}.{k}")
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _unstorable(v, f"{where}[{i}]")
            if found is not None:
                return found
    return None


def now_ns() -> int:
    return time.time_ns()
