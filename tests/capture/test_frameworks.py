"""TensorFlow (Keras ``model.fit``) and JAX (a jitted loop) profiled by ``hyperscope profile``,
end to end with the real frameworks: steps, annotations, framework ops, the report and the UI."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hyperscope import JobStatus, Store
from hyperscope.server import create_app
from tests.capture.profiles import query
from tests.capture.test_launcher import HYPERSCOPE, profile
from tests.conftest import REPO

pytestmark = pytest.mark.capture
MARKS = "SELECT name, count(*) FROM events WHERE kind = 'annotation' GROUP BY 1"


def _needs(module: str) -> Any:
    return pytest.mark.skipif(
        importlib.util.find_spec(module) is None,
        reason=f"{module} is not installed (./dev test installs hyperscope[tensorflow,jax])",
    )


def _check_served(home: Path, job: str, steps: int) -> None:
    """The UI's dashboard and timeline answer on the profile, with its steps."""
    with Store(home) as store:
        pid = store.profile(job).meta.profile_id
    with TestClient(create_app(home, static_dir=home / "no-bundle"), base_url="http://127.0.0.1:8321") as c:
        dash = c.get(f"/api/profiles/{pid}/dashboard")
        assert dash.status_code == 200, dash.text
        assert dash.json()["tables"]["steps"]["rows"][0]["steps"] >= steps - 1
        rows = c.get(f"/api/profiles/{pid}/timeline/rows")
        for _ in range(600):  # the index may still be building: the UI asks again
            if rows.status_code not in (202, 503):
                break
            time.sleep(0.1)
            rows = c.get(f"/api/profiles/{pid}/timeline/rows")
        assert rows.status_code == 200, rows.text
        assert len(rows.json()["steps"]) == steps


def _check_report(home: Path, job: str) -> dict[str, Any]:
    done = subprocess.run(
        [*HYPERSCOPE, "report", job, "--json", "--home", str(home)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    tables: dict[str, Any] = json.loads(done.stdout)["tables"]
    return tables


@_needs("tensorflow")
def test_keras_fit_is_profiled_with_its_steps_marked_by_the_launcher(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = profile(
        home, "--job", "keras", "--cpu-ops", "--", sys.executable, str(REPO / "examples" / "train_tf.py"),
        "--no-profile", "--steps", "4",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "USDT" not in done.stderr
    with Store(home) as store:
        job = store.job("keras")
    assert job.status is JobStatus.COMPLETED and job.profiles[0].ranks == 1
    steps = query(home, "keras", "SELECT name FROM events WHERE kind = 'step' ORDER BY ts_ns")
    assert steps == [(f"ProfilerStep#{i}",) for i in range(4)]  # the script marks none itself
    marks = dict(query(home, "keras", MARKS))
    assert marks == {"data": 1, "train_batch": 4, "evaluate": 1}
    ops = {n for (n,) in query(home, "keras", "SELECT DISTINCT name FROM events WHERE kind = 'cpu_op'")}
    assert {"ReadVariableOp", "EagerExecute"} <= ops, sorted(ops)[:40]
    assert any("MatMul" in n for n in ops), sorted(ops)[:40]
    # TF's events are on the capture's clock: inside the profile, after the training began
    (lo, hi, first) = query(
        home, "keras",
        "SELECT min(ts_ns) FILTER (WHERE kind = 'cpu_op'), max(ts_ns) FILTER (WHERE kind = 'cpu_op'), "
        "min(ts_ns) FILTER (WHERE kind = 'step') FROM events",
    )[0]  # fmt: skip
    assert first <= lo and hi - lo < 3600 * 10**9
    tables = _check_report(home, "keras")
    assert tables["steps"]["rows"][0]["steps"] >= 3
    assert {r["name"] for r in tables["annotations"]["rows"]} >= {"train_batch"}
    _check_served(home, "keras", 4)


@_needs("jax")
def test_a_jitted_jax_loop_is_profiled_with_its_steps_marked_by_the_launcher(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = profile(
        home, "--job", "jax", "--cpu-ops", "--", sys.executable, str(REPO / "examples" / "train_jax.py"),
        "--no-profile", "--steps", "4",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with Store(home) as store:
        assert store.job("jax").status is JobStatus.COMPLETED
    steps = query(home, "jax", "SELECT name FROM events WHERE kind = 'step' ORDER BY ts_ns")
    assert steps == [(f"ProfilerStep#{i}",) for i in range(4)]  # from StepTraceAnnotation
    marks = dict(query(home, "jax", MARKS))
    assert marks == {"data": 4, "update": 4}
    ops = {n for (n,) in query(home, "jax", "SELECT DISTINCT name FROM events WHERE kind = 'cpu_op'")}
    assert any(n.startswith("PjitFunction(") for n in ops), sorted(ops)[:40]  # the jitted calls
    (lo, first) = query(
        home, "jax",
        "SELECT min(ts_ns) FILTER (WHERE kind = 'cpu_op'), min(ts_ns) FILTER (WHERE kind = 'step') "
        "FROM events",
    )[0]  # fmt: skip
    assert first <= lo
    tables = _check_report(home, "jax")
    assert tables["steps"]["rows"][0]["steps"] >= 3
    _check_served(home, "jax", 4)


@_needs("jax")
def test_an_xspace_that_fails_to_decode_switches_the_profiler_off_and_the_steps_go_on(
    tmp_path: Path,
) -> None:
    # The XSpace is decoded on the writer's thread: a failure there must not stop the profile.
    script = f"""
import jax, jax.numpy as jnp
import hyperscope as hs
from hyperscope.capture import xla_backend

def broken(*args, **kwargs):
    raise RuntimeError("decoder exploded")

xla_backend.xplane.rows_of = broken  # every window: a file (TF) or JAX's bytes
f = jax.jit(lambda x: jnp.tanh(x @ x).sum())
x = jnp.ones((32, 32))
hs.start_profiling(hs.ProfilerConfig(job="broken", home={str(tmp_path / "home")!r}, cpu_ops=True,
                                     flush_every_steps=1, flush_min_gap_s=0, sample_interval_s=0))
for _ in range(6):
    f(x).block_until_ready()
    hs.step()
hs.stop_profiling()
print("trained")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr[-3000:]
    assert "decoder exploded" in done.stderr and "switched off" in done.stderr
    home = tmp_path / "home"
    steps = query(home, "broken", "SELECT count(*) FROM events WHERE kind = 'step'")[0][0]
    ops = query(home, "broken", "SELECT count(*) FROM events WHERE kind = 'cpu_op'")[0][0]
    assert steps == 6 and ops == 0
    with Store(home) as store:
        job = store.job("broken")
        notes = store.profile("broken").meta.ranks[0].notes
    assert job.status is JobStatus.COMPLETED
    assert any("decoder exploded" in n for n in notes), notes
