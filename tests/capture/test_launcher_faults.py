"""``hyperscope profile`` when profiling fails or the run is stopped: the training's outcome is the
launcher's outcome, and the job says what happened (Stopped when asked to stop, Failed on a crash).

The disk tests mount a tmpfs and read-only bind mounts, so they need root (CI runs as root);
elsewhere they skip and say why.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hyperscope import JobStatus, Store
from hyperscope.store.catalog import RankStatus
from tests.capture.profiles import query
from tests.capture.test_disk_failure import finish, mounted, start, wait_for_parts
from tests.capture.test_launcher import PLAIN, profile
from tests.server.conftest import H200

pytest.importorskip("torch", reason="capture tests need PyTorch (./dev test installs it)")
pytestmark = pytest.mark.capture


def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a filesystem for the test")


def test_a_disk_full_at_the_end_of_training_keeps_the_training_exit_code(tmp_path: Path) -> None:
    """The disk fills as the training ends, with a few pages left: building the timeline index
    mapped files it had no room for (SIGBUS, exit 135, for a training that succeeded)."""
    _needs_root()
    small = tmp_path / "small"
    small.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=16m", "tmpfs", target=small):
        home = small / "home"
        done = profile(
            home, "--job", "full", "--cpu-ops", "--flush-steps", "5", "--flush-min-gap", "0", "--",
            sys.executable, str(PLAIN), "--steps", "40", "--fill", str(small / "filler"),
            "--leave", str(48 * 1024),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert "trained 40 steps" in done.stdout
        assert "Traceback" not in done.stderr and "Bus error" not in done.stderr
        derived = list(home.glob("profiles/*/derived"))
        leftovers = [p for d in derived for p in d.iterdir() if p.name.startswith(".timeline-")]
        assert leftovers == []  # no half-built index left behind
        (small / "filler").unlink()
        with Store(home) as store:  # everything that was stored reads back
            assert store.job("full").status in (JobStatus.COMPLETED, JobStatus.FAILED)
        assert query(home, "full", "SELECT count(*) FROM events WHERE kind = 'step'")[0][0] > 0


def test_a_read_only_home_runs_the_training_unprofiled(tmp_path: Path) -> None:
    """No store yet under a read-only directory, and an existing store behind a read-only mount:
    the command runs (it was refused with exit 1) and keeps its exit code; the launcher says
    profiling was off, and why. (A command that is not Python: nothing would be profiled anyway,
    and it starts in milliseconds.)"""
    _needs_root()
    shutil.copytree(H200, tmp_path / "home")
    view = tmp_path / "view"
    view.mkdir()
    command = [sys.executable, "-c", "import sys; print('trained 3 steps'); sys.exit(3)"]
    with mounted("--bind", str(tmp_path), target=view):
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        for where in (view / "new-home", view / "home"):  # none yet; an existing one
            done = profile(where, "--job", "again", "--", *command)
            assert done.returncode == 3, done.stderr[-2000:]
            assert "trained 3 steps" in done.stdout
            assert "profiling was off for this run" in done.stderr, done.stderr[-2000:]
            assert str(where) in done.stderr and "Traceback" not in done.stderr
    with Store(tmp_path / "home") as store:
        assert [j.name for j in store.jobs()] == ["h200-transformer"]  # nothing was written


def _started(home: Path) -> None:
    """Until the capture has written its first part (the run is under way)."""
    deadline = time.monotonic() + 120
    while not list(home.glob("profiles/*/events/*.parquet")):
        assert time.monotonic() < deadline, "the capture wrote nothing in 120 s"
        time.sleep(0.05)


def _rank(home: Path, job: str) -> tuple[JobStatus, RankStatus, str]:
    with Store(home) as store:
        found = store.job(job)
        _, _, status, message = store.catalog.rank_statuses(found.profiles[0].id)[0]
    return found.status, status, message


def test_sigterm_to_the_training_stops_the_job(tmp_path: Path) -> None:
    """scancel and Slurm's time limit send SIGTERM: a stop asked for, not a crash."""
    home = tmp_path / "home"
    done = profile(
        home, "--job", "term", "--flush-steps", "1", "--flush-min-gap", "0", "--",
        sys.executable, str(PLAIN), "--steps", "50", "--term-at", "4", "--sleep", "0.02",
    )  # fmt: skip
    assert done.returncode == 128 + signal.SIGTERM  # the training's own end, as a shell says it
    job, rank, message = _rank(home, "term")
    assert job is JobStatus.STOPPED and rank is RankStatus.STOPPED
    assert "stopped by SIGTERM" in message
    assert query(home, "term", "SELECT count(*) FROM events WHERE kind = 'step'")[0][0] >= 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_sent_to_the_launcher_stops_the_job(tmp_path: Path, sig: signal.Signals) -> None:
    """SIGTERM (Slurm signals every process of the step) or Ctrl+C to the launcher: Stopped, and
    the partial profile reads back."""
    home = tmp_path / "home"
    # steps enough that the signal always lands in the training (400 steps of 0.05 s once ended
    # before a loaded machine's first part appeared: the job was Completed)
    proc = start(home, "stop", steps=100_000, logs=tmp_path)
    try:
        _started(home)
        proc.send_signal(sig)
        out, err = finish(proc, tmp_path)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err[-3000:]
    assert "trained 100000 steps" not in out
    job, rank, message = _rank(home, "stop")
    assert job is JobStatus.STOPPED and rank is RankStatus.STOPPED, (job, rank, message)
    assert query(home, "stop", "SELECT count(*) FROM events")[0][0] > 0


def test_a_crash_still_fails_the_job(tmp_path: Path) -> None:
    """SIGSEGV is no stop asked for."""
    home = tmp_path / "home"
    proc = start(home, "crash", steps=400, logs=tmp_path)
    try:
        events = wait_for_parts(home, 1, proc, tmp_path)
        assert events.is_dir()
        children = subprocess.run(
            ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=True
        ).stdout.split()
        os.kill(int(children[0]), signal.SIGSEGV)
        finish(proc, tmp_path)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGSEGV
    job, rank, message = _rank(home, "crash")
    assert job is JobStatus.FAILED and rank is RankStatus.FAILED and "signal 11" in message


def test_a_launcher_started_with_sigint_ignored_still_stops_the_training_on_it(tmp_path: Path) -> None:
    """A non-interactive shell's ``cmd &`` starts the launcher with SIGINT ignored, and the
    training inherited that: the forwarded SIGINT did nothing and the job ran to Completed."""
    home = tmp_path / "home"
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited by the launcher, as from `&`
    try:
        proc = start(home, "bg", steps=100_000, logs=tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        _started(home)
        proc.send_signal(signal.SIGINT)
        _, err = finish(proc, tmp_path)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:]
    job, rank, message = _rank(home, "bg")
    assert job is JobStatus.STOPPED and rank is RankStatus.STOPPED, (job, rank, message)
