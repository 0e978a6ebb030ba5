"""XPlane (TF, JAX, PyTorch/XLA) and TF/JAX trace JSON: decoded, imported, refused when broken."""

from __future__ import annotations

import importlib.util
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hyperscope import Store, TraceFormatError
from hyperscope import timeline as tl
from hyperscope.analysis.latency import launch_latency
from hyperscope.capture.xplane import parse_xspace, plane_rows

# -- a protobuf encoder for hand-made XSpaces (the parser's unit tests) ------------------------


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _int(number: int, v: int) -> bytes:
    return _varint(number << 3) + _varint(v)


def _msg(number: int, body: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(body)) + body


def _str(number: int, text: str) -> bytes:
    return _msg(number, text.encode())


def _double(number: int, v: float) -> bytes:
    return _varint(number << 3 | 1) + struct.pack("<d", v)


def _meta(number: int, mid: int, name: str) -> bytes:
    return _msg(number, _int(1, mid) + _msg(2, _int(1, mid) + _str(2, name)))


START_NS = 1_796_000_000_000_000_000


def _space() -> bytes:
    host = (
        _int(1, 1) + _str(2, "/host:CPU")
        + _meta(4, 1, "MatMul") + _meta(4, 2, "$train.py:12 step")
        + _meta(5, 1, "tf_op") + _meta(5, 2, "flops")
        + _msg(3, _int(1, 77) + _str(2, "python") + _int(3, 1000)
               + _msg(4, _int(1, 1) + _int(2, 5_000_000) + _int(3, 2_000_000)
                      + _msg(4, _int(1, 1) + _str(5, "dense/MatMul:MatMul"))
                      + _msg(4, _int(1, 2) + _double(2, 1.5)))
               + _msg(4, _int(1, 2) + _int(2, 0) + _int(3, 9_000_000)))
    )  # fmt: skip
    gpu = (
        _int(1, 2) + _str(2, "/device:GPU:1")
        + _meta(4, 1, "volta_sgemm_128x64") + _meta(4, 2, "MemcpyHtoD")
        + _meta(5, 1, "correlation_id")
        + _msg(3, _int(1, 7) + _str(2, "Stream #7") + _int(3, 2000)
               + _msg(4, _int(1, 1) + _int(2, 1_000_000) + _int(3, 3_000_000)
                      + _msg(4, _int(1, 1) + _int(3, 42)))
               + _msg(4, _int(1, 2) + _int(2, 500_000) + _int(3, 100_000)))
    )  # fmt: skip
    env = _str(2, "Task Environment") + _meta(5, 1, "profile_start_time")
    env += _msg(6, _int(1, 1) + _int(3, START_NS))
    return _msg(1, host) + _msg(1, gpu) + _msg(1, env) + _str(4, "vm")


def test_an_xspace_becomes_host_ops_python_functions_and_device_activity() -> None:
    planes = parse_xspace(_space(), Path("x.xplane.pb"))
    rows = plane_rows(planes, host_pid=123).to_pylist()
    by_name = {r["name"]: r for r in rows}
    assert set(by_name) == {"MatMul", "$train.py:12 step", "volta_sgemm_128x64", "MemcpyHtoD"}
    op = by_name["MatMul"]
    assert (op["cat"], op["pid"], op["tid"]) == ("cpu_op", 123, 77)
    # relative line times (as TF and JAX write them) count from the profile's start; ps -> ns
    assert (op["ts_ns"], op["dur_ns"]) == (START_NS + 1000 + 5000, 2000)
    assert '"tf_op":"dense/MatMul:MatMul"' in op["args"] and '"flops":1.5' in op["args"]
    assert by_name["$train.py:12 step"]["cat"] == "python_function"
    kernel = by_name["volta_sgemm_128x64"]
    assert (kernel["cat"], kernel["pid"], kernel["tid"]) == ("kernel", 1, 7)
    assert '"correlation":42' in kernel["args"] and '"stream":7' in kernel["args"]
    assert by_name["MemcpyHtoD"]["cat"] == "gpu_memcpy"


def _gpu_space() -> bytes:
    """A GPU run as XLA's CUPTI collector writes it: a TF op on a host thread, the driver calls
    it made on the ``/host:CUPTI`` plane (same thread, named after what they launched), and the
    kernel and copy on the device plane, each pair sharing a correlation id."""
    cpu = (
        _int(1, 1) + _str(2, "/host:CPU") + _meta(4, 1, "_FusedMatMul")
        + _msg(3, _int(1, 77) + _str(2, "tf_Compute") + _int(3, 0)
               + _msg(4, _int(1, 1) + _int(2, 1_000_000) + _int(3, 20_000_000)))
    )  # fmt: skip
    cupti = (
        _int(1, 3) + _str(2, "/host:CUPTI")
        + _meta(4, 1, "volta_sgemm_128x64") + _meta(4, 2, "MemcpyH2D")
        + _meta(5, 1, "device_id") + _meta(5, 2, "correlation_id")
        + _msg(3, _int(1, 77) + _str(2, "Host Threads/77") + _int(3, 0)
               + _msg(4, _int(1, 1) + _int(2, 2_000_000) + _int(3, 4_000_000)
                      + _msg(4, _int(1, 1) + _int(3, 0)) + _msg(4, _int(1, 2) + _int(3, 42)))
               + _msg(4, _int(1, 2) + _int(2, 8_000_000) + _int(3, 3_000_000)
                      + _msg(4, _int(1, 1) + _int(3, 0)) + _msg(4, _int(1, 2) + _int(3, 43))))
    )  # fmt: skip
    gpu = (
        _int(1, 2) + _str(2, "/device:GPU:0")
        + _meta(4, 1, "volta_sgemm_128x64") + _meta(4, 2, "MemcpyH2D") + _meta(5, 1, "correlation_id")
        + _msg(3, _int(1, 7) + _str(2, "Stream #7(Kernel)") + _int(3, 0)
               + _msg(4, _int(1, 1) + _int(2, 15_000_000) + _int(3, 5_000_000)
                      + _msg(4, _int(1, 1) + _int(3, 42)))
               + _msg(4, _int(1, 2) + _int(2, 21_000_000) + _int(3, 1_000_000)
                      + _msg(4, _int(1, 1) + _int(3, 43))))
    )  # fmt: skip
    env = _str(2, "Task Environment") + _meta(5, 1, "profile_start_time")
    env += _msg(6, _int(1, 1) + _int(3, START_NS))
    return _msg(1, cpu) + _msg(1, cupti) + _msg(1, gpu) + _msg(1, env)


def test_cupti_launches_are_linked_to_their_device_ops_for_the_timeline_and_the_latency(
    tmp_path: Path,
) -> None:
    rows = plane_rows(parse_xspace(_gpu_space(), Path("g.xplane.pb")), host_pid=5).to_pylist()
    launches = [r for r in rows if r["cat"] == "cuda_driver"]
    assert [(r["name"], r["pid"], r["tid"]) for r in launches] == [
        ("volta_sgemm_128x64", 5, 77), ("MemcpyH2D", 5, 77)
    ]  # fmt: skip
    assert '"correlation":42' in launches[0]["args"]
    flows = sorted((r["ph"], r["id"], r["pid"]) for r in rows if r["cat"] == "ac2g")
    assert flows == [("f", 42, 0), ("f", 43, 0), ("s", 42, 5), ("s", 43, 5)]
    assert [r["cat"] for r in rows if r["name"] == "_FusedMatMul"] == ["cpu_op"]  # no id: no launch

    path = tmp_path / "gpuhost.xplane.pb"
    path.write_bytes(_gpu_space())
    with Store(tmp_path / "home") as store:
        store.import_traces([path], "gpu")
        profile = store.profile("gpu")
        con = profile.connect()
        pairs = con.sql(
            "SELECT l.name, k.kind, k.ts_ns - l.ts_ns FROM events k JOIN events l ON k.rank = l.rank "
            "AND k.correlation = l.correlation AND l.kind = 'driver' AND l.ph = 'X' "
            "WHERE k.kind IN ('kernel', 'memcpy') AND k.ph = 'X' ORDER BY k.ts_ns"
        ).fetchall()
        assert pairs == [("volta_sgemm_128x64", "kernel", 13_000), ("MemcpyH2D", "memcpy", 13_000)]
        (stats,) = launch_latency(profile).rows
        assert (stats.launches, stats.max_ns) == (2, 13_000)
        index = tl.load(profile)
        arrows = tl.flows(index, [r.id for r in index.rows], START_NS, START_NS + 10**9)
        assert sorted(f["correlation"] for f in arrows) == [42, 43]
        assert [e["role"] for e in tl.links(index, 0, 42)] == ["launch", "kernel"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x0f\x01\x02", "wire type 7 at byte 1"),
        (_space()[:-40], "past the end"),
        (b"\x08" + b"\xff" * 12, "longer than 10 bytes"),
    ],
)
def test_a_broken_xplane_is_refused_and_nothing_is_stored(tmp_path: Path, data: bytes, message: str) -> None:
    bad = tmp_path / "host.xplane.pb"
    bad.write_bytes(data)
    with Store(tmp_path / "home") as store:
        with pytest.raises(TraceFormatError) as err:
            store.import_traces([bad], "bad")
        assert str(bad) in str(err.value) and message in str(err.value)
        assert store.jobs() == []
    assert not list((tmp_path / "home" / "profiles").glob(".staging*"))


def test_a_protobuf_that_is_no_xplane_profile_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.xplane.pb"
    other.write_bytes(_msg(1, _str(2, "Task Environment")))
    with Store(tmp_path / "home") as store, pytest.raises(TraceFormatError, match="no host or device plane"):
        store.import_traces([other], "other")


def test_an_imported_xplane_equals_its_decoded_rows(tmp_path: Path) -> None:
    path = tmp_path / "vm.xplane.pb"
    path.write_bytes(_space())
    with Store(tmp_path / "home") as store:
        report = store.import_traces([path], "xp")
        con = store.profile("xp").connect()
        got = con.sql("SELECT kind, name, ts_ns, dur_ns, rank, node FROM events ORDER BY ts_ns").fetchall()
    assert report.profile.events == 4
    assert ("cpu_op", "MatMul", START_NS + 6000, 2000, 0, "vm") in got
    assert {g[0] for g in got} == {"cpu_op", "python", "kernel", "memcpy"}


@pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="jax is not installed (./dev test installs it)"
)
def test_what_jax_writes_imports_as_xplane_and_as_trace_json(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import jax, jax.numpy as jnp
        f = jax.jit(lambda x: jnp.tanh(x @ x).sum())
        x = jnp.ones((16, 16))
        f(x).block_until_ready()
        jax.profiler.start_trace({str(tmp_path / "log")!r})
        for _ in range(3):
            f(x).block_until_ready()
        jax.profiler.stop_trace()
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = (tmp_path / "log" / "plugins" / "profile").iterdir()
    (plane,) = run.glob("*.xplane.pb")
    (trace,) = run.glob("*.trace.json.gz")
    with Store(tmp_path / "home") as store:
        store.import_traces([run], "dir")  # both files: the XPlane is kept, the same events' JSON not
        store.import_traces([trace], "json")
        dir_names = {n for (n,) in store.profile("dir").connect().sql("SELECT name FROM events").fetchall()}
        ops = store.profile("dir").connect().sql("SELECT count(*) FROM events WHERE kind = 'cpu_op'")
        json_events = store.profile("json").meta.events
        dir_ranks = store.profile("dir").meta.ranks
    assert any(n.startswith("PjitFunction(") for n in dir_names)
    assert ops.fetchall()[0][0] > 0 and json_events > 0
    assert len(dir_ranks) == 1 and dir_ranks[0].source_file == str(plane)


@pytest.mark.parametrize("block", [1, 2, 3, 7, 1 << 20])
def test_only_trace_json_holding_an_empty_event_is_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """Kineto's ``*.pt.trace.json.gz`` shares TF's and JAX's suffix: it is read as it is, not
    parsed whole first, unless an ``{}`` element is found, whichever block boundary it straddles."""
    import gzip

    from hyperscope.store import xplane_importer

    monkeypatch.setattr(xplane_importer, "_SCAN_BYTES", block)
    kineto = b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "args": {}}]}'
    xla = b'{"displayTimeUnit": "ns", "traceEvents": '
    xla += b'[{"ph": "X", "name": "a", "ts": 1, "dur": 2} ,\n   {  \n }]}'
    work = tmp_path / "work"
    work.mkdir()
    plain = tmp_path / "worker0.pt.trace.json.gz"
    plain.write_bytes(gzip.compress(kineto))
    with monkeypatch.context() as m:  # not parsed whole: that is what a Kineto file cost
        m.setattr(xplane_importer, "orjson", None)
        assert xplane_importer.readable_xla_json(plain, work) == plain
    ended = tmp_path / "host.trace.json.gz"
    ended.write_bytes(gzip.compress(xla))
    out = xplane_importer.readable_xla_json(ended, work)
    assert out != ended and out.name == ended.name
    with gzip.open(out) as fh:
        assert b"{}" not in fh.read()
    for text, empty in ((b'{"traceEvents":[ \n{ }]}', True), (b'{"a": {}, "b": [1,{"c":{ }}]}', False)):
        other = tmp_path / f"other-{empty}.trace.json.gz"
        other.write_bytes(gzip.compress(text))
        assert xplane_importer._has_empty_object(other) is empty
    with Store(tmp_path / "home") as store:
        assert store.import_traces([ended], "xla").profile.events == 1
        assert store.import_traces([plain], "kineto").profile.events == 1
