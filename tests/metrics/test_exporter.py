"""The exporter's thin part: GPUs read through the NVML seam (a played GPU here; the real NVML in
tests/metrics/test_prometheus.py and on a GPU machine), a cluster that cannot be read, and the
``hyperscope metrics`` command line."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from hyperscope.capture._nvml import NvmlMissing, NvmlSeam, NvmlUnsupported
from hyperscope.cli import metrics as cli_metrics
from hyperscope.cli.main import app
from hyperscope.metrics import DEFAULT_PORT, Exporter
from hyperscope.metrics.exporter import registry_for
from tests.metrics.test_families import scrape


class PlayedGpus(NvmlSeam):
    """Two GPUs: the second reports no power; XID 79 on GPU 0 at the second poll."""

    def __init__(self) -> None:
        super().__init__()
        self.polls = 0
        self.shut = False

    def init(self) -> None:
        pass

    def shutdown(self) -> None:
        self.shut = True

    def device_count(self) -> int:
        return 2

    def name(self, index: int) -> str:
        return "NVIDIA H200"

    def utilization(self, index: int) -> tuple[float, float]:
        return 90.0 - index, 40.0

    def memory(self, index: int) -> tuple[int, int]:
        return 10 << 30, 141 << 30

    def temperature_c(self, index: int) -> float:
        return 60.0 + index

    def power_w(self, index: int) -> float:
        if index == 1:
            raise NvmlUnsupported("Not Supported")
        return 650.0

    def sm_clock_mhz(self, index: int) -> float:
        return 1980.0

    def ecc_uncorrected(self, index: int) -> int:
        return 0

    def watch_xids(self) -> list[int]:
        return [0]  # GPU 1 cannot report XID events

    def poll_xids(self) -> list[tuple[int, int]]:
        self.polls += 1
        return [(0, 79)] if self.polls == 2 else []


class NoGpu(NvmlSeam):
    def init(self) -> None:
        raise NvmlMissing("NVML not found")


def test_gpus_through_the_seam_with_unsupported_metrics_left_out_and_xids_counted(tmp_path: Path) -> None:
    seam = PlayedGpus()
    exporter = Exporter(tmp_path, None, node="gpu-1", nvml=lambda: seam)
    first = scrape(list(exporter.collect()))
    g0 = (("gpu", "0"), ("name", "NVIDIA H200"), ("node", "gpu-1"))
    g1 = (("gpu", "1"), ("name", "NVIDIA H200"), ("node", "gpu-1"))
    assert first["hyperscope_gpu_power_watts"] == {g0: 650.0}
    assert first["hyperscope_gpu_temperature_celsius"] == {g0: 60.0, g1: 61.0}
    assert first["hyperscope_gpu_xid_errors_total"] == {g0: 0.0}  # watched, none yet; GPU 1 absent
    assert "hyperscope_gpu_last_xid" not in first
    second = scrape(list(exporter.collect()))
    assert second["hyperscope_gpu_xid_errors_total"] == {g0: 1.0}
    assert second["hyperscope_gpu_last_xid"] == {g0: 79.0}
    exporter.close()
    assert seam.shut


def test_no_gpu_and_no_readable_cluster_give_no_such_series(tmp_path: Path) -> None:
    exporter = Exporter(tmp_path, "gone", node="n", nvml=NoGpu)
    got = scrape(list(registry_for(exporter).collect()))
    assert got == {"hyperscope_cluster_known": {(("cluster", "gone"),): 0.0}}
    assert "gone" in exporter.cluster_note and exporter.gpu_note == "NVML not found"


def test_the_command_refuses_an_unknown_cluster_and_documents_its_defaults(tmp_path: Path) -> None:
    assert cli_metrics.DEFAULT_PORT == DEFAULT_PORT
    done = CliRunner().invoke(app, ["metrics", "--cluster", "nope", "--home", str(tmp_path)])
    assert done.exit_code == 1 and "no cluster named 'nope'" in done.output
    shown = CliRunner().invoke(app, ["metrics", "--help"], env={"COLUMNS": "200"})
    assert "127.0.0.1" in shown.output and str(DEFAULT_PORT) in shown.output


def test_public_api() -> None:
    import hyperscope.metrics as m

    assert sorted(m.__all__) == [
        "DEFAULT_PORT", "Exporter", "GpuStat", "cluster_families", "gpu_families", "serve", "step_times",
    ]  # fmt: skip
    assert all(hasattr(m, name) for name in m.__all__)
