"""The compiled XSpace split (protobuf's C parser) gives the wire reader's rows, value for value,
through the one row builder (``xplane_rows``): on hand-made spaces with every kind of stat, on
broken events, and on a real JAX capture at ``cpu_ops`` detail."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from hyperscope.capture import xplane, xspace_pb
from tests.store.test_xplane_import import _double, _gpu_space, _int, _meta, _msg, _space, _str

needs_upb = pytest.mark.skipif(
    not xspace_pb.available(),
    reason="protobuf with its C (upb) backend is not installed (the jax extra brings it)",
)


def _wire_rows(data: bytes) -> pa.Table:
    return xplane.plane_rows(xplane.parse_xspace(data, Path("x.xplane.pb")), host_pid=7)


def _fast_rows(data: bytes) -> pa.Table:
    planes = xspace_pb.planes(data)
    assert planes is not None
    return xplane.plane_rows(planes, host_pid=7)


def _odd_space() -> bytes:
    """Stats of every value kind, a name twice in one event, a ref, text that is not UTF-8, a
    correlation id on a host op with no device op, an event counted instead of placed."""
    stat = lambda mid, body: _msg(4, _int(1, mid) + body)  # noqa: E731
    host = (
        _int(1, 1) + _msg(2, b"/host:CPU")
        + _meta(4, 1, "Op") + _msg(4, _int(1, 2) + _msg(2, _int(1, 2) + _msg(2, b"bad \xff name")))
        + _msg(4, _int(1, 3) + _msg(2, _int(1, 3) + _str(2, "raw") + _str(4, "shown")))
        + _meta(5, 1, "src") + _meta(5, 2, "n") + _meta(5, 3, "f") + _meta(5, 4, "u")
        + _meta(5, 5, "b") + _meta(5, 6, "file.cc") + _meta(5, 7, "correlation_id") + _meta(5, 8, "é")
        + _msg(3, _int(1, 5) + _int(3, 10**9)
               + _msg(4, _int(1, 1) + _int(2, 1500) + _int(3, 2500)
                      + stat(1, _int(7, 6)) + stat(2, _int(4, (1 << 64) - 3)) + stat(3, _double(2, 0.1))
                      + stat(4, _int(3, (1 << 64) - 1)) + stat(5, _msg(6, b"\x00\xab"))
                      + stat(8, _msg(5, b"caf\xc3\xa9 \xfe")) + stat(1, _int(7, 5)) + stat(9, _int(4, 1)))
               + _msg(4, _int(1, 2) + _int(2, 10) + _int(3, 5) + stat(7, _int(3, 99)))
               + _msg(4, _int(1, 3) + _int(5, 4) + _int(3, 1) + stat(2, b""))
               + _msg(4, _int(1, 46) + _int(2, 3000) + _int(3, 7) + stat(7, _int(4, -1)))
               + _msg(4, _int(1, 44) + _int(2, 3000) + _int(3, (1 << 64) - 1000)))
    )  # fmt: skip
    return _msg(1, host) + _msg(1, _str(2, "/device:TPU:3") + _msg(3, _int(1, 2)))


@needs_upb
@pytest.mark.parametrize("make", [_space, _gpu_space, _odd_space])
def test_the_compiled_decode_gives_the_wire_readers_rows(make: object) -> None:
    assert callable(make)
    data = make()
    wire, fast = _wire_rows(data), _fast_rows(data)
    assert fast.num_rows == wire.num_rows > 0
    assert fast.to_pylist() == wire.to_pylist()
    assert fast.equals(wire)


@pytest.mark.parametrize("make", [_space, _gpu_space, _odd_space])
def test_events_decoded_a_few_at_a_time_give_the_same_rows(
    make: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plane's events are decoded ``EVENTS_AT_ONCE`` at a time (to bound the decode's memory):
    pieces of one or two events, cutting lines and launches from their device ops, change nothing."""
    from hyperscope.capture import xplane_rows

    assert callable(make)
    data = make()
    whole = _wire_rows(data)
    for size in (1, 2):
        monkeypatch.setattr(xplane_rows, "EVENTS_AT_ONCE", size)
        assert _wire_rows(data).equals(whole)


@needs_upb
def test_odd_stats_are_decoded_as_the_wire_reader_decodes_them() -> None:
    rows = {r["name"]: r for r in _fast_rows(_odd_space()).to_pylist()}
    op = rows["Op"]
    # "src" twice: its first place, its last value (a ref to stat metadata 5, named "b")
    assert op["args"] == (
        '{"src":"b","n":-3,"f":0.1,"u":18446744073709551615,"b":"00ab","\\u00e9":"caf\\u00e9 \\ufffd","9":1}'
    )
    assert rows["bad \ufffd name"]["cat"] == "cuda_driver"  # a correlation id: a launch, unlinked
    assert rows["shown"]["args"] == '{"n":null}' and rows["shown"]["ts_ns"] == 10**9  # counted, not placed
    assert rows["event 44"]["dur_ns"] == 0
    assert (rows["event 46"]["cat"], rows["event 46"]["args"]) == ("cpu_op", '{"correlation_id":-1}')


def test_without_protobuf_the_wire_reader_reads_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable(data: bytes) -> None:
        return None

    monkeypatch.setattr(xspace_pb, "planes", unavailable)
    got = xplane.rows_of(_gpu_space(), Path("g.xplane.pb"), host_pid=7)
    assert got.equals(_wire_rows(_gpu_space()))


@needs_upb
@pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="jax is not installed (./dev test installs it)"
)
def test_a_real_jax_capture_decodes_to_the_same_events_both_ways(tmp_path: Path) -> None:
    # hyperscope's own JAX session at cpu_ops detail, then with the Python tracer (python_function rows)
    script = textwrap.dedent(
        f"""
        import jax, jax.numpy as jnp
        from hyperscope.capture.xla_backend import XlaSession
        f = jax.jit(lambda x: jnp.tanh(x @ x).sum())
        x = jnp.ones((64, 64))
        f(x).block_until_ready()
        for i, python in enumerate((False, True)):
            session = XlaSession("jax", cpu_ops=True, device=False, python_stacks=python)
            session.start()
            for _ in range(5):
                f(x).block_until_ready()
            data = session.stop()
            assert isinstance(data, bytes), type(data)
            open({str(tmp_path)!r} + f"/w{{i}}.xplane.pb", "wb").write(data)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    cats: set[str] = set()
    for path in sorted(tmp_path.glob("w*.xplane.pb")):
        data = path.read_bytes()
        wire, fast = _wire_rows(data), _fast_rows(data)
        assert fast.num_rows == wire.num_rows > 0
        assert fast.equals(wire), path
        assert xplane.rows_of(data, path, host_pid=7).equals(wire)
        cats |= set(fast.column("cat").to_pylist())
    assert {"cpu_op", "python_function"} <= cats


def _broken_event_space(body: bytes) -> bytes:
    """A host line whose second event's own bytes are broken (the line around it is sound, so
    protobuf's parser, which leaves events serialized, accepts the file)."""
    host = (
        _int(1, 1) + _str(2, "/host:CPU") + _meta(4, 1, "Op")
        + _msg(3, _int(1, 5) + _int(3, 10**9) + _msg(4, _int(1, 1) + _int(2, 10)) + _msg(4, body))
    )  # fmt: skip
    return _msg(1, host)


@pytest.mark.parametrize(
    ("body", "message", "after"),
    [
        (_int(1, 1) + b"\x22\x10ab", "a field of 16 bytes past the end", 4),  # a stat longer than its event
        (_int(1, 1) + b"\x0f", "wire type 7", 3),
        (_int(1, 1) + b"\x10" + b"\xff" * 10 + b"\x01", "a number longer than 10 bytes", 3),
    ],
)
@pytest.mark.parametrize("compiled", [True, False])
def test_a_broken_event_is_refused_with_the_byte_where_it_broke(
    monkeypatch: pytest.MonkeyPatch, body: bytes, message: str, after: int, compiled: bool
) -> None:
    if compiled and not xspace_pb.available():
        pytest.skip("protobuf with its C (upb) backend is not installed")
    if not compiled:
        monkeypatch.setattr(xspace_pb, "planes", lambda data: None)
    data = _broken_event_space(body)
    at = data.index(body) + after
    with pytest.raises(xplane.TraceFormatError) as err:
        xplane.rows_of(data, Path("b.xplane.pb"), host_pid=7)
    assert f"{message} at byte {at}" in str(err.value) and "b.xplane.pb" in str(err.value)
