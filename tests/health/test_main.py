"""``python -m hyperscope.health``, the light entry Slurm runs: its periodic loop picks up a fault
file written after it started, drains through scontrol, and ends with its slurmd or its wrapper."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def _fake_scontrol(bin_dir: Path, calls: Path) -> None:
    bin_dir.mkdir()
    fake = bin_dir / "scontrol"
    fake.write_text(f'#!/bin/bash\necho "$@" >> {calls}\n')  # `show node` prints nothing: not an operator's
    fake.chmod(0o755)


def _until(ready: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_the_loop_sees_a_late_fault_drains_and_ends_with_its_parent(tmp_path: Path) -> None:
    calls, faults = tmp_path / "calls", tmp_path / "faults.json"
    _fake_scontrol(tmp_path / "bin", calls)
    parent = subprocess.Popen(["sleep", "300"])
    argv = [
        sys.executable, "-m", "hyperscope.health", "--loop", "0.2", "--parent", str(parent.pid),
        "--faults-file", str(faults), "--drain", "--node", "n1", "--expect-gpus", "2",
        "--gpu-devices", str(tmp_path), "--path", str(tmp_path), "--min-free-gib", "0",
    ]  # fmt: skip
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    (tmp_path / "nvidia0").touch()
    (tmp_path / "nvidia1").touch()
    loop = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)  # several passes, all healthy: nothing drained
        assert not calls.exists() or "state=drain" not in calls.read_text()
        faults.write_text('{"gpu_count": 1}')
        _until(
            lambda: (
                calls.exists()
                and "update nodename=n1 state=drain reason=hyperscope: gpu" in calls.read_text()
            )
        )
        parent.kill()
        parent.wait()
        assert loop.wait(timeout=60) == 0  # its slurmd is gone: so is the loop
    finally:
        parent.kill()
        loop.kill()
        loop.wait()


def test_the_loop_ends_when_its_wrapper_is_rewritten_and_runs_the_new_one(tmp_path: Path) -> None:
    """A cluster update rewrites the wrapper: the loop ends and runs the new wrapper as slurmd
    would (its node, its slurmd), its pid file gone, so the next loop starts at once."""
    wrapper = tmp_path / "hc.sh"
    wrapper.write_text("v1")
    wrapper.chmod(0o755)
    pid_file, handed = tmp_path / "loop.pid", tmp_path / "handed"
    argv = [sys.executable, "-m", "hyperscope.health", "--loop", "0.2", "--watch", str(wrapper),
            "--pid-file", str(pid_file), "--parent", str(os.getpid()), "--node", "n1",
            "--path", str(tmp_path), "--min-free-gib", "0"]  # fmt: skip
    loop = subprocess.Popen(argv)
    try:
        # written once the loop has read the wrapper's stamp (a loaded machine may take a while)
        _until(lambda: pid_file.exists() and pid_file.read_text().strip() == str(loop.pid))
        time.sleep(0.5)
        assert loop.poll() is None
        wrapper.write_text(
            f'#!/bin/bash\n[ -e {pid_file} ] && echo "pid file left" >> {handed}\nenv >> {handed}\n'
        )
        os.utime(wrapper, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
        assert loop.wait(timeout=60) == 0
        env = handed.read_text()
        assert "pid file left" not in env
        assert "SLURMD_NODENAME=n1\n" in env and f"HYPERSCOPE_SLURMD_PID={os.getpid()}\n" in env
    finally:
        loop.kill()
        loop.wait()


def test_one_run_exits_1_on_a_failure_and_2_on_an_unreadable_fault_file(tmp_path: Path) -> None:
    base = [
        sys.executable,
        "-m",
        "hyperscope.health",
        "--node",
        "n1",
        "--path",
        str(tmp_path),
        "--min-free-gib",
        "0",
    ]
    ok = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    faults = tmp_path / "f.json"
    faults.write_text('{"gpu_count": 1}')
    sick = subprocess.run([*base, "--expect-gpus", "2", "--faults-file", str(faults)], timeout=60)
    assert sick.returncode == 1
    faults.write_text("{not json")
    bad = subprocess.run([*base, "--faults-file", str(faults)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "cannot be read as JSON" in bad.stderr
