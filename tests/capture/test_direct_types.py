"""TF's and JAX's rows typed by Arrow (``direct_types``) are the rows the importer's SQL stores: on
hand-made rows of every kind that path or the SQL takes, and on real TF and JAX captures."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hyperscope.capture import direct_types, parts, xplane, xspace_pb
from hyperscope.capture.torch_backend import RAW_SCHEMA
from hyperscope.schema.events import EVENT_SCHEMA

#: every column but the lists (grid, block: Arrow sorts no list), which are null on these rows
_ALL = [(f.name, "ascending") for f in EVENT_SCHEMA if not pa.types.is_list(f.type)]

_ROWS = [
    # (ph, cat, name, pid, tid, ts_ns, dur_ns, id, bp, args)
    ("X", "cpu_op", "MatMul", 7, 1, 1_000, 500, None, None, '{"_ct":12,"_p":-3,"n":18446744073709551615}'),
    ("X", "cpu_op", "café ☕ op", 7, 1, 2_000, 0, None, None, '{"_src":"a.py:12 f","hlo_op":"dot.1"}'),
    ("X", "cpu_op", "", 7, 2, 0, 1, None, None, None),
    ("X", None, "no category", 7, 2, 5, 1, None, None, "{}"),
    ("X", "cpu_op", "ProfilerStep#3", 7, 1, 10, 90, None, None, None),
    ("X", "gpu_user_annotation", "ProfilerStep#4", 0, 9, 10, 90, None, None, None),
    ("X", "cpu_op", "[memory]", 7, 1, 11, 0, None, None, None),
    ("X", "python_function", "$a.py:3 f", 7, 1, 12, 4, None, None, '{"a":"x:1.5"}'),
    ("X", "kernel", "fusion.3", 0, 4, 20, 8, None, None, '{"device":0,"stream":4,"correlation":9}'),
    ("X", "gpu_memcpy", "Memcpy DtoH then HtoD", 0, 4, 30, 8, None, None, None),
    ("X", "gpu_memcpy", "MemcpyAsync", 0, 4, 31, 8, None, None, None),
    ("X", "gpu_memset", "Memset", 0, 4, 32, 8, None, None, '{"bytes":64}'),
    ("X", "cuda_driver", "cuLaunchKernel", 7, 1, 19, 2, None, None, '{"correlation_id":9,"correlation":9}'),
    ("X", "cpu_op", "odd values", 7, 1, 40, 1, None, None, '{"f":0.1,"g":1e-05,"h":NaN,"t":"caf\\u00e9"}'),
    ("X", "cpu_op", "tab\there", 7, 1, 41, 1, None, None, '{"q":"say \\"hi\\""}'),
    ("X", "unknown cat", "x", 7, 3, 42, 1, None, None, '{"n":[1,2]}'),
    ("i", "cpu_instant_event", "mark", 7, 1, 43, None, None, None, None),
    ("I", "cpu_op", "instant op", 7, 1, 44, None, None, None, None),
    ("C", "cpu_op", "counter", 7, 1, 45, None, None, None, '{"v":3}'),
    ("s", "ac2g", "ac2g", 7, 1, 19, None, 9, None, None),
    ("f", "ac2g", "ac2g", 0, 4, 20, None, 9, "e", None),
    ("X", "cpu_op", "late", 7, 1, 2**62, 2**40, None, None, '{"k":-9223372036854775808}'),
]  # fmt: skip


def _raw(rows: Sequence[tuple[object, ...]]) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(RAW_SCHEMA.names, r, strict=True)) for r in rows], schema=RAW_SCHEMA
    )


def _same_stored_rows(raw: pa.Table) -> pa.Table:
    """The rows both ways, asserted equal; the Arrow path's, sorted as every part is."""
    by_sql = parts.typed_events(raw, 3, "node-a")
    mixed = parts.typed_xspace_events(raw, 3, "node-a")
    assert mixed.schema.equals(EVENT_SCHEMA) and mixed.num_rows == by_sql.num_rows == raw.num_rows
    assert mixed.sort_by(_ALL).to_pylist() == by_sql.sort_by(_ALL).to_pylist()
    assert mixed.equals(mixed.sort_by([("rank", "ascending"), ("pid", "ascending"),
                                       ("tid", "ascending"), ("kind", "ascending"),
                                       ("ts_ns", "ascending")]))  # fmt: skip
    return mixed


def test_hand_made_rows_of_every_kind_are_stored_as_the_sql_stores_them() -> None:
    raw = _raw(_ROWS)
    _same_stored_rows(raw)
    mask = direct_types.needs_sql(raw)
    by_name = dict(zip(raw["name"].to_pylist(), mask.to_pylist(), strict=True))
    # plain host ops, steps, copies without args: Arrow's; typed args, floats, escapes, flows' bp: SQL's
    assert not any(
        by_name[n] for n in ("MatMul", "café ☕ op", "", "ProfilerStep#3", "Memcpy DtoH then HtoD")
    )
    assert all(by_name[n] for n in ("fusion.3", "Memset", "cuLaunchKernel", "odd values", "tab\there"))
    direct = direct_types.typed_directly(raw.filter(pc.invert(mask)), rank=3, node="node-a")
    got = {r["name"]: r for r in direct.to_pylist()}
    assert got["Memcpy DtoH then HtoD"]["memcpy_kind"] == "DtoH" and got["MemcpyAsync"]["memcpy_kind"] is None
    assert (got["ProfilerStep#3"]["kind"], got["ProfilerStep#4"]["kind"]) == ("step", "gpu_annotation")
    assert (got["mark"]["kind"], got["counter"]["kind"], got["ac2g"]["kind"]) == (
        "instant",
        "counter",
        "flow",
    )


def test_only_arrow_types_a_window_that_needs_no_sql() -> None:
    plain = _raw([r for r in _ROWS if r[2] in ("MatMul", "café ☕ op", "ProfilerStep#3")])
    assert not any(direct_types.needs_sql(plain).to_pylist())
    _same_stored_rows(plain)
    assert parts.typed_xspace_events(_raw([]), 0, "").equals(EVENT_SCHEMA.empty_table())


def test_plain_decimals_are_typed_by_arrow_as_the_sql_writes_them_and_exponents_are_not() -> None:
    # doubles of every magnitude as Python's json writes them (TF's memory events carry some):
    # DuckDB writes a plain decimal back unchanged, an exponent its own way (1e-8 for 1e-08)
    rng = random.Random(7)
    values = [rng.random() * 10.0**e for e in range(-12, 20) for _ in range(8)]
    values += [round(rng.random() * 10.0**e, rng.randint(0, 8)) for e in range(-6, 17) for _ in range(8)]
    values += [0.0, -0.0, 1.0, -1.5, 0.125, 1 / 3, 1e15, 1e16, 5e-324, 1.7976931348623157e308]
    args = [json.dumps({"f": v, "n": [v, 1]}, separators=(",", ":")) for v in values]
    raw = _raw([("X", "cpu_op", "op", 7, 1, i, 1, None, None, a) for i, a in enumerate(args)])
    mask = direct_types.needs_sql(raw).to_pylist()
    assert [m for m, a in zip(mask, args, strict=True) if "e" in a.lower()] == [True] * sum(
        "e" in a.lower() for a in args
    )
    assert mask.count(False) > 300  # the plain decimals: no SQL
    _same_stored_rows(raw)


_CAPTURE = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
from hyperscope.capture.xla_backend import XlaSession
framework, out = sys.argv[1], sys.argv[2]
if framework == "tensorflow":
    import numpy as np, tensorflow as tf
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(4)])
    model.compile("adam", "mse")
    x, y = np.ones((4, 8), "float32"), np.ones((4, 4), "float32")
    step = lambda: model.train_on_batch(x, y)
else:
    import jax, jax.numpy as jnp
    f = jax.jit(lambda x: jnp.tanh(x @ x).sum())
    x = jnp.ones((64, 64))
    step = lambda: f(x).block_until_ready()
step()
session = XlaSession(framework, cpu_ops=True, device=False, python_stacks=False)
session.start()
for _ in range(3):
    step()
raw = session.rows(session.stop())
import pyarrow.parquet as pq
pq.write_table(raw, out)
"""


@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
def test_a_real_capture_is_stored_the_same_both_ways(framework: str, tmp_path: Path) -> None:
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed (./dev test installs it)")
    out = tmp_path / "raw.parquet"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CAPTURE), framework, str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    import pyarrow.parquet as pq

    raw = pq.read_table(out)
    assert raw.num_rows > 10
    assert not any(direct_types.needs_sql(raw).to_pylist())  # a CPU capture: Arrow types all of it
    stored = _same_stored_rows(raw)
    assert "cpu_op" in stored["kind"].to_pylist()


def test_the_pure_python_reader_s_rows_take_the_same_path() -> None:
    from tests.capture.test_xspace_pb import _odd_space

    data = _odd_space()
    raw = xplane.plane_rows(xplane.parse_xspace(data, Path("odd.xplane.pb")), host_pid=7)
    _same_stored_rows(raw)
    if xspace_pb.available():
        assert xplane.rows_of(data, Path("odd.xplane.pb"), host_pid=7).equals(raw)
