"""On-demand capture of running jobs, end to end: real PyTorch ranks (DDP on gloo) that call only
``hyperscope.step()``, profiled while they train by ``capture_running`` and ``hyperscope capture``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hyperscope import JobStatus, Store
from hyperscope.capture import remote
from tests.capture.profiles import query
from tests.conftest import REPO

pytestmark = pytest.mark.capture
pytest.importorskip("torch", reason="on-demand capture is tested on real PyTorch training")

SCRIPT = REPO / "tests" / "data" / "ondemand" / "train_until.py"
HYPERSCOPE = [sys.executable, "-m", "hyperscope"]


@dataclass
class Job:
    home: Path
    stop: Path
    ranks: list[subprocess.Popen[bytes]]


def _wait(what: str, ready: object, timeout: float = 90.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = ready() if callable(ready) else ready
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYPERSCOPE_", "SLURM_"))}
    return {**env, "HYPERSCOPE_HOME": str(home), "PYTHONPATH": str(REPO / "src"), **extra}


@pytest.fixture
def ddp_job(tmp_path: Path) -> Iterator[Job]:
    """Two DDP ranks training until told to stop, as torchrun would start them."""
    home, stop = tmp_path / "home", tmp_path / "stop"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    ranks = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), "--stop", str(stop), "--ddp"], env=_env(home, RANK=str(r), **dist)
        )
        for r in (0, 1)
    ]
    job = Job(home, stop, ranks)
    try:
        _wait("both ranks to be present", lambda: _present(home) == [0, 1])
        yield job
    finally:
        stop.touch()
        for p in ranks:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()


def _present(home: Path, job: str | None = None) -> list[int]:
    """The ranks present of the first running job (of the one named ``job``)."""
    found = [r for r in remote.running(remote.controls(home)) if job is None or job in r.names]
    return sorted(found[0].ranks) if found else []


def _steps(home: Path, job: str, profile: str) -> dict[int, list[str]]:
    with Store(home) as store:
        con = store.profile(job, profile).connect()
        try:
            rows = con.sql(
                "SELECT rank, name FROM events WHERE kind = 'step' ORDER BY rank, ts_ns"
            ).fetchall()
        finally:
            con.close()
    out: dict[int, list[str]] = {}
    for rank, name in rows:
        out.setdefault(rank, []).append(name)
    return out


def test_every_rank_starts_and_stops_on_the_same_step_and_the_profile_is_in_the_store(ddp_job: Job) -> None:
    result = remote.capture_running("train_until", ddp_job.home, steps=5, timeout_s=60)
    assert result.finished and result.ranks == (0, 1) and result.notes == []
    assert result.end_step == result.start_step + 4
    steps = _steps(ddp_job.home, "train_until", result.profile_id)
    expected = [f"ProfilerStep#{s}" for s in range(result.start_step, result.end_step + 1)]
    assert steps == {0: expected, 1: expected}
    with Store(ddp_job.home) as store:
        job = store.job("train_until")
        assert job.status is JobStatus.COMPLETED and [p.id for p in job.profiles] == [result.profile_id]
        assert job.ranks == 2
    assert all(p.poll() is None for p in ddp_job.ranks)  # the training goes on

    # While a capture is being written it is listed (InProgress) and a second one is refused
    long = remote.capture_running("train_until", ddp_job.home, steps=10_000, wait=False, timeout_s=60)
    assert not long.finished
    with Store(ddp_job.home) as store:
        assert store.job("train_until").status is JobStatus.IN_PROGRESS
    _wait(
        "the first rows of the capture", lambda: _steps(ddp_job.home, "train_until", long.profile_id).get(0)
    )
    with pytest.raises(remote.CaptureError, match=r"rank\(s\) 0, 1 of job 'train_until' are being profiled"):
        remote.capture_running("train_until", ddp_job.home, steps=2, timeout_s=30)


def test_the_cli_captures_chosen_ranks_for_a_duration_and_explains_failures(ddp_job: Job) -> None:
    home = ["--home", str(ddp_job.home)]
    done = subprocess.run(
        [*HYPERSCOPE, "capture", "train_until", "--ranks", "1", "--duration", "0.5", *home],
        capture_output=True, text=True, timeout=120, env=_env(ddp_job.home),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "recorded steps " in done.stdout and " of rank(s) 1: profile " in done.stdout
    profile = done.stdout.split("profile ")[1].split()[0]
    steps = _steps(ddp_job.home, "train_until", profile)
    assert list(steps) == [1] and len(steps[1]) >= 1  # about 0.5 s of steps, rank 1 only

    listed = subprocess.run([*HYPERSCOPE, "capture", "--list", "--home", str(ddp_job.home)],
                            capture_output=True, text=True, timeout=60, env=_env(ddp_job.home))  # fmt: skip
    assert "train_until" in listed.stdout and "2/2" in listed.stdout

    # A frozen rank does not answer: the wait ends with its name, and the others are not left armed
    os.kill(ddp_job.ranks[1].pid, signal.SIGSTOP)
    try:
        with pytest.raises(remote.CaptureError, match=r"timed out: rank\(s\) 1 \(on .*, last at step \d+\)"):
            remote.capture_running("train_until", ddp_job.home, steps=3, timeout_s=2)
    finally:
        os.kill(ddp_job.ranks[1].pid, signal.SIGCONT)
    assert not list((ddp_job.home / "control" / "requests").glob("*.json"))

    ddp_job.stop.touch()
    assert [p.wait(timeout=60) for p in ddp_job.ranks] == [0, 0]
    gone = subprocess.run([*HYPERSCOPE, "capture", "train_until", "--steps", "2", *home],
                          capture_output=True, text=True, timeout=60, env=_env(ddp_job.home))  # fmt: skip
    assert gone.returncode == 1
    assert "error: job 'train_until' is not running (the catalog says Completed)" in gone.stderr


def test_a_job_that_never_calls_step_and_one_under_hyperscope_profile(tmp_path: Path) -> None:
    home = tmp_path / "home"
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time, hyperscope as hs\n"
         "hs.start_profiling(hs.ProfilerConfig(job='sleeper'))\nwith hs.annotate('wait'): time.sleep(120)"],
        env=_env(home),
    )  # fmt: skip
    stop = tmp_path / "stop"
    launched = subprocess.Popen(
        [*HYPERSCOPE, "profile", "--job", "launched", "--steps", "0:3", "--", sys.executable, str(SCRIPT),
         "--stop", str(stop)],
        env=_env(home),
    )  # fmt: skip
    try:
        _wait(
            "the sleeper's catalog entry",
            lambda: (home / "catalog.sqlite").exists() and _listed(home, "sleeper"),
        )
        with pytest.raises(
            remote.CaptureError, match="job 'sleeper' is running but none of its ranks has called"
        ):
            remote.capture_running("sleeper", home, steps=2, timeout_s=5)

        # the sleeper is present too (start_profiling starts its watch): the launched job by name
        _wait("the launched job", lambda: _present(home, "launched") == [0])
        result = remote.capture_running("launched", home, steps=4, timeout_s=60)
        with Store(home) as store:
            job = store.job("launched")
            assert len(job.profiles) == 2  # the launcher's steps 0-2, then the on-demand one
        assert _steps(home, "launched", result.profile_id) == {
            0: [f"ProfilerStep#{s}" for s in range(result.start_step, result.start_step + 4)]
        }
        assert query(home, "launched", "SELECT count(*) FROM events WHERE kind = 'step'")[0][0] == 4
    finally:
        stop.touch()
        sleeper.kill()
        assert launched.wait(timeout=60) == 0
        sleeper.wait(timeout=10)


def _listed(home: Path, job: str) -> bool:
    with Store(home) as store:
        return any(j.name == job for j in store.jobs())
