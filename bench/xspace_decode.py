"""XSpace decode cost: protobuf's C parser (``capture/xspace_pb``) against hyperscope's wire reader.

Records one window of a jitted JAX MLP (capture_overhead's) at ``cpu_ops`` detail through
hyperscope's own JAX session, in a child process, then decodes its XSpace into raw rows both ways
in this one, ``--repeats`` times each (best CPU time), checks the rows are equal and prints the
ratio. Both ways split the file into planes and lines (in C, or in Python), then share one row
builder (``capture/xplane_rows``, column-wise). Typing the rows (the importer's SQL) is timed
beside them: the rest of a window's cost.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import MAIN_PYTHON, print_table, write_results

CAPTURE = textwrap.dedent(
    """
    import sys, jax, jax.numpy as jnp
    from hyperscope.capture.xla_backend import XlaSession
    k = jax.random.PRNGKey(0)
    ps = [jax.random.normal(k, (256, 512)) * 0.05, jax.random.normal(k, (512, 512)) * 0.05,
          jax.random.normal(k, (512, 10)) * 0.05]
    def loss(ps, x):
        for w in ps[:-1]:
            x = jnp.tanh(x @ w)
        return jnp.mean((x @ ps[-1]) ** 2)
    @jax.jit
    def update(ps, x):
        return [p - 0.01 * d for p, d in zip(ps, jax.grad(loss)(ps, x))]
    x = jax.random.normal(k, (64, 256))
    for _ in range(5):
        ps = update(ps, x); ps[0].block_until_ready()
    session = XlaSession("jax", cpu_ops=True, device=False, python_stacks=False)
    session.start()
    for _ in range(int(sys.argv[2])):
        ps = update(ps, x); ps[0].block_until_ready()
    open(sys.argv[1], "wb").write(session.stop())
    """
)


def best_cpu(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t0)
    return best, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="JAX steps in the recorded window")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from hyperscope.capture import xplane, xspace_pb
    from hyperscope.capture.parts import typed_events

    if not xspace_pb.available():
        print("protobuf's C (upb) backend is not installed: nothing to compare", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="hyperscope-xspace-") as tmp:
        path = Path(tmp) / "window.xplane.pb"
        subprocess.run([str(MAIN_PYTHON), "-c", CAPTURE, str(path), str(args.steps)], check=True, timeout=900)
        data = path.read_bytes()
    wire_s, wire = best_cpu(
        lambda: xplane.plane_rows(xplane.parse_xspace(data, path), host_pid=1), args.repeats
    )
    fast_s, fast = best_cpu(lambda: xplane.rows_of(data, path, host_pid=1), args.repeats)
    typed_s, _ = best_cpu(lambda: typed_events(fast, 0, "bench"), args.repeats)
    same = fast.equals(wire)
    print(f"\none JAX window: {args.steps} steps, {len(data) / 1e6:.2f} MB of XSpace, {fast.num_rows:,} rows")
    print_table(
        ["decode to raw rows", "CPU (s)", "µs/event"],
        [
            ["wire reader (Python) + row builder", wire_s, wire_s / fast.num_rows * 1e6],
            ["protobuf C parser (xspace_pb) + row builder", fast_s, fast_s / fast.num_rows * 1e6],
            ["typing the rows (DuckDB, either way)", typed_s, typed_s / fast.num_rows * 1e6],
        ],
    )
    print(f"compiled decode: {wire_s / fast_s:.2f}x less CPU than the wire reader; rows equal: {same}")
    write_results(
        "xspace_decode",
        {"steps": args.steps, "events": fast.num_rows, "bytes": len(data), "wire_s": wire_s,
         "compiled_s": fast_s, "typed_s": typed_s, "ratio": wire_s / fast_s, "equal": same},
    )  # fmt: skip
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
