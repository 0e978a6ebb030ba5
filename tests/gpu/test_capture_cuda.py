"""hyperscope's own capture on a real NVIDIA GPU: kernels, their launches, copies, GPU utilization.

This is the GPU check of the capture issue (`./dev gpu-check` runs the gpu-marked tests). It runs
the shipped transformer example on CUDA; where PyTorch sees no CUDA device it skips and says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyperscope import JobStatus, Store
from tests.conftest import REPO

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA device: the GPU capture check needs one"
    ),
]


@pytest.fixture(scope="module")
def gpu_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("gpu") / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPERSCOPE_")}
    env["HYPERSCOPE_SAMPLE_INTERVAL_S"] = "0.05"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hyperscope",
            "profile",
            "--home",
            str(home),
            "--job",
            "gpu",
            "--sample-interval",
            "0.05",
            "--",
            sys.executable,
            str(REPO / "examples" / "train_transformer.py"),
            "--device",
            "cuda",
            "--steps",
            "30",
            "--batch",
            "32",
            "--seq",
            "256",
            "--no-profile",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return home


def _rows(home: Path, sql: str) -> list[tuple[object, ...]]:
    with Store(home) as store:
        con = store.profile("gpu").connect()
        try:
            return con.sql(sql).fetchall()
        finally:
            con.close()


def test_kernels_with_launch_configuration(gpu_home: Path) -> None:
    n, with_grid, streams = _rows(
        gpu_home,
        "SELECT count(*), count(*) FILTER (WHERE grid IS NOT NULL AND block IS NOT NULL), "
        "count(DISTINCT stream) FROM events WHERE kind = 'kernel'",
    )[0]
    assert n > 100 and with_grid == n and streams >= 1  # type: ignore[operator]


def test_every_kernel_is_linked_to_the_launch_that_caused_it(gpu_home: Path) -> None:
    # cuBLAS and CUTLASS launch through the driver (cuLaunchKernel): 840 of 10,902 kernels on an H200
    kernels, linked, positive_delay = _rows(
        gpu_home,
        "SELECT count(*), count(r.ts_ns), count(*) FILTER (WHERE k.ts_ns >= r.ts_ns) "
        "FROM events k LEFT JOIN events r ON r.kind IN ('runtime', 'driver') "
        "AND r.correlation = k.correlation "
        "AND r.rank = k.rank WHERE k.kind = 'kernel'",
    )[0]
    assert linked == kernels and positive_delay == kernels  # a kernel starts after its launch


def test_copies_both_ways_with_bytes(gpu_home: Path) -> None:
    copies = dict(
        _rows(gpu_home, "SELECT memcpy_kind, min(bytes) FROM events WHERE kind = 'memcpy' GROUP BY ALL")  # type: ignore[arg-type]
    )
    assert "HtoD" in copies and "DtoH" in copies
    assert all(b > 0 for b in copies.values())  # type: ignore[operator]


def test_gpu_utilization_was_sampled(gpu_home: Path) -> None:
    rows = _rows(
        gpu_home,
        "SELECT device, count(*), max(value) FROM samples WHERE metric = 'gpu_util_pct' GROUP BY device",
    )
    assert rows and all(count > 3 for _, count, _ in rows)  # type: ignore[operator]
    assert max(peak for _, _, peak in rows) > 0  # type: ignore[type-var]
    with Store(gpu_home) as store:
        assert store.job("gpu").status is JobStatus.COMPLETED
        meta = store.profile("gpu").meta
    assert meta.ranks[0].device_properties and meta.ranks[0].device_properties[0]["name"]
