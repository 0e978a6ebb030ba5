"""TensorFlow's and JAX's capture on a real NVIDIA GPU: kernels and copies from the XSpace's
device planes, each linked to the CUPTI driver call that launched it.

Part of `./dev gpu-check`. Each framework runs only where its CUDA build is installed and sees a
GPU (`./dev` installs the CPU builds; `HYPERSCOPE_TF_JAX_CUDA` names CUDA builds for it to
install); elsewhere the test skips and says which. The check runs in a child process, so the
suite never imports TensorFlow or JAX itself.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyperscope import JobStatus, Store
from tests.conftest import REPO

pytestmark = pytest.mark.gpu

_SEES_GPU = {
    "tensorflow": "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))",
    "jax": "import jax; print(sum(d.platform == 'gpu' for d in jax.devices()))",
}
_EXAMPLE = {"tensorflow": "train_tf.py", "jax": "train_jax.py"}


def _gpus_seen(framework: str) -> int:
    if not any(Path("/dev").glob("nvidia[0-9]*")):  # before starting a framework: CI has no GPU
        pytest.skip("no NVIDIA GPU on this machine (no /dev/nvidiaN)")
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    done = subprocess.run(
        [sys.executable, "-c", _SEES_GPU[framework]], capture_output=True, text=True, timeout=300
    )
    lines = done.stdout.strip().splitlines()
    return int(lines[-1]) if done.returncode == 0 and lines and lines[-1].isdigit() else 0


@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
def test_kernels_and_copies_are_captured_and_linked_to_their_launches(framework: str, tmp_path: Path) -> None:
    if not _gpus_seen(framework):
        pytest.skip(f"{framework} sees no GPU here (a CPU build, or no CUDA device)")
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPERSCOPE_")}
    done = subprocess.run(
        [sys.executable, "-m", "hyperscope", "profile", "--home", str(home), "--job", framework,
         "--cpu-ops", "--", sys.executable, str(REPO / "examples" / _EXAMPLE[framework]),
         "--no-profile", "--steps", "6"],
        capture_output=True, text=True, timeout=600, env=env, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    with Store(home) as store:
        assert store.job(framework).status is JobStatus.COMPLETED
        con = store.profile(framework).connect()
        kernels, linked, after = con.sql(
            "SELECT count(*), count(l.ts_ns), count(*) FILTER (WHERE k.ts_ns >= l.ts_ns) "
            "FROM events k LEFT JOIN events l ON l.kind IN ('runtime', 'driver') AND l.ph = 'X' "
            "AND l.rank = k.rank AND l.correlation = k.correlation WHERE k.kind = 'kernel'"
        ).fetchall()[0]
        copies = con.sql("SELECT count(*) FROM events WHERE kind = 'memcpy'").fetchall()[0][0]
        steps = con.sql("SELECT count(*) FROM events WHERE kind = 'step'").fetchall()[0][0]
    assert steps == 6
    assert kernels > 10 and copies > 0
    # every kernel CUPTI saw launched from the host is linked, and starts after its launch
    assert linked == kernels and after == kernels, (kernels, linked, after)
