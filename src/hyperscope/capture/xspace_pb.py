"""XSpace split into planes by protobuf's compiled (upb, C) parser: the fast path of ``xplane``.

The wire reader in ``xplane`` walks every byte of a file's structure in Python: one loop turn per
event of a line, 94,000 of them in a 1000-step JAX window at ``cpu_ops`` detail. Here protobuf's C
parser does that walking, with a message class built at run time from a descriptor written below
(xplane.proto's fields, as the profilers write them; no generated code, no TensorFlow). Each line's
events are declared ``repeated bytes`` (a sub-message's wire format), so the parser hands them over
serialized: ``xplane_rows`` decodes them all at once, the same for both readers. The planes come
out in ``xplane``'s shape, with the wire reader's types: names are ``bytes`` decoded as it decodes
them (so a name that is not UTF-8 is not refused here), ids it reads as unsigned are ``uint64``.

Where protobuf is absent, or runs its pure-Python backend (slower than the wire reader), or the
data does not parse, ``available()`` is False or ``planes`` returns None, and ``xplane`` reads the
bytes itself: a broken file is then refused with the byte where it broke.
"""

from __future__ import annotations

from functools import cache
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from hyperscope.capture.xplane import XPlane

#: xplane.proto's messages as (field, number, type, then the message type of a message or map
#: field, the oneof of a scalar, or ""); only what the reader uses (the parser skips the rest).
_MESSAGES: Final[dict[str, list[tuple[str, int, str, str]]]] = {
    "XSpace": [("planes", 1, "message", "XPlane")],
    "XPlane": [
        ("id", 1, "int64", ""), ("name", 2, "bytes", ""), ("lines", 3, "message", "XLine"),
        ("event_metadata", 4, "map", "XEventMetadata"), ("stat_metadata", 5, "map", "XStatMetadata"),
        ("stats", 6, "bytes*", ""),
    ],
    "XLine": [
        ("id", 1, "int64", ""), ("name", 2, "bytes", ""), ("timestamp_ns", 3, "int64", ""),
        ("events", 4, "bytes*", ""), ("display_name", 11, "bytes", ""),
    ],
    "XEventMetadata": [("id", 1, "uint64", ""), ("name", 2, "bytes", ""), ("display_name", 4, "bytes", "")],
    "XStatMetadata": [("id", 1, "uint64", ""), ("name", 2, "bytes", "")],
}  # fmt: skip
_PACKAGE: Final = "hyperscope.xplane"


@cache
def _xspace_class() -> Any:
    """The XSpace message class (None where protobuf's C backend is not there)."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
        from google.protobuf.internal import api_implementation
    except ImportError:
        return None
    if api_implementation.Type() != "upb":  # the pure-Python backend is slower than our reader
        return None
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
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.XSpace"))


def available() -> bool:
    """Whether the compiled path can be used here."""
    try:
        return _xspace_class() is not None
    except Exception:
        return False


def planes(data: bytes) -> list[XPlane] | None:
    """The planes of a serialized XSpace in ``xplane``'s shape, each plane's events joined into
    its ``data``; None where the compiled parser is unavailable or refuses the data."""
    if not available():
        return None
    try:
        return [_plane(pb) for pb in _xspace_class().FromString(data).planes]
    except Exception:  # protobuf's DecodeError, a broken stat: the wire reader says where it broke
        return None


def _plane(pb: Any) -> XPlane:
    from hyperscope.capture.xplane import XLine, XPlane, _stat, _stats, _text

    stat_names = {m.id: _text(m.name) for m in pb.stat_metadata.values()}
    plane = XPlane(
        pb.id, _text(pb.name),
        event_names={m.id: _text(m.display_name) or _text(m.name) for m in pb.event_metadata.values()},
        stat_names=stat_names, stats=_stats([_stat(memoryview(b)) for b in pb.stats], stat_names),
        file_offset=None,
    )  # fmt: skip
    joined: list[bytes] = []
    at = 0
    for pb_line in pb.lines:
        events = list(pb_line.events)
        sizes = list(accumulate(map(len, events), initial=at))
        line = XLine(pb_line.id, _text(pb_line.display_name) or _text(pb_line.name), pb_line.timestamp_ns)
        line.starts, line.ends, at = sizes[:-1], sizes[1:], sizes[-1]
        plane.lines.append(line)
        joined += events
    plane.data = b"".join(joined)
    return plane
