"""Streaming reader of Chrome-trace / Kineto JSON files.

Kineto files are one JSON object whose ``traceEvents`` array holds every event, with other keys
(``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds``, ...) before and after it. Files
reach several GB, so this reader never holds the whole document: it hands out chunks of complete
events (raw bytes, as written), and the header and trailer objects once they have been read.

Chunks are cut at the separator that the writer put between two events (for Kineto
``"},\\n  {"``). Because a raw newline cannot occur inside a JSON string, a separator that contains a
newline can only be structural; a chunk cut at a wrong place (a compact file whose args hold nested
objects) fails to parse downstream and is re-split exactly by :func:`split_events`.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import IO, Any, Final

import orjson

from hyperscope.errors import TraceFormatError

READ_BYTES: Final = 4 << 20
CHUNK_BYTES: Final = 16 << 20
_HEADER_LIMIT: Final = 512 << 20
_WS: Final = b" \t\r\n"
_FIRST_SEP = re.compile(rb"\}(\s*,\s*)\{")

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
            stream: IO[bytes] = (
                gzip.GzipFile(fileobj=raw, mode="rb") if self.compressed else raw  # type: ignore[assignment]
            )
            yield _Blocks(self.path, stream, raw, progress)

    def _start(self, blocks: _Blocks) -> tuple[bool, bytes]:
        """Read up to the first event: (whether the top level is an object, the bytes after ``[``)."""
        buf = blocks.read_until(lambda b: b.lstrip(_WS + b"\xef\xbb\xbf") != b"")
        buf = buf.lstrip(_WS + b"\xef\xbb\xbf")
        if not buf:
            raise TraceFormatError(self.path, "file is empty", expected="a JSON trace")
        if buf[:1] == b"[":
            return False, buf[1:]
        if buf[:1] == b"{":
            return True, self._read_header(blocks, buf)
        raise TraceFormatError(self.path, f"starts with {buf[:20]!r}", expected="a JSON object or array")

    def _chunks(self, blocks: _Blocks) -> Iterator[Chunk]:
        top_level_object, pending = self._start(blocks)
        pending = blocks.read_until(lambda b: b.lstrip(_WS) != b"", pending).lstrip(_WS)
        if pending[:1] == b"]":
            self._read_trailer(pending[1:], blocks, top_level_object)
            return
        if pending[:1] != b"{":
            raise TraceFormatError(
                self.path, f"found {pending[:20]!r}", event_index=0, expected="an event object"
            )
        sep = self._separator(blocks, pending)
        index = 0
        while True:
            if not blocks.eof and len(pending) < CHUNK_BYTES:
                pending += blocks.read(max(READ_BYTES, CHUNK_BYTES - len(pending)))
                continue
            if blocks.eof:
                break
            cut = self._cut(pending, sep)
            if cut <= 0:  # one event larger than a chunk: keep reading
                pending += blocks.read()
                continue
            text, pending = pending[: cut + 1], pending[cut + len(sep) - 1 :]
            count = _count_events(text, sep)
            yield Chunk(index, count, text, sep)
            index += count
        # The last event is followed by "]" and the trailer, so it is delimited by parsing it. The
        # trailer may hold the separator too: step back over it (a few times at most).
        cut = self._cut(pending, sep)
        first_error: TraceFormatError | None = None
        for _ in range(4):
            head, tail = (pending[: cut + 1], pending[cut + len(sep) - 1 :]) if cut > 0 else (b"", pending)
            try:
                last_text, rest = self._last_event(tail, index + (_count_events(head, sep) if head else 0))
                break
            except TraceFormatError as exc:
                first_error = first_error or exc
                cut = pending.rfind(sep, 0, cut) if cut > 0 else -1
                if cut <= 0:
                    raise first_error from None
        else:
            assert first_error is not None
            raise first_error
        text = head + sep[1:-1] + last_text if head else last_text
        count = _count_events(text, sep)
        yield Chunk(index, count, text, sep)
        self.events = index + count
        self._read_trailer(rest.lstrip(_WS)[1:], blocks, top_level_object)

    def _cut(self, pending: bytes, sep: bytes) -> int:
        """Where to end a chunk: after the last complete event that ``pending`` holds."""
        cut = pending.rfind(sep)
        if b"\n" in sep or cut <= 0:
            return cut  # a separator with a newline is never inside an event
        for _ in range(8):  # compact JSON: nested objects may hold the separator too
            try:
                orjson.loads(b"[" + pending[: cut + 1] + b"]")
                return cut
            except orjson.JSONDecodeError:
                cut = pending.rfind(sep, 0, cut)
                if cut <= 0:
                    return cut
        return _exact_cut(pending, sep)

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
            rest = blocks.read_until(lambda b: len(b.lstrip(_WS + b":")) > 0, buf[pos + len(key) :])
            rest = rest.lstrip(_WS)
            if rest[:1] != b":":  # the bytes were a value, not a key
                start = pos + 1
                continue
            if rest[1:].lstrip(_WS)[:1] != b"[":
                raise TraceFormatError(self.path, "is not a list", field="traceEvents", expected="a list")
            self.header = header
            return rest[1:].lstrip(_WS)[1:]

    def _separator(self, blocks: _Blocks, pending: bytes) -> bytes:
        """The bytes between two events: decided from the end of the first event."""
        while True:
            try:
                text = pending.decode("utf-8", errors="replace")
                _, end = _DECODER.raw_decode(text)
                break
            except json.JSONDecodeError:
                if blocks.eof or len(pending) > CHUNK_BYTES:
                    return b"},{"  # let the exact splitter report what is wrong
                pending += blocks.read()
        after = text[end:].encode()
        match = _FIRST_SEP.match(b"}" + after[:64])
        return b"}" + match.group(1) + b"{" if match else b"},{"

    def _last_event(self, tail: bytes, index: int) -> tuple[bytes, bytes]:
        try:
            text = tail.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TraceFormatError(self.path, f"is not UTF-8 ({exc.reason})", event_index=index) from None
        try:
            _, end = _DECODER.raw_decode(text)
        except json.JSONDecodeError as exc:
            # At the end of the file, an unterminated string or value is a cut, not a typo.
            at_end = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
            problem = "file ends inside this event (truncated?)" if at_end else f"invalid JSON: {exc.msg}"
            raise TraceFormatError(self.path, problem, event_index=index) from None
        head = text[:end].encode()
        rest = text[end:].encode().lstrip(_WS)
        if rest[:1] == b",":
            raise TraceFormatError(
                self.path, "file ends where this event should start (truncated?)", event_index=index + 1
            )
        if rest[:1] != b"]":
            raise TraceFormatError(
                self.path,
                f"found {rest[:20]!r} after the event",
                event_index=index,
                expected="',' or ']'",
            )
        return head, rest

    def _read_trailer(self, rest: bytes, blocks: _Blocks, top_level_object: bool) -> None:
        while not blocks.eof:
            rest += blocks.read()
        rest = rest.strip(_WS)
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


class _Blocks:
    """Blocks of decompressed bytes, reporting compressed bytes consumed for progress bars."""

    def __init__(
        self, path: Path, stream: IO[bytes], raw: IO[bytes], progress: Callable[[int], None] | None
    ) -> None:
        self.path, self.stream, self.raw, self.progress = path, stream, raw, progress
        self.eof = False
        self._reported = 0

    def read(self, size: int = READ_BYTES) -> bytes:
        try:
            data = self.stream.read(size)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise TraceFormatError(self.path, f"gzip stream is damaged or truncated: {exc}") from None
        if not data:
            self.eof = True
        if self.progress is not None:
            done = self.raw.tell()
            self.progress(done - self._reported)
            self._reported = done
        return data

    def read_until(self, ok: Callable[[bytes], bool], buf: bytes = b"") -> bytes:
        while not ok(buf) and not self.eof:
            buf += self.read()
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


def _exact_cut(pending: bytes, sep: bytes) -> int:
    """Position of the separator after the last complete event, found by parsing event by event."""
    text = pending.decode("utf-8", errors="replace")
    pos, last = 0, -1
    while True:
        try:
            _, end = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError:
            return last
        rest = text[end:]
        stripped = rest.lstrip(" \t\r\n")
        if not stripped.startswith(","):
            return last
        after = stripped[1:].lstrip(" \t\r\n")
        if not after.startswith("{"):
            return last
        candidate = len(text[: end - 1].encode())  # byte offset of the event's closing brace
        if pending[candidate : candidate + len(sep)] != sep:
            return last  # the writer did not use one separator throughout
        last = candidate
        pos = len(text) - len(after)


def _count_events(text: bytes, sep: bytes) -> int:
    """Events in a chunk: separators plus one, unless the separator can occur inside an event."""
    if b"\n" in sep:
        return text.count(sep) + 1
    try:  # compact JSON: nested objects may hold "},{" too, so count what parses
        return len(orjson.loads(b"[" + text + b"]"))
    except orjson.JSONDecodeError:
        return text.count(sep) + 1  # broken anyway: the exact parser will say where
