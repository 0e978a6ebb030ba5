"""XSpace decoded by protobuf's compiled (upb, C) parser: the fast path of ``xplane``'s rows.

The wire reader in ``xplane`` walks every byte in Python: on a JAX capture at ``cpu_ops`` detail
(~95 events and ~300 stats a step) it was most of the writer's work for a window. Here protobuf's
C parser does the walking, with a message class built at run time from a descriptor written below
(xplane.proto's fields, as the profilers write them; no generated code, no TensorFlow).

Three choices keep this path's rows those of the wire reader, value for value (tests hold them
equal on hand-made spaces with every kind of stat and on real JAX captures):

- every field has the wire reader's type: ids it reads as unsigned are ``uint64``, names are
  ``bytes`` decoded as it decodes them (so a name that is not UTF-8 is not refused here);
- each stat stays its serialized bytes (``repeated bytes`` is a sub-message's wire format) and is
  decoded once per distinct value, by the wire reader's rules (``xplane._stat``, ``_stats``): stats
  repeat (the same source file, the same op names), and a stat's JSON is kept with it, so an
  event's ``args`` is a join of kept pieces, not a ``json.dumps`` per event;
- the rows are built in ``xplane.plane_rows``' order, by the same rules (its helpers).

Where protobuf is absent, or runs its pure-Python backend (slower than the wire reader), or the
data does not parse, ``available()`` is False or ``parse`` returns None, and ``xplane`` reads the
bytes itself: a broken file is then refused with the byte where it broke.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any, Final

import pyarrow as pa

from hyperscope.capture.torch_backend import RAW_SCHEMA

#: xplane.proto's messages as (field, number, type, then the message type of a message or map
#: field, the oneof of a scalar, or ""); only what the reader uses (the parser skips the rest).
_MESSAGES: Final[dict[str, list[tuple[str, int, str, str]]]] = {
    "XSpace": [("planes", 1, "message", "XPlane")],
    "XPlane": [
        ("id", 1, "int64", ""), ("name", 2, "bytes", ""), ("lines", 3, "message", "XLine"),
        ("event_metadata", 4, "map", "XEventMetadata"), ("stat_metadata", 5, "map", "XStatMetadata"),
        ("stats", 6, "bytes*", ""),
    ],
    "XLine": [("id", 1, "int64", ""), ("timestamp_ns", 3, "int64", ""), ("events", 4, "message", "XEvent")],
    "XEvent": [
        ("metadata_id", 1, "uint64", ""), ("offset_ps", 2, "int64", "data"),
        ("num_occurrences", 5, "int64", "data"), ("duration_ps", 3, "int64", ""), ("stats", 4, "bytes*", ""),
    ],
    "XEventMetadata": [("id", 1, "uint64", ""), ("name", 2, "bytes", ""), ("display_name", 4, "bytes", "")],
    "XStatMetadata": [("id", 1, "uint64", ""), ("name", 2, "bytes", "")],
    "XStat": [
        ("metadata_id", 1, "uint64", ""), ("double_value", 2, "double", "value"),
        ("uint64_value", 3, "uint64", "value"), ("int64_value", 4, "int64", "value"),
        ("str_value", 5, "bytes", "value"), ("bytes_value", 6, "bytes", "value"),
        ("ref_value", 7, "uint64", "value"),
    ],
}  # fmt: skip
_PACKAGE: Final = "hyperscope.xplane"


def _xspace_class() -> Any:
    return _classes()[0]


def _xstat_class() -> Any:
    return _classes()[1]


@cache
def _classes() -> tuple[Any, Any]:
    """The XSpace and XStat message classes ((None, None) where protobuf's C backend is not there)."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
        from google.protobuf.internal import api_implementation
    except ImportError:
        return None, None
    if api_implementation.Type() != "upb":  # the pure-Python backend is slower than our reader
        return None, None
    field_type = descriptor_pb2.FieldDescriptorProto
    scalar = {
        "int64": field_type.TYPE_INT64, "uint64": field_type.TYPE_UINT64, "bytes": field_type.TYPE_BYTES,
        "double": field_type.TYPE_DOUBLE,
    }  # fmt: skip
    proto = descriptor_pb2.FileDescriptorProto(
        name="hyperscope/xplane.proto", package=_PACKAGE, syntax="proto3"
    )
    for name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=name)
        oneofs: list[str] = []
        for fname, number, kind, ref in fields:
            field = message.field.add(name=fname, number=number, label=field_type.LABEL_OPTIONAL)
            if kind in ("message", "map"):
                field.label, field.type = field_type.LABEL_REPEATED, field_type.TYPE_MESSAGE
                field.type_name = f".{_PACKAGE}.{ref}"
            elif kind == "bytes*":
                field.label, field.type = field_type.LABEL_REPEATED, field_type.TYPE_BYTES
            else:
                field.type = scalar[kind]
                if ref:  # a oneof member: the oneof is declared once, in order
                    if ref not in oneofs:
                        oneofs.append(ref)
                        message.oneof_decl.add(name=ref)
                    field.oneof_index = oneofs.index(ref)
            if kind == "map":  # map<int64, ref>: a nested entry message, as protoc writes one
                entry = message.nested_type.add(name=f"{ref}Entry")
                entry.options.map_entry = True
                entry.field.add(
                    name="key", number=1, type=field_type.TYPE_INT64, label=field_type.LABEL_OPTIONAL
                )
                entry.field.add(name="value", number=2, type=field_type.TYPE_MESSAGE,
                                label=field_type.LABEL_OPTIONAL, type_name=f".{_PACKAGE}.{ref}")  # fmt: skip
                field.type_name = f".{_PACKAGE}.{name}.{ref}Entry"
    pool = descriptor_pool.DescriptorPool()  # our own: TensorFlow's copy in the default pool is left alone
    pool.Add(proto)
    space, stat = (pool.FindMessageTypeByName(f"{_PACKAGE}.{n}") for n in ("XSpace", "XStat"))
    return message_factory.GetMessageClass(space), message_factory.GetMessageClass(stat)


def available() -> bool:
    """Whether the compiled path can be used here."""
    try:
        return _xspace_class() is not None
    except Exception:
        return False


def parse(data: bytes) -> Any:
    """The compiled XSpace message of ``data``; None where it is unavailable or refuses the data."""
    if not available():
        return None
    try:
        return _xspace_class().FromString(data)
    except Exception:  # protobuf's DecodeError: the wire reader says where it broke
        return None


def plane_names(space: Any) -> list[str]:
    from hyperscope.capture.xplane import _text

    return [_text(pb.name) for pb in space.planes]


def rows(space: Any, *, host_pid: int) -> pa.Table:
    """``xplane.plane_rows`` of a compiled XSpace: the same rows, in the same order."""
    from hyperscope.capture import xplane as xp

    stat_names = [{m.id: xp._text(m.name) for m in pb.stat_metadata.values()} for pb in space.planes]
    start = 0
    for pb, names in zip(space.planes, stat_names, strict=True):  # xplane.start_time_ns
        value = _as_dict(_StatCache(names).decode(pb.stats)).get("profile_start_time")
        if isinstance(value, int) and value > 0:
            start = value
            break
    out: list[tuple[Any, ...]] = []
    done: list[pa.Table] = []  # rows made columns as they come: a window's tuples are never all alive
    ends: dict[bool, list[tuple[int, int, int, int]]] = {False: [], True: []}
    for pb, plane_name, names in zip(space.planes, plane_names(space), stat_names, strict=True):
        if plane_name.startswith(xp._SKIPPED_PLANES):
            continue
        device = xp._DEVICE_PLANE.match(plane_name)
        if not device and not plane_name.startswith("/host:"):
            continue
        event_names = {m.id: xp._text(m.display_name) or xp._text(m.name) for m in pb.event_metadata.values()}
        stats = _StatCache(names)
        for line in pb.lines:
            base = line.timestamp_ns + (start if line.timestamp_ns < xp._EPOCH_NS_MIN else 0)
            if device:
                _device_line(line, base, int(device.group(1)), event_names, stats, out, ends[True])
            else:
                _host_line(line, base, host_pid, event_names, stats, out, ends[False])
            if len(out) >= _CHUNK_ROWS:
                done.append(_columns(out))
                out.clear()
    linked = {c for c, *_ in ends[False]} & {c for c, *_ in ends[True]}
    for on_device, ph, bp in ((False, "s", None), (True, "f", "e")):
        for corr, pid, tid, ts in ends[on_device]:
            if corr in linked:
                out.append((ph, "ac2g", "ac2g", pid, tid, ts, None, corr, bp, None))
    if out:
        done.append(_columns(out))
    if not done:
        return RAW_SCHEMA.empty_table()
    return pa.concat_tables(done) if len(done) > 1 else done[0]


#: Rows held as Python tuples before they become Arrow columns (~150 bytes a row as tuples, ~25
#: as columns): a JAX window of 1000 steps holds ~95,000 rows.
_CHUNK_ROWS: Final = 16_384


def _columns(out: list[tuple[Any, ...]]) -> pa.Table:
    columns = zip(*out, strict=True)  # one transposition in C, not an append per value
    return pa.Table.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, RAW_SCHEMA, strict=True)], schema=RAW_SCHEMA
    )


#: (correlation, pid, tid, ts) of a launch or a device op, for the flow arrows
_End = tuple[int, int, int, int]


def _host_line(
    line: Any, base: int, pid: int, event_names: dict[int, str], stats: _StatCache,
    out: list[tuple[Any, ...]], launches: list[_End],
) -> None:  # fmt: skip
    """A host thread's events: the hot loop of a capture (every event of a CPU run is here)."""
    tid, add = line.id, out.append
    kinds: dict[int, tuple[str, str]] = {}  # metadata id: (name, category)
    get, decode = stats.one.get, stats.decode_one
    for ev in line.events:
        meta = ev.metadata_id
        kind = kinds.get(meta)
        if kind is None:
            name = event_names.get(meta, f"event {meta}")
            kind = kinds[meta] = (name, "python_function" if name.startswith("$") else "cpu_op")
        dur = ev.duration_ps // 1000
        ts, dur = base + ev.offset_ps // 1000, dur if dur > 0 else 0
        raw = ev.stats
        if not raw:
            add(("X", kind[1], kind[0], pid, tid, ts, dur, None, None, None))
            continue
        decoded = [get(b) or decode(b) for b in raw]
        if len(decoded) == 1:
            pieces = None if decoded[0][0] == "correlation_id" else [decoded[0][2]]
        else:  # a name twice keeps its first place and its last value, as a dict does
            by_name = {s[0]: s[2] for s in decoded}
            pieces = None if "correlation_id" in by_name else list(by_name.values())
        if pieces is not None:  # the args are the stats: joined from their kept JSON
            add(("X", kind[1], kind[0], pid, tid, ts, dur, None, None, "{" + ",".join(pieces) + "}"))
            continue
        args = _as_dict(decoded)
        corr = _correlation(args)
        cat = kind[1]
        if corr is not None:  # a CUPTI driver callback: the host's launch of a device op
            cat, args = "cuda_driver", {**args, "correlation": corr}
            launches.append((corr, pid, tid, ts))
        add(("X", cat, kind[0], pid, tid, ts, dur, None, None, _dumps(args)))


def _device_line(
    line: Any, base: int, device: int, event_names: dict[int, str], stats: _StatCache,
    out: list[tuple[Any, ...]], ops: list[_End],
) -> None:  # fmt: skip
    """A device stream's events (kernels, copies): each carries its device and stream."""
    from hyperscope.capture.xplane import _device_category

    tid = line.id
    for ev in line.events:
        name = event_names.get(ev.metadata_id, f"event {ev.metadata_id}")
        ts, dur = base + ev.offset_ps // 1000, max(ev.duration_ps // 1000, 0)
        own = _as_dict([stats.one.get(b) or stats.decode_one(b) for b in ev.stats])
        args: dict[str, Any] = {"device": device, "stream": tid, **own}
        corr = _correlation(own)
        if corr is not None:
            args["correlation"] = corr
            ops.append((corr, device, tid, ts))
        out.append(("X", _device_category(name), name, device, tid, ts, dur, None, None, _dumps(args)))


def _correlation(stats: dict[str, Any]) -> int | None:
    corr = stats.get("correlation_id")
    return corr if isinstance(corr, int) and corr > 0 else None


def _dumps(args: dict[str, Any]) -> str:
    return json.dumps(args, separators=(",", ":"), default=str)


#: Distinct stats a plane's cache keeps at most (~300 bytes each).
_STATS_KEPT: Final = 32_768

#: One stat of an event: (its name, its value, ``"name":value`` as JSON).
_Stat = tuple[str, Any, str]


class _StatCache:
    """The stats of one plane, each distinct serialized stat decoded once, with the wire reader's
    rules (``xplane._stat`` and ``_stats``): its name from the plane's stat metadata, a
    ``ref_value`` as the name it refers to, a ``bytes_value`` as hex, text decoded as UTF-8 with
    replacement."""

    def __init__(self, names: dict[int, str]) -> None:
        self._names = names
        self.one: dict[bytes, _Stat] = {}
        self._keys: dict[str, str] = {}
        self._parse = _xstat_class().FromString
        from hyperscope.capture.xplane import _text

        self._text = _text

    def decode(self, raw: Any) -> list[_Stat]:
        get = self.one.get
        return [get(b) or self.decode_one(b) for b in raw]

    def decode_one(self, data: bytes) -> _Stat:
        if len(self.one) >= _STATS_KEPT:  # ids (``_ct``, ``_p``) never repeat: keep the cache small
            self.one.clear()
        st = self._parse(data)
        kind = st.WhichOneof("value")
        value: Any = None if kind is None else getattr(st, kind)
        if kind == "ref_value":  # names another stat metadata: its name is the value
            value = self._names.get(value, "")
        elif kind == "bytes_value":
            value = value.hex()
        elif kind == "str_value":
            value = self._text(value)
        name = self._names.get(st.metadata_id, str(st.metadata_id))
        key = self._keys.get(name)
        if key is None:
            key = self._keys[name] = json.dumps(name)
        text = str(value) if type(value) is int else _dumps_value(value)
        got = self.one[data] = (name, value, f"{key}:{text}")
        return got


def _as_dict(stats: list[_Stat]) -> dict[str, Any]:
    return {name: value for name, value, _ in stats}


def _dumps_value(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)
