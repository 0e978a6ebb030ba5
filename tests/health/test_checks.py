"""Health checks on this machine's real disks, memory and (absent) GPUs, with faults injected
through the fault file the checks read (the seam an operator can rehearse failures with too)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from hyperscope import health
from hyperscope.health import Action, HealthConfig, Status
from hyperscope.health.sources import FAULTS_ENV


def _faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, faults: dict[str, object]) -> None:
    path = tmp_path / "faults.json"
    path.write_text(json.dumps(faults))
    monkeypatch.setenv(FAULTS_ENV, str(path))


def _by_check(report: health.HealthReport) -> dict[str, health.CheckResult]:
    return {r.check: r for r in report.results}


def test_a_healthy_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAULTS_ENV, raising=False)
    report = health.run(HealthConfig(paths=(tmp_path,), shared=tmp_path, min_free_bytes=1), node="n1")
    checks = _by_check(report)
    assert report.status is Status.PASS and report.action is Action.NONE and report.drain_reason() == ""
    assert checks[f"disk:{tmp_path}"].reason.endswith("writable")
    assert checks["shared"].status is Status.PASS and checks["memory"].status is Status.PASS
    assert checks["gpu"].status is Status.PASS  # a GPU here, or "no GPU to check"
    assert report.to_dict()["node"] == "n1"


def test_uncorrectable_ecc_fails_the_node_for_replacement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _faults(tmp_path, monkeypatch, {"gpus": [{"index": 0, "name": "NVIDIA H200", "ecc_uncorrectable": 2}]})
    report = health.run(node="n2")
    assert report.status is Status.FAIL and report.action is Action.REPLACE
    assert report.drain_reason() == "hyperscope: gpu0.ecc: 2 uncorrectable ECC error(s)"


def test_pending_retirement_asks_for_a_reboot_and_fatal_xids_for_replacement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _faults(tmp_path, monkeypatch, {"gpus": [{"index": 0, "remapped_rows_pending": True}]})
    report = health.run()
    assert report.status is Status.WARN and report.action is Action.REBOOT
    _faults(
        tmp_path, monkeypatch, {"gpus": [{"index": 0, "xid_errors": [13]}, {"index": 1, "xid_errors": [79]}]}
    )
    checks = _by_check(health.run())
    assert checks["gpu0.xid"].status is Status.WARN and checks["gpu1.xid"].status is Status.FAIL
    assert checks["gpu1.xid"].action is Action.REPLACE


def test_missing_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _faults(tmp_path, monkeypatch, {"gpu_count": 1})
    checks = _by_check(health.run(HealthConfig(expect_gpus=2)))
    assert checks["gpu.count"].status is Status.FAIL
    assert checks["gpu.count"].reason == "1 GPUs visible, 2 expected"


def test_hot_and_throttled_gpu_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _faults(
        tmp_path,
        monkeypatch,
        {
            "gpus": [
                {
                    "index": 0,
                    "temperature_c": 91,
                    "slowdown_temperature_c": 90,
                    "throttle": ["thermal slowdown"],
                }
            ]
        },
    )
    checks = _by_check(health.run())
    assert checks["gpu0.temperature"].status is Status.WARN and "91 °C" in checks["gpu0.temperature"].reason
    assert checks["gpu0.throttle"].reason == "thermal slowdown"


def test_full_disk_missing_shared_and_low_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _faults(
        tmp_path, monkeypatch, {"disk_free_bytes": {str(tmp_path): 10 << 20}, "memory_available_pct": 1.0}
    )
    report = health.run(HealthConfig(paths=(tmp_path, tmp_path / "nope"), shared=tmp_path / "gone"))
    checks = _by_check(report)
    assert checks[f"disk:{tmp_path}"].reason == "0.01 GiB free, at least 1.00 GiB needed"
    assert checks[f"disk:{tmp_path / 'nope'}"].reason == "missing (expected a directory)"
    assert checks["shared"].status is Status.FAIL and "unmounted" in checks["shared"].reason
    assert checks["memory"].status is Status.WARN
    assert report.drain_reason().startswith(f"hyperscope: disk:{tmp_path}: ")


def test_a_read_only_filesystem_is_not_writable(tmp_path: Path) -> None:
    from tests.capture.test_disk_failure import mounted

    target = tmp_path / "ro"
    target.mkdir()
    with mounted("-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", target=target):
        report = health.run(HealthConfig(paths=(target,), min_free_bytes=0))
    result = _by_check(report)[f"disk:{target}"]
    assert result.status is Status.FAIL and "Read-only file system" in result.reason


def test_user_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAULTS_ENV, raising=False)
    folder = tmp_path / "checks"
    folder.mkdir()
    scripts = {
        "ok": "echo links up; exit 0",
        "meh": "echo one link degraded; exit 1",
        "bad": "echo IB port down; echo 'action: reboot'; exit 2",
        "slow": "sleep 30",
        "not-executable": "exit 2",
    }
    for name, body in scripts.items():
        path = folder / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        if name != "not-executable":
            path.chmod(0o755)
    checks = _by_check(health.run(HealthConfig(checks_dir=folder, user_check_timeout_s=0.5)))
    assert (checks["user:ok"].status, checks["user:ok"].reason) == (Status.PASS, "links up")
    assert checks["user:meh"].status is Status.WARN
    assert (checks["user:bad"].status, checks["user:bad"].action) == (Status.FAIL, Action.REBOOT)
    assert (checks["user:slow"].status, checks["user:slow"].reason) == (Status.FAIL, "no answer in 0.5 s")
    assert "user:not-executable" not in checks


def test_injected_failure_and_a_broken_fault_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _faults(tmp_path, monkeypatch, {"fail": {"ib": "mlx5_0 down"}})
    assert health.run().drain_reason() == "hyperscope: ib: mlx5_0 down (injected)"
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    monkeypatch.setenv(FAULTS_ENV, str(bad))
    with pytest.raises(
        ValueError, match=r"broken\.json \(HYPERSCOPE_HEALTH_FAULTS\): cannot be read as JSON"
    ):
        health.run()


def test_node_name_prefers_slurms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURMD_NODENAME", "worker-3")
    assert health.node_name() == "worker-3"
    monkeypatch.delenv("SLURMD_NODENAME")
    assert health.node_name() == os.uname().nodename


def test_the_root_temp_and_home_disks_are_checked_once_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(FAULTS_ENV, raising=False)
    bare = _by_check(health.run(HealthConfig(min_free_bytes=1), node="n1"))
    assert bare["disk:/"].status is Status.PASS and bare["disk:/"].reason.endswith("GiB free")
    # /tmp and home on the root file system here are not reported a second time
    seen = {os.stat(p).st_dev for p in ("/", "/tmp", str(Path.home()))}
    assert len([c for c in bare if c.startswith("disk:")]) == len(seen)
    _faults(tmp_path, monkeypatch, {"disk_free_bytes": {"/": 10 << 20}})
    full = health.run(HealthConfig(min_free_bytes=1 << 30), node="n1")
    assert _by_check(full)["disk:/"].status is Status.FAIL and full.action is Action.REPLACE
    assert "0.01 GiB free, at least 1.00 GiB needed" in _by_check(full)["disk:/"].reason
    assert "disk:/" not in _by_check(health.run(HealthConfig(system_disks=False), node="n1"))


def test_gpu_device_files_are_counted_without_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAULTS_ENV, raising=False)
    monkeypatch.setattr(health.sources, "_nvml_readings", lambda: (None, "NVML unavailable: test"))
    for i in (0, 1):
        (tmp_path / f"nvidia{i}").touch()
    (tmp_path / "nvidiactl").touch()  # not a GPU
    ok = _by_check(health.run(HealthConfig(expect_gpus=2, gpu_devices=tmp_path), node="n1"))
    assert ok["gpu"].status is Status.PASS and f"device files in {tmp_path}" in ok["gpu"].reason
    (tmp_path / "nvidia1").unlink()
    lost = _by_check(health.run(HealthConfig(expect_gpus=2, gpu_devices=tmp_path), node="n1"))
    assert (
        lost["gpu.count"].status is Status.FAIL and lost["gpu.count"].reason == "1 GPUs visible, 2 expected"
    )


def test_dcgm_diag_runs_on_its_own_schedule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in dcgmi on PATH (DCGM is not installed here) counts its runs."""
    monkeypatch.delenv(FAULTS_ENV, raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    runs = tmp_path / "runs"
    (bin_dir / "dcgmi").write_text(f"#!/bin/bash\necho run >> {runs}\necho 'Deployment  Pass'\n")
    (bin_dir / "dcgmi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    config = HealthConfig(dcgm_every_s=3600, dcgm_record=tmp_path / "dcgm.json")
    first = _by_check(health.run(config, node="n1"))["dcgm"]
    second = _by_check(health.run(config, node="n1"))["dcgm"]
    assert runs.read_text().count("run") == 1  # the second check reported the first's result
    assert first.reason == "dcgmi diag -r 1 passed" and second.status is Status.PASS
    assert second.reason.startswith("dcgmi diag -r 1 passed (") and "s ago; next in" in second.reason
    health.run(HealthConfig(), node="n1")  # no schedule: every run diagnoses
    assert runs.read_text().count("run") == 2


def test_a_writable_path_is_probed_again_only_after_probe_every_s(tmp_path: Path) -> None:
    """The periodic loop's schedule: a path found writable is not written to again within
    ``probe_every_s`` (free space still is checked); a failure is never remembered."""
    from tests.capture.test_disk_failure import mounted

    target = tmp_path / "fs"
    target.mkdir()
    every = HealthConfig(paths=(target,), min_free_bytes=0, probe_every_s=3600)
    with mounted("-t", "tmpfs", "-o", "size=1m", "tmpfs", target=target):
        assert _by_check(health.run(every))[f"disk:{target}"].status is Status.PASS
        remount = subprocess.run(["mount", "-o", "remount,ro", str(target)], capture_output=True, text=True)
        assert remount.returncode == 0, remount.stderr
        assert _by_check(health.run(every))[f"disk:{target}"].status is Status.PASS  # not probed yet
        each_run = HealthConfig(paths=(target,), min_free_bytes=0)
        assert _by_check(health.run(each_run))[f"disk:{target}"].status is Status.FAIL
        # the failure forgot the success: the loop's next pass probes again and fails too
        assert _by_check(health.run(every))[f"disk:{target}"].status is Status.FAIL
