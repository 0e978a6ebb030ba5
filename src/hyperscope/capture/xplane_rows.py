"""The one builder of an XSpace's raw rows: its events and their stats decoded column-wise.

Both readers of an XSpace (``xplane``'s wire reader, ``xspace_pb``'s compiled parser) give the
planes in one shape: each line's events left as serialized XEvent messages, found but not decoded.
Decoding them one by one in Python (a tuple and a few dict lookups per event, a cache lookup per
stat) was most of a TF or JAX window's cost: ~5 us an event, 0.47 s of CPU for a 1000-step JAX
window at ``cpu_ops`` detail, paid by the training process. Here every event of a plane is decoded
at once, field by field, with numpy (a message's fields are walked in parallel over all messages:
as many passes as the longest message has fields), and each stat's ``"name":value`` JSON is made
by Arrow's kernels, or once per distinct value where only Python can write it (text, refs, floats):
0.11 s for that window (best of 7; ``bench/README.md``).

Rows are those the per-event rules give, value for value (``tests/capture/test_xspace_pb.py``
holds both readers equal, on hand-made spaces with every kind of stat and on real captures):

- a host event's ``args`` are its stats as a JSON object, in their order, a name given twice in
  its first place with its last value (as a dict keeps them: JAX's thunks give ``_src`` twice);
  ``None`` without stats;
- an event that carries a ``correlation_id`` (a launch: ``cuda_driver``, linked to its device op)
  or lies on a device plane (``device`` and ``stream`` come first in its ``args``) is built by
  those rules in Python, one event at a time: none on a CPU capture, a GPU's launches and kernels;
- bytes that are no protobuf raise ``xplane.Broken`` with where they broke.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hyperscope.capture.torch_backend import RAW_SCHEMA
from hyperscope.capture.xplane import (
    _DEVICE_PLANE,
    _EPOCH_NS_MIN,
    _SKIPPED_PLANES,
    Broken,
    XPlane,
    _device_category,
    _text,
    start_time_ns,
)

__all__ = ["rows"]

#: (correlation, pid, tid, ts) of a launch or a device op, for the flow arrows
_End = tuple[int, int, int, int]

_NULL_TEXT: Final = pa.scalar(None, pa.string())

#: XEvent's fields and XStat's (xplane.proto)
_EV_META, _EV_OFFSET, _EV_DURATION, _EV_STATS = 1, 2, 3, 4
#: events decoded together (``_plane_rows``)
EVENTS_AT_ONCE: Final = 16_384
_ST_META, _ST_DOUBLE, _ST_UINT, _ST_INT, _ST_STR, _ST_BYTES, _ST_REF = 1, 2, 3, 4, 5, 6, 7


def rows(planes: list[XPlane], *, host_pid: int) -> pa.Table:
    """Every timed event of the planes as raw rows (``RAW_SCHEMA``), in the epoch-ns clock of the
    profiler (XLine timestamps are wall-clock ns), then the ``ac2g`` flows of linked launches."""
    start = start_time_ns(planes)
    tables: list[pa.Table] = []
    #: (correlation, pid, tid, ts) of host launches (False) and device ops (True)
    ends: dict[bool, list[_End]] = {False: [], True: []}
    buffers: dict[int, _Buffer] = {}  # the wire reader's planes share the file's bytes
    for plane in planes:
        if plane.name.startswith(_SKIPPED_PLANES):
            continue
        device = _DEVICE_PLANE.match(plane.name)
        if not device and not plane.name.startswith("/host:"):
            continue
        pid = int(device.group(1)) if device else host_pid
        if not any(line.starts for line in plane.lines):
            continue
        buf = buffers.get(id(plane.data))
        if buf is None:
            buf = buffers[id(plane.data)] = _Buffer(plane)
        table = _plane_rows(
            plane, buf, start, pid, on_device=device is not None, ends=ends[device is not None]
        )
        if table.num_rows:
            tables.append(table)
    # the arrow launch -> device op, as Kineto's ac2g flow events: where both ends were recorded
    linked = {c for c, *_ in ends[False]} & {c for c, *_ in ends[True]}
    flows: list[tuple[Any, ...]] = []
    for on_device, ph, bp in ((False, "s", None), (True, "f", "e")):
        flows += [
            (ph, "ac2g", "ac2g", p, t, ts, None, c, bp, None)
            for c, p, t, ts in ends[on_device]
            if c in linked
        ]
    if flows:
        columns = zip(*flows, strict=True)
        arrays = [pa.array(c, type=f.type) for c, f in zip(columns, RAW_SCHEMA, strict=True)]
        tables.append(pa.Table.from_arrays(arrays, schema=RAW_SCHEMA))
    if not tables:
        return RAW_SCHEMA.empty_table()
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


class _Buffer:
    """A plane's bytes as numpy (padded, so that a number read near the end stays in bounds), and
    how a position in them is named in an error."""

    def __init__(self, plane: XPlane) -> None:
        self.data = np.frombuffer(bytes(plane.data) + bytes(16), np.uint8)
        self._offset = plane.file_offset

    def where(self, pos: int) -> str:
        return f"byte {pos + self._offset}" if self._offset is not None else f"byte {pos} of a plane's events"


def _varints(buf: _Buffer, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The base-128 numbers at ``pos``: (their values as uint64, their lengths in bytes). Byte by
    byte over the numbers not yet ended (most end after one or two)."""
    byte = buf.data[pos]
    value = (byte & 0x7F).astype(np.uint64)
    size = np.ones(len(pos), np.int64)
    going = np.nonzero(byte & 0x80)[0]
    for k in range(1, 10):
        if not len(going):
            return value, size
        byte = buf.data[pos[going] + k]
        value[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        size[going] += 1
        going = going[(byte & 0x80) != 0]
    if len(going):
        raise Broken(f"a number longer than 10 bytes at {buf.where(int(pos[going[0]]))}")
    return value, size


def _walk(buf: _Buffer, starts: np.ndarray, ends: np.ndarray) -> Iterator[tuple[np.ndarray, ...]]:
    """The fields of the messages at ``starts``..``ends``, all messages at once: the first field of
    each, then the second of those that have one, ...: (message, field number, wire type, value:
    a number, or a length-delimited field's size, and where its value begins)."""
    idx = np.nonzero(starts < ends)[0]
    pos, end = starts[idx].astype(np.int64), ends[idx].astype(np.int64)
    while len(idx):
        key, size = _varints(buf, pos)
        pos = pos + size
        number, wire = (key >> np.uint64(3)).astype(np.int64), (key & np.uint64(7)).astype(np.int8)
        bad = ~np.isin(wire, (0, 1, 2, 5))
        if bad.any():
            at = int(np.argmax(bad))
            raise Broken(f"wire type {wire[at]} at {buf.where(int(pos[at]))} (not a protobuf, or damaged)")
        value = np.zeros(len(idx), np.uint64)
        nxt = pos + np.where(wire == 1, 8, 4)
        numbers = (wire == 0) | (wire == 2)
        if numbers.any():
            v, n = _varints(buf, pos[numbers])
            value[numbers] = v
            nxt[numbers] = pos[numbers] + n
        at = nxt.copy()  # a length-delimited value begins after its size; others where they are
        at[~numbers] = pos[~numbers]
        sized = wire == 2
        room = (end - nxt).astype(np.uint64)
        over = (nxt > end) | (sized & (value > room))
        if over.any():
            i = int(np.argmax(over))
            what = f"a field of {value[i]} bytes" if sized[i] else "a field"
            raise Broken(f"{what} past the end at {buf.where(int(nxt[i] if sized[i] else pos[i]))}")
        nxt[sized] += value[sized].astype(np.int64)
        yield idx, number, wire, value, at
        more = nxt < end
        idx, pos, end = idx[more], nxt[more], end[more]


def _put(out: np.ndarray, idx: np.ndarray, sel: np.ndarray, values: np.ndarray) -> None:
    """A field's values into their messages' places: a later field of a message overwrites an
    earlier one (protobuf's rule for a scalar given twice, and for a oneof)."""
    if sel.any():
        out[idx[sel]] = values[sel]


class _Stats:
    """The stats of a plane's events: each one's name and value, and its ``"name":value`` JSON."""

    def __init__(self, buf: _Buffer, plane: XPlane, starts: np.ndarray, ends: np.ndarray) -> None:
        self.buf, self.names = buf, plane.stat_names
        n = len(starts)
        self.meta = np.zeros(n, np.uint64)
        self.kind = np.zeros(n, np.int8)  # which value it holds (0: none)
        self.value = np.zeros(n, np.uint64)  # a number, or a text's size
        self.at = np.zeros(n, np.int64)
        for idx, number, wire, value, at in _walk(buf, starts, ends):
            _put(self.meta, idx, (number == _ST_META) & (wire == 0), value)
            chosen = (
                ((number == _ST_DOUBLE) & (wire == 1))
                | (((number == _ST_UINT) | (number == _ST_INT) | (number == _ST_REF)) & (wire == 0))
                | (((number == _ST_STR) | (number == _ST_BYTES)) & (wire == 2))
            )
            _put(self.kind, idx, chosen, number)
            _put(self.value, idx, chosen, value)
            _put(self.at, idx, chosen, at)
        metas, self.meta_of = np.unique(self.meta, return_inverse=True)
        self.meta_names = [self.names.get(int(m), str(int(m))) for m in metas]

    def name(self, j: int) -> str:
        return self.meta_names[int(self.meta_of[j])]

    def python_value(self, j: int) -> Any:
        """A stat's value by the wire reader's rules (``xplane._stat``, ``_stats``)."""
        kind, value, at = int(self.kind[j]), int(self.value[j]), int(self.at[j])
        if kind in (_ST_UINT, _ST_INT):
            return value - (1 << 64) if kind == _ST_INT and value >= 1 << 63 else value
        if kind == _ST_REF:  # names another stat metadata: its name is the value
            return self.names.get(value, "")
        if kind == _ST_DOUBLE:
            return struct.unpack("<d", self.buf.data[at : at + 8].tobytes())[0]
        if kind in (_ST_STR, _ST_BYTES):
            raw = self.buf.data[at : at + value].tobytes()
            return _text(raw) if kind == _ST_STR else raw.hex()
        return None

    def pieces(self) -> pa.Array:
        """Each stat's ``"name":value`` as JSON, as Python's ``json.dumps`` writes it."""
        n = len(self.kind)
        keys = pa.array([json.dumps(m) + ":" for m in self.meta_names], pa.string()).take(self.meta_of)
        groups: list[tuple[np.ndarray, pa.Array]] = []
        for kind, numpy_type in ((_ST_UINT, np.uint64), (_ST_INT, np.int64)):
            where = np.nonzero(self.kind == kind)[0]
            groups.append((where, pc.cast(pa.array(self.value[where].view(numpy_type)), pa.string())))
        for kinds in ((_ST_REF,), (_ST_DOUBLE,), (0,)):  # few distinct values: each written once
            where = np.nonzero(np.isin(self.kind, kinds))[0]
            if not len(where):
                continue
            key = self.value[where] if kinds != (_ST_DOUBLE,) else self._doubles(where)
            _, inverse = np.unique(key, return_inverse=True)
            first = where[np.unique(inverse, return_index=True)[1]]
            texts = [_dumps(self.python_value(int(j))) for j in first]
            groups.append((where, pa.array(texts, pa.string()).take(pa.array(inverse))))
        where = np.nonzero(np.isin(self.kind, (_ST_STR, _ST_BYTES)))[0]
        if len(where):  # text: one at a time (TF's op names; none in a JAX capture)
            groups.append((where, pa.array([_dumps(self.python_value(int(j))) for j in where], pa.string())))
        order = np.concatenate([w for w, _ in groups])
        values = pa.concat_arrays([t for _, t in groups])
        place = np.empty(n, np.int64)
        place[order] = np.arange(n)
        return pc.binary_join_element_wise(keys, values.take(pa.array(place)), "")

    def _doubles(self, where: np.ndarray) -> np.ndarray:
        """The doubles' 8 bytes, as one number each (equal bits: equal text)."""
        at = self.at[where]
        bits: np.ndarray = self.buf.data[at[:, None] + np.arange(8)].copy().view(np.uint64).ravel()
        return bits


class _Events:
    """A plane's events, decoded: per event its metadata id, offset and duration (ps), and where
    its stats lie (``stats``, the stats of every event, each event's together, in their order)."""

    def __init__(self, buf: _Buffer, plane: XPlane, starts: np.ndarray, ends: np.ndarray) -> None:
        n = self.n = len(starts)
        self.meta, self.offset, self.duration = (np.zeros(n, np.uint64) for _ in range(3))
        spans: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (event, start, size) of a stat
        for idx, number, wire, value, at in _walk(buf, starts, ends):
            varint = wire == 0
            _put(self.meta, idx, varint & (number == _EV_META), value)
            _put(self.offset, idx, varint & (number == _EV_OFFSET), value)
            _put(self.duration, idx, varint & (number == _EV_DURATION), value)
            sel = (wire == 2) & (number == _EV_STATS)
            spans.append((idx[sel], at[sel], value[sel].astype(np.int64)))
        if spans:
            event, at, size = (np.concatenate(c) for c in zip(*spans, strict=True))
        else:
            event = at = size = np.zeros(0, np.int64)
        order = np.argsort(event, kind="stable")  # each event's stats together, in their order
        self.stat_event, at = event[order], at[order]
        self.stats = _Stats(buf, plane, at, at + size[order])
        self.first_stat = np.zeros(n + 1, np.int64)  # event i's stats: first_stat[i]..first_stat[i + 1]
        np.cumsum(np.bincount(self.stat_event, minlength=n), out=self.first_stat[1:])


def _plane_rows(
    plane: XPlane, buf: _Buffer, start: int, pid: int, *, on_device: bool, ends: list[_End]
) -> pa.Table:
    """The plane's events as raw rows, ``EVENTS_AT_ONCE`` at a time: the decoding's arrays are
    ~1.5 KB an event, and a 1000-step JAX window at ``cpu_ops`` detail holds 98k events, whose
    arrays all at once raised the profiled process's peak by 150 MB."""
    lines = [line for line in plane.lines if line.starts]
    line_of = np.repeat(np.arange(len(lines)), [len(line.starts) for line in lines])
    starts = np.concatenate([np.asarray(line.starts, np.int64) for line in lines])
    stops = np.concatenate([np.asarray(line.ends, np.int64) for line in lines])
    bases = np.array(
        [line.timestamp_ns + (start if line.timestamp_ns < _EPOCH_NS_MIN else 0) for line in lines], np.int64
    )
    tids = np.array([line.id for line in lines], np.int64)
    tables = []
    for a, b in _pieces(len(starts), EVENTS_AT_ONCE):
        of = line_of[a:b]
        piece = _some_rows(plane, buf, pid, starts[a:b], stops[a:b], bases[of], tids[of], on_device=on_device,
                           ends=ends)  # fmt: skip
        tables.append(piece)
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _pieces(n: int, size: int) -> list[tuple[int, int]]:
    return [(a, min(n, a + size)) for a in range(0, n, size)]


def _some_rows(
    plane: XPlane,
    buf: _Buffer,
    pid: int,
    starts: np.ndarray,
    stops: np.ndarray,
    bases: np.ndarray,
    tid: np.ndarray,
    *,
    on_device: bool,
    ends: list[_End],
) -> pa.Table:
    events = _Events(buf, plane, starts, stops)
    n, stats = events.n, events.stats
    ts = bases + events.offset.view(np.int64) // 1000
    dur = np.maximum(events.duration.view(np.int64) // 1000, 0)
    metas, meta_of = np.unique(events.meta, return_inverse=True)
    names = [plane.event_names.get(int(m), f"event {int(m)}") for m in metas]
    if on_device:
        cats = [_device_category(name) for name in names]
    else:
        cats = ["python_function" if name.startswith("$") else "cpu_op" for name in names]
    name_col = pa.array(names, pa.string()).take(pa.array(meta_of))
    cat_col = pa.array(cats, pa.string()).take(pa.array(meta_of))
    # built one at a time: a device's events, and a launch's (a host event with a correlation_id)
    slow = np.ones(n, bool) if on_device else _launches(stats, events.stat_event, n)
    args_col = pa.nulls(n, pa.string()) if slow.all() else _args(stats, events.stat_event, n)
    if slow.any():
        slow_cats, slow_args = [], []
        for i in np.nonzero(slow)[0]:
            own = {stats.name(j): stats.python_value(j) for j in range(*events.first_stat[i : i + 2])}
            cat, args = _by_the_rules(own, cats[meta_of[i]], pid, int(tid[i]), int(ts[i]), on_device, ends)
            slow_cats.append(cat)
            slow_args.append(args)
        mask = pa.array(slow)
        cat_col = pc.replace_with_mask(cat_col, mask, pa.array(slow_cats, pa.string()))
        args_col = pc.replace_with_mask(args_col, mask, pa.array(slow_args, pa.string()))
    columns = {
        "ph": pa.repeat(pa.scalar("X"), n), "cat": cat_col, "name": name_col,
        "pid": pa.repeat(pa.scalar(pid, pa.int64()), n), "tid": pa.array(tid), "ts_ns": pa.array(ts),
        "dur_ns": pa.array(dur), "id": pa.nulls(n, pa.int64()), "bp": pa.nulls(n, pa.string()),
        "args": args_col,
    }  # fmt: skip
    return pa.Table.from_arrays([columns[f.name] for f in RAW_SCHEMA], schema=RAW_SCHEMA)


def _launches(stats: _Stats, stat_event: np.ndarray, n: int) -> np.ndarray:
    """Host events with a stat named ``correlation_id``: maybe CUPTI's driver callbacks (launches)."""
    slow = np.zeros(n, bool)
    corr = [i for i, name in enumerate(stats.meta_names) if name == "correlation_id"]
    if corr:
        slow[stat_event[np.isin(stats.meta_of, corr)]] = True
    return slow


def _args(stats: _Stats, stat_event: np.ndarray, n: int) -> pa.Array:
    """Each event's stats as a JSON object (null without any), as a dict of them is written: a name
    given twice keeps its first place and takes its last value (JAX's thunks give ``_src`` twice)."""
    pieces = stats.pieces()
    names = {name: i for i, name in enumerate(dict.fromkeys(stats.meta_names))}
    name_id = np.array([names[m] for m in stats.meta_names], np.int64)[stats.meta_of]
    pairs = stat_event * len(names) + name_id
    order = np.argsort(pairs, kind="stable")  # each (event, name) together, in the stats' order
    ranked = pairs[order]
    first = np.ones(len(ranked), bool)
    first[1:] = ranked[1:] != ranked[:-1]
    if not first.all():
        last = np.ones(len(ranked), bool)
        last[:-1] = first[1:]
        keep = np.zeros(len(pairs), bool)
        keep[order[first]] = True
        source = np.arange(len(pairs))
        source[order[first]] = order[last]  # the first place, the last value
        pieces, stat_event = pieces.take(pa.array(source[keep])), stat_event[keep]
    per_event = np.bincount(stat_event, minlength=n)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(per_event, out=offsets[1:])
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), pieces), ",")
    objects = pc.binary_join_element_wise("{", joined, "}", "")
    return pc.if_else(pa.array(per_event > 0), objects, _NULL_TEXT)


def _by_the_rules(
    own: dict[str, Any], cat: str, pid: int, tid: int, ts: int, on_device: bool, ends: list[_End]
) -> tuple[str, str | None]:
    """One event's category and ``args``: a device op's device and stream first; a host event
    with a correlation id is a CUPTI driver callback, the host's launch of a device op."""
    corr = own.get("correlation_id")
    corr = corr if isinstance(corr, int) and corr > 0 else None
    args: dict[str, Any] = {"device": pid, "stream": tid, **own} if on_device else own
    if corr is not None:
        if not on_device:
            cat, args = "cuda_driver", {**args}
        args["correlation"] = corr
        ends.append((corr, pid, tid, ts))
    return cat, (_dumps(args) if args else None)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)
