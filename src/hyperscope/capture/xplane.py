"""XPlane (``*.xplane.pb``, what TensorFlow's, JAX's and PyTorch/XLA's profilers write) as raw rows.

An XSpace is a protobuf: planes (the host, each device), lines (a thread, a stream), events (an
offset and a duration in picoseconds from the line's start, a metadata id that names it) and stats
(key-value facts: a TF op's type, a kernel's grid or correlation id). It is decoded here from the
protobuf wire format directly, so that neither TensorFlow nor a converter (xprof) is needed to read
it, and a broken file is refused with the byte offset where it broke. Where protobuf's C parser is
installed (the ``jax`` and ``tensorflow`` extras bring it), ``rows_of`` splits the file with it
instead (``xspace_pb``). Either way the planes come out in one shape, each line's events left as
their serialized bytes, and one builder makes the rows of both (``xplane_rows``: the events and
their stats decoded column-wise, with numpy, not one by one).

The rows have the layout of ``torch_backend``'s raw rows, so the importer's SQL types them into the
event schema exactly as it types Kineto's: host events are ``cpu_op`` (Python functions, named
``$file:line fn`` by the Python tracer, are ``python_function``), device events are ``kernel``,
``gpu_memcpy`` or ``gpu_memset`` with their device as pid and their stream as tid.

Launches are linked to what they launched as PyTorch's are: CUPTI's driver callbacks (XLA's and
TF's collectors put them on a host plane, ``/host:CUPTI`` today, one line per calling thread, named
after the kernel or copy they launched) carry the same ``correlation_id`` stat as the device event;
such host events become ``cuda_driver`` rows with that id as their ``correlation``, beside an
``ac2g`` flow pair (``s`` at the launch, ``f`` at the device op), the columns the timeline's
arrows and the launch-delay analyses join on.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from hyperscope.capture import xspace_pb
from hyperscope.errors import TraceFormatError

_DEVICE_PLANE: Final = re.compile(r"^/device:(?:GPU|TPU|XPU):(\d+)")
#: Planes that hold no timed activity of the run (the profiler's own bookkeeping).
_SKIPPED_PLANES: Final = ("/host:metadata", "Task Environment")
#: Stats that are ids of other metadata rather than values.
_REF: Final = "ref"


@dataclass(slots=True)
class XLine:
    id: int
    name: str
    timestamp_ns: int
    #: where each serialized XEvent of the line lies in its plane's ``data`` (start, end), in order
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)


@dataclass(slots=True)
class XPlane:
    id: int
    name: str
    lines: list[XLine] = field(default_factory=list)
    event_names: dict[int, str] = field(default_factory=dict)
    stat_names: dict[int, str] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    #: the bytes the lines' events point into: the whole file (the wire reader: positions are then
    #: the file's own, for errors) or the plane's events joined (``xspace_pb``)
    data: bytes | memoryview = b""
    #: what a position in ``data`` is in the file, where known (None: ``xspace_pb``'s joined events)
    file_offset: int | None = 0


class Broken(Exception):
    """Bytes that are no protobuf (or a damaged one), with where they broke."""


def _fields(buf: memoryview, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a message; length-delimited values as memoryviews."""
    for number, wire, value, _ in _fields_at(buf, start, end):
        yield number, wire, value


def _fields_at(
    buf: memoryview, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, int, Any, int]]:
    """``_fields`` with where each value begins in ``buf`` (a length-delimited one's first byte)."""
    pos, stop = start, len(buf) if end is None else end
    while pos < stop:
        key, pos = _varint(buf, pos)
        number, wire, at = key >> 3, key & 7, pos
        value: Any
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            if pos + 8 > stop:
                raise Broken(f"a 64-bit field past the end at byte {pos}")
            value, pos = bytes(buf[pos : pos + 8]), pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > stop:
                raise Broken(f"a field of {size} bytes past the end at byte {pos}")
            at = pos
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = bytes(buf[pos : pos + 4]), pos + 4
        else:
            raise Broken(f"wire type {wire} at byte {pos} (not a protobuf, or damaged)")
        yield number, wire, value, at


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise Broken(f"a number cut off at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise Broken(f"a number longer than 10 bytes at byte {pos}")


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _text(v: Any) -> str:
    return bytes(v).decode("utf-8", errors="replace")


def _stat(msg: memoryview) -> tuple[int, Any]:
    meta, value = 0, None
    for number, _, v in _fields(msg):
        if number == 1:
            meta = v
        elif number == 2:
            value = struct.unpack("<d", v)[0]
        elif number in (3, 7):
            value = (_REF, v) if number == 7 else v
        elif number == 4:
            value = _signed(v)
        elif number == 5:
            value = _text(v)
        elif number == 6:
            value = bytes(v).hex()
    return meta, value


def _stats(raw: list[tuple[int, Any]], names: dict[int, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for meta, value in raw:
        if isinstance(value, tuple):  # a ref_value names another stat metadata: its name is the value
            value = names.get(value[1], "")
        out[names.get(meta, str(meta))] = value
    return out


def parse_xspace(data: bytes, path: Path) -> list[XPlane]:
    """The planes of one XSpace file, read from the wire format here (where each event lies is
    found, its bytes not decoded: ``xplane_rows`` does that); TraceFormatError (naming the file
    and the byte) when it is broken."""
    buf = memoryview(data)
    try:
        return [
            _plane(buf, at, at + len(v))
            for number, wire, v, at in _fields_at(buf)
            if number == 1 and wire == 2
        ]
    except Broken as exc:
        raise TraceFormatError(path, f"not a readable XPlane file: {exc}") from None


def _plane(buf: memoryview, start: int, end: int) -> XPlane:
    plane = XPlane(0, "", data=buf)
    raw_stats: list[tuple[int, Any]] = []
    for number, wire, v, at in _fields_at(buf, start, end):
        if number == 1:
            plane.id = _signed(v)
        elif number == 2:
            plane.name = _text(v)
        elif number == 3 and wire == 2:
            plane.lines.append(_line(buf, at, at + len(v)))
        elif number == 6:
            raw_stats.append(_stat(v))
        elif number in (4, 5):  # map<int64, XEventMetadata / XStatMetadata>: entries of key 1, value 2
            for n, _, entry in _fields(v):
                if n != 2:
                    continue
                mid, name, display = 0, "", ""
                for m, _, x in _fields(entry):
                    if m == 1:
                        mid = x
                    elif m == 2:
                        name = _text(x)
                    elif m == 4 and number == 4:
                        display = _text(x)
                (plane.event_names if number == 4 else plane.stat_names)[mid] = display or name
    plane.stats = _stats(raw_stats, plane.stat_names)
    return plane


def _line(buf: memoryview, start: int, end: int) -> XLine:
    """A line's header, and where each of its events lies in the file."""
    line = XLine(0, "", 0)
    name = display = ""
    for number, wire, v, at in _fields_at(buf, start, end):
        if number == 1:
            line.id = _signed(v)
        elif number == 2:
            name = _text(v)
        elif number == 11:
            display = _text(v)
        elif number == 3:
            line.timestamp_ns = _signed(v)
        elif number == 4 and wire == 2:
            line.starts.append(at)
            line.ends.append(at + len(v))
    line.name = display or name
    return line


#: Line timestamps below this are relative to the profile's start, not Unix-epoch ns (2001-09-09).
_EPOCH_NS_MIN: Final = 10**18


def start_time_ns(planes: list[XPlane]) -> int:
    """What the line timestamps count from: the profiler's start in epoch ns when the profilers
    normalized them (TF and JAX do, and keep the start in the ``Task Environment`` plane)."""
    for plane in planes:
        start = plane.stats.get("profile_start_time")
        if isinstance(start, int) and start > 0:
            return start
    return 0


def _device_category(name: str) -> str:
    low = name.lower()
    if "memcpy" in low:
        return "gpu_memcpy"
    if "memset" in low:
        return "gpu_memset"
    return "kernel"


def plane_rows(planes: list[XPlane], *, host_pid: int) -> pa.Table:
    """Every timed event of the planes as raw rows (``RAW_SCHEMA``), in the epoch-ns clock of the
    profiler (XLine timestamps are wall-clock ns): ``xplane_rows.rows``, the one row builder."""
    from hyperscope.capture import xplane_rows

    return xplane_rows.rows(planes, host_pid=host_pid)


def read_rows(path: Path, *, host_pid: int = 0) -> pa.Table:
    """One ``*.xplane.pb`` file as raw rows; TraceFormatError when it is not one."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(path, f"cannot be read: {exc.strerror}") from None
    return rows_of(data, path, host_pid=host_pid)


def rows_of(data: bytes, path: Path, *, host_pid: int = 0) -> pa.Table:
    """A serialized XSpace as raw rows (``path`` names where it came from in errors): split into
    planes by protobuf's C parser where it is installed (``xspace_pb``), else by the reader here."""
    planes = xspace_pb.planes(data)
    if planes is None:
        planes = parse_xspace(data, path)
    if not any(_is_timed(p.name) for p in planes):
        raise TraceFormatError(path, "holds no host or device plane: not an XPlane profile")
    try:
        return plane_rows(planes, host_pid=host_pid)
    except Broken as exc:
        broken = exc
    if planes[0].file_offset is None:  # an event of the C parser's joined ones: where in the file?
        try:
            return plane_rows(parse_xspace(data, path), host_pid=host_pid)
        except Broken as exc:
            broken = exc
    raise TraceFormatError(path, f"not a readable XPlane file: {broken}") from None


def _is_timed(plane_name: str) -> bool:
    return plane_name.startswith("/host:") or _DEVICE_PLANE.match(plane_name) is not None
