"""`hyperscope health` as users and Slurm run it: a process, its output and its exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def _health(
    *args: str, faults: dict[str, object] | None = None, tmp: Path
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPERSCOPE_")}
    if faults is not None:
        (tmp / "faults.json").write_text(json.dumps(faults))
        env["HYPERSCOPE_HEALTH_FAULTS"] = str(tmp / "faults.json")
    return subprocess.run(
        [sys.executable, "-m", "hyperscope", "health", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_healthy_node_exits_zero_with_a_table(tmp_path: Path) -> None:
    done = _health("--path", str(tmp_path), "--min-free-gib", "0", "--node", "n1", tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "health of n1: pass" in done.stdout and f"disk:{tmp_path}" in done.stdout


def test_failing_node_exits_one_and_says_why_in_json(tmp_path: Path) -> None:
    done = _health("--json", faults={"gpus": [{"index": 0, "ecc_uncorrectable": 3}]}, tmp=tmp_path)
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert (report["status"], report["action"]) == ("fail", "replace")
    assert {
        "check": "gpu0.ecc",
        "status": "fail",
        "reason": "3 uncorrectable ECC error(s)",
        "action": "replace",
    } in report["results"]


def test_an_unreadable_fault_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "faults.json").write_text("[1, 2")
    env = {**os.environ, "HYPERSCOPE_HEALTH_FAULTS": str(tmp_path / "faults.json")}
    done = subprocess.run(
        [sys.executable, "-m", "hyperscope", "health"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 2
    assert "faults.json (HYPERSCOPE_HEALTH_FAULTS): cannot be read as JSON" in done.stderr
