"""XPlane (``*.xplane.pb``, what TensorFlow's, JAX's and PyTorch/XLA's profilers write) as raw rows.

An XSpace is a protobuf: planes (the host, each device), lines (a thread, a stream), events (an
offset and a duration in picoseconds from the line's start, a metadata id that names it) and stats
(key-value facts: a TF op's type, a kernel's grid or correlation id). It is decoded here from the
protobuf wire format directly, so that neither TensorFlow nor a converter (xprof) is needed to read
it, and a broken file is refused with the byte offset where it broke. Where protobuf's C parser is
installed (the ``jax`` and ``tensorflow`` extras bring it), ``rows_of`` decodes with it instead
(``xspace_pb``: about 3x less CPU, the same rows).

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

import json
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from hyperscope.capture import xspace_pb
from hyperscope.capture.torch_backend import RAW_SCHEMA
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
    #: (metadata id, offset ps, duration ps, stats)
    events: list[tuple[int, int, int, dict[str, Any]]] = field(default_factory=list)


@dataclass(slots=True)
class XPlane:
    id: int
    name: str
    lines: list[XLine] = field(default_factory=list)
    event_names: dict[int, str] = field(default_factory=dict)
    stat_names: dict[int, str] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


class _Broken(Exception):
    pass


def _fields(buf: memoryview, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a message; length-delimited values as memoryviews."""
    pos, stop = start, len(buf) if end is None else end
    while pos < stop:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            if pos + 8 > stop:
                raise _Broken(f"a 64-bit field past the end at byte {pos}")
            value, pos = bytes(buf[pos : pos + 8]), pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > stop:
                raise _Broken(f"a field of {size} bytes past the end at byte {pos}")
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = bytes(buf[pos : pos + 4]), pos + 4
        else:
            raise _Broken(f"wire type {wire} at byte {pos} (not a protobuf, or damaged)")
        yield number, wire, value


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise _Broken(f"a number cut off at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise _Broken(f"a number longer than 10 bytes at byte {pos}")


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
    """The planes of one XSpace file, read from the wire format here; TraceFormatError (naming the
    file and byte) when it is broken."""
    try:
        return [_plane(v) for number, wire, v in _fields(memoryview(data)) if number == 1 and wire == 2]
    except _Broken as exc:
        raise TraceFormatError(path, f"not a readable XPlane file: {exc}") from None


def _plane(msg: memoryview) -> XPlane:
    plane = XPlane(0, "")
    raw_lines: list[memoryview] = []
    raw_stats: list[tuple[int, Any]] = []
    for number, _, v in _fields(msg):
        if number == 1:
            plane.id = _signed(v)
        elif number == 2:
            plane.name = _text(v)
        elif number == 3:
            raw_lines.append(v)
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
    for raw in raw_lines:
        plane.lines.append(_line(raw, plane.stat_names))
    plane.stats = _stats(raw_stats, plane.stat_names)
    return plane


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


def _line(msg: memoryview, stat_names: dict[int, str]) -> XLine:
    line = XLine(0, "", 0)
    name = display = ""
    for number, _, v in _fields(msg):
        if number == 1:
            line.id = _signed(v)
        elif number == 2:
            name = _text(v)
        elif number == 11:
            display = _text(v)
        elif number == 3:
            line.timestamp_ns = _signed(v)
        elif number == 4:
            meta = offset = dur = 0
            stats: list[tuple[int, Any]] = []
            for n, _, x in _fields(v):
                if n == 1:
                    meta = x
                elif n == 2:
                    offset = _signed(x)
                elif n == 3:
                    dur = _signed(x)
                elif n == 4:
                    stats.append(_stat(x))
            line.events.append((meta, offset, dur, _stats(stats, stat_names)))
    line.name = display or name
    return line


def _device_category(name: str) -> str:
    low = name.lower()
    if "memcpy" in low:
        return "gpu_memcpy"
    if "memset" in low:
        return "gpu_memset"
    return "kernel"


def plane_rows(planes: list[XPlane], *, host_pid: int) -> pa.Table:
    """Every timed event of the planes as raw rows (``RAW_SCHEMA``), in the epoch-ns clock of the
    profiler (XLine timestamps are wall-clock ns)."""
    cols: dict[str, list[Any]] = {f.name: [] for f in RAW_SCHEMA}
    order = [cols[f.name] for f in RAW_SCHEMA if f.name != "args"]

    def add(*row: Any) -> None:
        *head, args = row
        for col, value in zip(order, head, strict=True):
            col.append(value)
        cols["args"].append(json.dumps(args, separators=(",", ":"), default=str) if args else None)

    #: (correlation, pid, tid, ts) of host launches (False) and device ops (True)
    ends: dict[bool, list[tuple[int, int, int, int]]] = {False: [], True: []}
    start = start_time_ns(planes)
    for plane in planes:
        if plane.name.startswith(_SKIPPED_PLANES):
            continue
        device = _DEVICE_PLANE.match(plane.name)
        if not device and not plane.name.startswith("/host:"):
            continue
        for line in plane.lines:
            base = line.timestamp_ns + (start if line.timestamp_ns < _EPOCH_NS_MIN else 0)
            for meta, offset_ps, dur_ps, stats in line.events:
                name = plane.event_names.get(meta, f"event {meta}")
                corr = stats.get("correlation_id")
                corr = corr if isinstance(corr, int) and corr > 0 else None
                if device:
                    cat = _device_category(name)
                    pid = int(device.group(1))
                    args = {"device": pid, "stream": line.id, **stats}
                elif corr is not None:  # a CUPTI driver callback: the host's launch of a device op
                    cat, pid, args = "cuda_driver", host_pid, dict(stats)
                else:
                    cat = "python_function" if name.startswith("$") else "cpu_op"
                    pid, args = host_pid, stats
                ts = base + offset_ps // 1000
                if corr is not None:
                    args["correlation"] = corr
                add("X", cat, name, pid, line.id, ts, max(dur_ps // 1000, 0), None, None, args)
                if corr is not None:
                    ends[bool(device)].append((corr, pid, line.id, ts))
    # the arrow launch -> device op, as Kineto's ac2g flow events: where both ends were recorded
    linked = {c for c, *_ in ends[False]} & {c for c, *_ in ends[True]}
    for on_device, ph, bp in ((False, "s", None), (True, "f", "e")):
        for corr, pid, tid, ts in ends[on_device]:
            if corr in linked:
                add(ph, "ac2g", "ac2g", pid, tid, ts, None, corr, bp, None)
    arrays = [pa.array(cols[f.name], type=f.type) for f in RAW_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=RAW_SCHEMA)


def read_rows(path: Path, *, host_pid: int = 0) -> pa.Table:
    """One ``*.xplane.pb`` file as raw rows; TraceFormatError when it is not one."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(path, f"cannot be read: {exc.strerror}") from None
    return rows_of(data, path, host_pid=host_pid)


def rows_of(data: bytes, path: Path, *, host_pid: int = 0) -> pa.Table:
    """A serialized XSpace as raw rows (``path`` names where it came from in errors): decoded by
    protobuf's C parser where it is installed (``xspace_pb``, the same rows), else read here."""
    space = xspace_pb.parse(data)
    names = xspace_pb.plane_names(space) if space is not None else None
    planes = parse_xspace(data, path) if names is None else []
    if not any(_is_timed(n) for n in (names if names is not None else [p.name for p in planes])):
        raise TraceFormatError(path, "holds no host or device plane: not an XPlane profile")
    if space is not None:
        return xspace_pb.rows(space, host_pid=host_pid)
    return plane_rows(planes, host_pid=host_pid)


def _is_timed(plane_name: str) -> bool:
    return plane_name.startswith("/host:") or _DEVICE_PLANE.match(plane_name) is not None
