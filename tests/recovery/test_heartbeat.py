"""Heartbeats from real training processes: hs.step() and checkpoint saves write them, the reader
finds silent jobs; with no directory configured nothing is written."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from hyperscope.recovery import heartbeat

SCRIPT = """
import sys, time
import hyperscope as hs
for _ in range(int(sys.argv[1])):
    hs.step()
    time.sleep(0.05)
"""


def _run(steps: int, env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(steps)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_steps_beat_into_the_directory_and_the_reader_sees_them(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HYPERSCOPE_", "SLURM_"))}
    _run(30, {**base, heartbeat.DIR_ENV: str(tmp_path), "SLURM_JOB_ID": "77", "SLURM_PROCID": "1"})
    (beat,) = heartbeat.read(tmp_path)
    assert (beat.job, beat.rank) == ("77", 1)
    assert 1 <= beat.last_step <= 30  # written at most once a second: the last write's step
    assert heartbeat.hung_jobs(tmp_path, timeout_s=3600) == {}
    later = time.time_ns() + 120 * 10**9
    assert set(heartbeat.hung_jobs(tmp_path, timeout_s=60, now_ns=later)) == {"77"}


def test_one_live_rank_keeps_the_job_alive(tmp_path: Path) -> None:
    old = time.time_ns() - 600 * 10**9
    (tmp_path / "5.0").write_text(f"10 {old}\n")
    (tmp_path / "5.1").write_text(f"12 {time.time_ns()}\n")
    (tmp_path / ".5.1.tmp").write_text("partial")
    (tmp_path / "6.0").write_text(f"3 {old}\n")
    assert set(heartbeat.hung_jobs(tmp_path, timeout_s=60)) == {"6"}


def test_without_a_directory_no_heartbeat_is_written(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("HYPERSCOPE_")}
    _run(3, {**base, "HOME": str(tmp_path)})
    # only the on-demand capture's presence folder (capture.ondemand), emptied at exit
    assert [p.relative_to(tmp_path).as_posix() for p in sorted(tmp_path.rglob("*"))] == [
        ".hyperscope",
        ".hyperscope/control",
        ".hyperscope/control/live",
    ]
    _run(3, {**base, "HOME": str(tmp_path / "off"), "HYPERSCOPE_CAPTURE_WATCH": "0"})
    assert not (tmp_path / "off").exists()


def test_a_beat_carries_the_mean_step_time_and_the_node(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HYPERSCOPE_", "SLURM_"))}
    env = {**base, heartbeat.DIR_ENV: str(tmp_path), "SLURM_JOB_ID": "8", "SLURMD_NODENAME": "n7"}
    _run(30, env)  # 30 steps of >= 50 ms: at least one write after a second of steps
    (beat,) = heartbeat.job_beats(tmp_path, "8", 1)
    assert beat.node == "n7" and beat.rank == 0
    assert 50e6 <= beat.step_ns < 1e9  # each step sleeps 50 ms
    old = heartbeat.parse(3, "12 1700000000000000000\n")  # a file of an older version
    assert (old.step, old.step_ns, old.node) == (12, 0, "")


def test_a_checkpoint_save_is_a_heartbeat(tmp_path: Path) -> None:
    script = (
        "import torch\nfrom hyperscope.checkpoint import Checkpointer\n"
        f"Checkpointer({str(tmp_path / 'ck')!r}).save({{'w': torch.ones(1)}}, 5)\n"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HYPERSCOPE_", "SLURM_"))}
    env = {**base, heartbeat.DIR_ENV: str(tmp_path / "hb"), "SLURM_JOB_ID": "9"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert [b.job for b in heartbeat.read(tmp_path / "hb")] == ["9"]


def test_a_checkpoint_save_is_a_sign_of_life_not_a_step(tmp_path: Path) -> None:
    """Right after a step's write, a save rewrites the file now with the same step and window:
    counted as a step, it made a window of about a millisecond per step (a false straggler)."""
    script = (
        "import time, torch\nimport hyperscope as hs\nfrom hyperscope.checkpoint import Checkpointer\n"
        "ck = Checkpointer(" + repr(str(tmp_path / "ck")) + ")\n"
        "for _ in range(25):\n    hs.step()\n    time.sleep(0.05)\n"
        "hs.step()\nck.save({'w': torch.ones(1)}, 26)\n"
        "print(open(" + repr(str(tmp_path / "hb" / "9.0")) + ").read())\n"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HYPERSCOPE_", "SLURM_"))}
    env = {**base, heartbeat.DIR_ENV: str(tmp_path / "hb"), "SLURM_JOB_ID": "9"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    b = heartbeat.parse(0, done.stdout)
    assert b.step == 26  # the steps taken, the save not among them
    assert 50e6 <= b.step_ns < 1e9  # the window of the steps, not of the instant before the save
