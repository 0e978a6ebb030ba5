"""Streaming reader of Chrome-trace / Kineto JSON files.

Kineto files are one JSON object whose ``traceEvents`` array holds every event, with other keys
(``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds``, ...) before and after it. Files
reach several GB, so this reader never holds the whole document: it hands out chunks of complete
events (raw bytes, as written), and the header and trailer objects once they have been read.

Chunks are cut where one event ends and the next begins (``}``, a comma, ``{``, with any
whitespace between): a candidate cut is only taken once the bytes before it parse as a JSON
sequence of complete values (msgspec, without building them: ~0.1 s per 16 MB chunk), so a brace
inside a string or a nested object (``json.dumps(trace, indent=0)`` with lists of objects in
``args``) is never taken for one, whatever separators the writer used, and each chunk's event count
is exact. Events nested deeper than msgspec's and Python's parsers go (about 1,000 levels) and
events over ``EVENT_LIMIT`` are refused with the file and the event's index.

A gzipped file is inflated by ISA-L (``isal``): 0.02 s for df_index_resolver's 54 MB against
0.10 s for ``gzip.GzipFile``, on the one thread that cuts the chunks and holds up the workers
(bench/README.md, "ISA-L"). Where isal will not import, the standard library's gzip does.
"""

from __future__ import annotations

import gzip
import json
import re
import types
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import IO, Any, Final

import msgspec
import orjson

from hyperscope.errors import TraceFormatError
from hyperscope.store import _creader

_gzip: types.ModuleType
_inflate_error: type[Exception]
try:
    from isal import igzip as _gzip
    from isal.isal_zlib import error as _inflate_error  # type: ignore[assignment]  # its stub: an instance
except ImportError:  # a platform without isal's wheels: the standard library, 5x slower
    _gzip, _inflate_error = gzip, zlib.error
#: what a damaged or cut gzip stream raises, from either library
_GZIP_ERRORS: tuple[type[BaseException], ...] = (EOFError, gzip.BadGzipFile, zlib.error, _inflate_error)

READ_BYTES: Final = 4 << 20
_FIRST_READ: Final = 64 << 10
CHUNK_BYTES: Final = 16 << 20
#: the first chunk's size: the workers wait for it idle, so it is small
_FIRST_CHUNK: Final = 4 << 20
_HEADER_LIMIT: Final = 512 << 20
_WS: Final = b" \t\r\n"
_FIRST_SEP = re.compile(rb"\}(\s*,\s*)\{")
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
#: an event larger than this is refused: DuckDB reads each event whole, within the import's memory
#: limit (256 MB: a string of 8 MB imports, one of 12 MB ran out of it)
EVENT_LIMIT: Final = 8 << 20
#: where a cut is looked for first: the last bytes of what has been read
_TAIL: Final = 1 << 20
_RAW: Final = msgspec.json.Decoder(list[msgspec.Raw])
_TOO_DEEP: Final = "nests objects or arrays deeper than hyperscope reads (about 1,000 levels)"

#: Exact: fractions stay decimals, so timestamps keep every digit. NaN and Infinity (not JSON, but
#: written by some tools) parse as floats for the validator to name.
_DECODER = json.JSONDecoder(parse_float=Decimal)


@dataclass(slots=True)
class Chunk:
    """Complete events as written in the file, ``sep`` between consecutive ones."""

    first_index: int
    count: int
    text: bytes
    sep: bytes


@dataclass(slots=True)
class TraceFile:
    """One trace file being read. Iterate :meth:`chunks` once; then ``header``/``trailer`` are set."""

    path: Path
    progress: Callable[[int], None] | None = None
    header: dict[str, Any] = field(default_factory=dict)
    trailer: dict[str, Any] = field(default_factory=dict)
    events: int = 0
    compressed: bool = False

    def chunks(self) -> Iterator[Chunk]:
        with self._open(self.progress) as blocks:
            yield from self._chunks(blocks)

    def read_header(self) -> dict[str, Any]:
        """Only the keys before ``traceEvents`` (``{}`` for a bare array): what the rank and the
        host are read from, checked for every file before any file's events are parsed."""
        with self._open(None) as blocks:
            self._start(blocks)
        return self.header

    @contextmanager
    def _open(self, progress: Callable[[int], None] | None) -> Iterator[_Blocks]:
        try:
            raw = self.path.open("rb")
        except FileNotFoundError:
            raise TraceFormatError(self.path, "file does not exist") from None
        except IsADirectoryError:
            raise TraceFormatError(self.path, "is a directory, not a trace file") from None
        except OSError as exc:
            raise TraceFormatError(self.path, f"cannot be opened: {exc.strerror}") from None
        with raw:
            self.compressed = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            stream: IO[bytes] = _gunzip(raw) if self.compressed else raw
            yield _Blocks(self.path, stream, raw, progress)

    def _start(self, blocks: _Blocks) -> tuple[bool, bytes]:
        """Read up to the first event: (whether the top level is an object, the bytes after ``[``)."""
        buf = blocks.skip(_WS + b"\xef\xbb\xbf")
        if not buf:
            raise TraceFormatError(self.path, "file is empty", expected="a JSON trace")
        if buf[:1] == b"[":
            return False, buf[1:]
        if buf[:1] == b"{":
            return True, self._read_header(blocks, buf)
        raise TraceFormatError(self.path, f"starts with {buf[:20]!r}", expected="a JSON object or array")

    def _chunks(self, blocks: _Blocks) -> Iterator[Chunk]:
        top_level_object, pending = self._start(blocks)
        pending = blocks.skip(_WS, pending)
        if pending[:1] == b"]":
            self._read_trailer(pending[1:], blocks, top_level_object)
            return
        if pending[:1] != b"{":
            raise TraceFormatError(
                self.path, f"found {pending[:20]!r}", event_index=0, expected="an event object"
            )
        sep = self._separator(blocks, pending)
        index = 0
        goal = _FIRST_CHUNK
        while True:
            if not blocks.eof and len(pending) < goal:
                pending += blocks.read(max(READ_BYTES, goal - len(pending)))
                continue
            goal = CHUNK_BYTES
            if blocks.eof:
                break
            cut = self._cut(pending, index)
            if cut is None:  # one event larger than a chunk (or the last and whitespace): keep reading
                if len(pending) > EVENT_LIMIT and len(pending.rstrip(_WS)) > EVENT_LIMIT:
                    raise TraceFormatError(
                        self.path,
                        f"event is larger than {EVENT_LIMIT >> 20} MB, the most hyperscope imports",
                        event_index=index,
                    )
                pending += blocks.read(max(READ_BYTES, len(pending)))
                continue
            end, start, count = cut
            yield Chunk(index, count, pending[:end], sep)
            index += count
            pending = pending[start:]
        # The last event is followed by "]" and the trailer, so it is delimited by parsing it.
        cut = self._cut(pending, index)
        head, tail = (pending[: cut[0]], pending[cut[1] :]) if cut else (b"", pending)
        last_text, last, rest = self._last_events(tail, index + (cut[2] if cut else 0))
        text = head + b"," + last_text if head else last_text
        count = (cut[2] if cut else 0) + last
        yield Chunk(index, count, text, sep)
        self.events = index + count
        self._read_trailer(rest.lstrip(_WS)[1:], blocks, top_level_object)

    def _cut(self, pending: bytes, index: int) -> tuple[int, int, int] | None:
        """Where to end a chunk: (end of its text, start of the next event, its events), after the
        last complete event in ``pending`` that is followed by another; None when there is none.

        The last few candidates in the tail are tried first, then ones further back (the bytes
        read may end inside a long event, or in a trailer that holds braces), then the exact
        event-by-event parser (a compact file whose args hold lists of objects).
        """
        tail = _last_boundaries(pending)
        further = [_BOUNDARY.search(pending, len(pending) * k // 8) for k in (5, 3, 1)]
        if tail:
            further.append(_BOUNDARY.search(pending, 0))
        tried: set[int] = set()
        for match in [*reversed(tail), *further]:
            if match is None or match.start() in tried:
                continue
            tried.add(match.start())
            count = self._events_in(pending[: match.start() + 1], index)
            if count is not None:
                return match.start() + 1, match.end() - 1, count
        end = _exact_cut(self.path, pending, index)
        if end is None:
            return None
        count = self._events_in(pending[: end[0]], index)
        return None if count is None else (end[0], end[1], count)

    def _check_size(self, size: int, index: int) -> None:
        if size > EVENT_LIMIT:
            raise TraceFormatError(
                self.path,
                f"event is larger than {EVENT_LIMIT >> 20} MB, the most hyperscope imports",
                event_index=index,
            )

    def _events_in(self, text: bytes, index: int) -> int | None:
        """How many complete values ``text`` (values and separators) holds; None if it is not that.

        The compiled count answers where it is sure (0.03 s per 54 MB, against 0.17 s for
        msgspec's list of raw values, built and freed to be counted); msgspec decides the rest."""
        counted = _creader.count_values(text)
        if counted is not None and counted[1] <= EVENT_LIMIT:
            return counted[0]
        try:
            events = _RAW.decode(b"[" + text + b"]")
        except msgspec.DecodeError:
            return None
        except RecursionError:
            raise TraceFormatError(self.path, _TOO_DEEP, event_index=_too_deep_at(text, index)) from None
        if len(text) > EVENT_LIMIT:
            sizes = list(map(len, events))  # at C speed: a call per event was 0.1 s per 54 MB
            if max(sizes) > EVENT_LIMIT:
                for i, size in enumerate(sizes):
                    self._check_size(size, index + i)
        return len(events)

    def _read_header(self, blocks: _Blocks, buf: bytes) -> bytes:
        """Parse the keys before ``traceEvents``; return the bytes after its ``[``.

        The key is the first ``"traceEvents"`` before which the text is a valid object prefix:
        the same bytes inside a string or a nested object are skipped.
        """
        key = b'"traceEvents"'
        start, first_error = 0, ""
        while True:
            while (pos := buf.find(key, start)) < 0:
                if blocks.eof or len(buf) > _HEADER_LIMIT:
                    if first_error:
                        raise TraceFormatError(self.path, first_error)
                    raise TraceFormatError(
                        self.path, "has no traceEvents array", field="traceEvents", expected="a list"
                    )
                buf += blocks.read()
            head = buf[:pos].rstrip(_WS)
            try:
                if head == b"{":
                    header = {}
                elif head.endswith(b","):
                    header = orjson.loads(head[:-1] + b"}")
                else:
                    raise orjson.JSONDecodeError("not at a key", "", 0)
            except orjson.JSONDecodeError as exc:
                first_error = first_error or f"invalid JSON before traceEvents: {exc}"
                start = pos + 1
                continue
            rest = blocks.skip(_WS, buf[pos + len(key) :])
            if rest[:1] != b":":  # the bytes were a value, not a key
                start = pos + 1
                continue
            rest = blocks.skip(_WS, rest[1:])
            if rest[:1] != b"[":
                raise TraceFormatError(self.path, "is not a list", field="traceEvents", expected="a list")
            self.header = header
            return rest[1:]

    def _separator(self, blocks: _Blocks, pending: bytes) -> bytes:
        """The bytes between two events: decided from the end of the first event."""
        while True:
            try:
                text = pending.decode("utf-8", errors="replace")
                _, end = _DECODER.raw_decode(text)
                break
            except RecursionError:
                raise TraceFormatError(self.path, _TOO_DEEP, event_index=0) from None
            except json.JSONDecodeError:
                if blocks.eof or len(pending) > CHUNK_BYTES:
                    return b"},{"  # let the exact splitter report what is wrong
                pending += blocks.read()
        after = text[end:].encode()
        match = _FIRST_SEP.match(b"}" + after[:64])
        return b"}" + match.group(1) + b"{" if match else b"},{"

    def _last_events(self, tail: bytes, index: int) -> tuple[bytes, int, bytes]:
        """The events of ``tail`` up to the end of the list (parsed one by one: usually one, a few
        where the chunk before could not be cut later): their text, their count, what follows."""
        try:
            text = tail.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TraceFormatError(self.path, f"is not UTF-8 ({exc.reason})", event_index=index) from None
        pos, count = 0, 0
        while True:
            try:
                _, end = _DECODER.raw_decode(text, pos)
            except RecursionError:
                raise TraceFormatError(self.path, _TOO_DEEP, event_index=index) from None
            except json.JSONDecodeError as exc:
                # At the end of the file, an unterminated string or value is a cut, not a typo.
                at_end = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
                problem = "file ends inside this event (truncated?)" if at_end else f"invalid JSON: {exc.msg}"
                raise TraceFormatError(self.path, problem, event_index=index) from None
            self._check_size(end - pos, index)  # characters: at most the bytes
            count += 1
            after = text[end:].lstrip(" \t\r\n")
            if after[:1] == ",":
                nxt = after[1:].lstrip(" \t\r\n")
                if not nxt:
                    raise TraceFormatError(
                        self.path,
                        "file ends where this event should start (truncated?)",
                        event_index=index + 1,
                    )
                if nxt[:1] == "{":
                    pos, index = len(text) - len(nxt), index + 1
                    continue
                raise TraceFormatError(
                    self.path,
                    f"found {nxt[:20]!r} after ','",
                    event_index=index + 1,
                    expected="an event object",
                )
            if after[:1] != "]":
                raise TraceFormatError(
                    self.path,
                    f"found {after[:20].encode()!r} after the event",
                    event_index=index,
                    expected="',' or ']'",
                )
            return text[:end].encode(), count, after.encode()

    def _read_trailer(self, rest: bytes, blocks: _Blocks, top_level_object: bool) -> None:
        parts = [rest]  # joined once: never quadratic
        while not blocks.eof:
            parts.append(blocks.read())
        rest = b"".join(parts).strip(_WS)
        if not top_level_object:
            if rest:
                raise TraceFormatError(self.path, f"unexpected {rest[:20]!r} after the event list")
            return
        if rest[:1] == b",":
            try:
                self.trailer = orjson.loads(b"{" + rest[1:])
            except orjson.JSONDecodeError as exc:
                raise TraceFormatError(
                    self.path, f"invalid JSON after traceEvents (truncated?): {exc}"
                ) from None
        elif rest != b"}":
            problem = (
                "file ends before the closing '}' (truncated?)" if not rest else f"unexpected {rest[:20]!r}"
            )
            raise TraceFormatError(self.path, problem + " after traceEvents")


def _last_boundaries(pending: bytes) -> list[re.Match[bytes]]:
    """The last 4 candidate cuts in the last ``_TAIL`` bytes of ``pending``, looked for in its
    last 64 KB first: finding every candidate of a whole megabyte (~10,000 in Kineto's JSON) took
    1.5 ms a chunk, and a small file is one chunk (the 8-rank DLRM set: 12 ms of its reading).
    Candidates never overlap, so the last 4 of a shorter tail are the last 4 of the longer one."""
    for span in (_TAIL >> 4, _TAIL):
        start = max(0, len(pending) - span)
        found = list(_BOUNDARY.finditer(pending, start))[-4:]
        if len(found) == 4 or start == 0:
            return found
    return found


def _gunzip(raw: IO[bytes]) -> IO[bytes]:
    """``raw``'s inflated bytes, by whichever gzip imported (``_gzip``)."""
    stream: IO[bytes] = _gzip.GzipFile(fileobj=raw, mode="rb")
    return stream


class _Blocks:
    """Blocks of decompressed bytes, reporting compressed bytes consumed for progress bars."""

    def __init__(
        self, path: Path, stream: IO[bytes], raw: IO[bytes], progress: Callable[[int], None] | None
    ) -> None:
        self.path, self.stream, self.raw, self.progress = path, stream, raw, progress
        self.eof = False
        self._reported = 0
        # a header is a few KB: the first reads are small and grow, so checking every file's
        # header (before any is parsed) reads 64 KB of each, not 4 MB (8 DLRM ranks: 55 ms)
        self._next = _FIRST_READ

    def read(self, size: int | None = None) -> bytes:
        if size is None:
            size, self._next = self._next, min(READ_BYTES, self._next * 4)
        try:
            data = self.stream.read(size)
        except _GZIP_ERRORS as exc:
            raise TraceFormatError(self.path, f"gzip stream is damaged or truncated: {exc}") from None
        if not data:
            self.eof = True
        if self.progress is not None:
            done = self.raw.tell()
            self.progress(done - self._reported)
            self._reported = done
        return data

    def skip(self, chars: bytes, buf: bytes = b"") -> bytes:
        """``buf`` and what follows, without the leading ``chars`` (dropped block by block, so a
        gigabyte of leading whitespace costs one pass, not one per block)."""
        buf = buf.lstrip(chars)
        while not buf and not self.eof:
            buf = self.read().lstrip(chars)
        return buf


def split_events(path: Path, chunk: Chunk) -> Iterator[tuple[int, dict[str, Any]]]:
    """Parse a chunk event by event (exactly, slowly): used when the fast path cannot be trusted.

    Numbers with a fraction are kept as :class:`~decimal.Decimal` so timestamps keep every digit.
    """
    try:
        text = chunk.text.decode("utf-8")
    except UnicodeDecodeError as exc:
        index = chunk.first_index + chunk.text[: exc.start].count(chunk.sep)
        raise TraceFormatError(path, f"is not UTF-8 ({exc.reason})", event_index=index) from None
    pos, index, end_of_text = 0, chunk.first_index, len(text)
    while True:
        while pos < end_of_text and text[pos] in " \t\r\n":
            pos += 1
        try:
            event, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(path, f"invalid JSON: {exc.msg}", event_index=index) from None
        yield index, event
        index += 1
        while pos < end_of_text and text[pos] in " \t\r\n":
            pos += 1
        if pos >= end_of_text:
            return
        if text[pos] != ",":
            raise TraceFormatError(
                path,
                f"found {text[pos : pos + 20]!r} after the event",
                event_index=index - 1,
                expected="','",
            )
        pos += 1


def _exact_cut(path: Path, pending: bytes, index: int) -> tuple[int, int] | None:
    """(end, start of the next event) after the last complete event followed by another, found by
    parsing event by event (slow: only where no quick candidate parsed)."""
    text = pending.decode("utf-8", errors="replace")
    pos, last = 0, None
    while True:
        try:
            _, end = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError:
            return last
        except RecursionError:
            raise TraceFormatError(path, _TOO_DEEP, event_index=index) from None
        stripped = text[end:].lstrip(" \t\r\n")
        if not stripped.startswith(","):
            return last
        after = stripped[1:].lstrip(" \t\r\n")
        if not after.startswith("{"):
            return last
        pos = len(text) - len(after)
        last = len(text[:end].encode()), len(text[:pos].encode())
        index += 1


def _too_deep_at(text: bytes, index: int) -> int:
    """Index of the first event of ``text`` nested too deep to parse (events parsed one by one)."""
    decoded = text.decode("utf-8", errors="replace")
    pos = 0
    while pos < len(decoded):
        try:
            _, pos = _DECODER.raw_decode(decoded, pos)
        except RecursionError:
            return index
        except json.JSONDecodeError:
            break
        pos = len(decoded) - len(decoded[pos:].lstrip(" \t\r\n,"))
        index += 1
    return index
