"""`hyperscope health` through the real NVML on a machine with NVIDIA GPUs (skips elsewhere)."""

from __future__ import annotations

import pytest

from hyperscope import health
from hyperscope.health import HealthConfig, Status
from hyperscope.health.sources import FAULTS_ENV

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]


def test_the_real_gpus_are_read_and_healthy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAULTS_ENV, raising=False)
    count = torch.cuda.device_count()
    report = health.run(HealthConfig(expect_gpus=count))
    checks = {r.check: r for r in report.results}
    assert "gpu.count" not in checks, checks
    assert checks["gpu"].status is Status.PASS and "NVIDIA" in checks["gpu"].reason
    assert f"{count} GPU(s) healthy" in checks["gpu"].reason
    assert not [r for r in report.results if r.check.startswith("gpu") and r.status is Status.FAIL]
