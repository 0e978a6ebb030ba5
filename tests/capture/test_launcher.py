"""``hyperscope profile -- CMD`` on real commands: plain scripts, failures, kills, torchrun."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hyperscope import JobStatus, Store
from hyperscope.store.catalog import RankStatus
from tests.capture.profiles import query
from tests.conftest import REPO

pytest.importorskip("torch", reason="capture tests need PyTorch (./dev test installs it)")
pytestmark = pytest.mark.capture

PLAIN = REPO / "tests" / "data" / "capture" / "plain_train.py"
HYPERSCOPE = [sys.executable, "-m", "hyperscope"]


def profile(home: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """The launcher on a command. A run that hangs is made to print every thread's stack (SIGABRT
    with faulthandler on) before the test fails, so a hang in CI says where it was."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPERSCOPE_")}
    env["PYTHONFAULTHANDLER"] = "1"
    argv = [*HYPERSCOPE, "profile", "--home", str(home), *args]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGABRT)
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"hung for {timeout} s: {argv}\nstdout: {out[-3000:]}\nstderr: {err[-20000:]}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_unmodified_script_gets_steps_from_its_optimizer(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = profile(home, "--job", "plain", "--steps", "1:4", "--cpu-ops", "--", sys.executable, str(PLAIN))
    assert done.returncode == 0, done.stderr
    assert "trained 6 steps" in done.stdout
    assert "job plain is Completed" in done.stderr
    steps = query(home, "plain", "SELECT name FROM events WHERE kind = 'step' ORDER BY ts_ns")
    assert steps == [("ProfilerStep#1",), ("ProfilerStep#2",), ("ProfilerStep#3",)]
    # Steps are marked after step() returns, so every recorded optimizer step lies inside one
    # step: marked from inside its record_function, a step restarted Kineto under an open
    # record_function, whose end was then written into freed memory (SIGSEGV now and then).
    outside = query(
        home, "plain",
        "SELECT o.ts_ns, o.dur_ns FROM events o WHERE o.name = 'Optimizer.step#SGD.step' AND NOT EXISTS ("
        " SELECT 1 FROM events s WHERE s.kind = 'step'"
        " AND s.ts_ns <= o.ts_ns AND o.ts_ns + o.dur_ns <= s.ts_ns + s.dur_ns)",
    )  # fmt: skip
    assert outside == []
    sgd = query(home, "plain", "SELECT count(*) FROM events WHERE name = 'Optimizer.step#SGD.step'")
    assert sgd[0][0] == 2 * 3  # two optimizers, three steps
    ops = query(home, "plain", "SELECT count(*) FROM events WHERE kind = 'cpu_op' AND name = 'aten::addmm'")
    assert ops[0][0] == 3 * 2  # two Linear layers a step, three steps
    with Store(home) as store:
        profile_ = store.profile("plain")
    assert profile_.meta.settings["cpu_ops"] is True and profile_.meta.ranks[0].world_size == 1


def test_a_script_that_raises_fails_the_job_and_keeps_its_exit_code(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = profile(home, "--job", "raises", "--", sys.executable, str(PLAIN), "--raise-at", "3")
    assert done.returncode == 1
    assert "RuntimeError: diverged at step 3" in done.stderr  # the script's own traceback, untouched
    with Store(home) as store:
        job = store.job("raises")
    assert job.status is JobStatus.FAILED
    assert "the script raised RuntimeError: diverged at step 3" in job.message
    assert query(home, "raises", "SELECT count(*) FROM events WHERE kind = 'step'")[0][0] == 3


def test_a_killed_process_is_recorded_as_failed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = profile(home, "--job", "killed", "--", sys.executable, str(PLAIN), "--kill-at", "2")
    assert done.returncode == 128 + 9  # as a shell reports a SIGKILL
    with Store(home) as store:
        job = store.job("killed")
        statuses = store.catalog.rank_statuses(job.profiles[0].id)
    assert job.status is JobStatus.FAILED
    assert statuses[0][2] is RankStatus.FAILED and "killed by signal 9" in statuses[0][3]


def test_torchrun_ranks_share_one_profile_and_the_agent_is_not_a_rank(tmp_path: Path) -> None:
    home = tmp_path / "home"
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip(f"torchrun is not installed beside {sys.executable}")
    done = profile(
        home,
        "--job",
        "ddp",
        "--cpu-ops",
        "--",
        str(torchrun),
        "--standalone",
        "--nproc-per-node",
        "2",
        str(REPO / "examples" / "ddp_gloo.py"),
        "--no-profile",
        "--steps",
        "3",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with Store(home) as store:
        job = store.job("ddp")
    assert job.status is JobStatus.COMPLETED and job.ranks == 2 and job.profiles[0].ranks == 2
    per_rank = query(
        home,
        "ddp",
        "SELECT rank, count(*) FILTER (WHERE name = 'gloo:all_reduce'), "
        "count(*) FILTER (WHERE kind = 'step') FROM events GROUP BY rank ORDER BY rank",
    )
    assert [r[0] for r in per_rank] == [0, 1]
    assert all(r[1] >= 3 and r[2] == 3 for r in per_rank), per_rank


def test_a_command_that_is_not_python_says_nothing_was_recorded(tmp_path: Path) -> None:
    done = profile(tmp_path / "home", "--", "true")
    assert done.returncode == 0  # the command's own exit code: profiling never decides it
    assert "no profile was recorded" in done.stderr and "Python program" in done.stderr
    failed = profile(tmp_path / "home", "--", "false")
    assert failed.returncode == 1 and "no profile was recorded" in failed.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--steps", "5:2", "--", "true"], 2, "--steps '5:2': expected START:STOP with STOP > START"),
        (["--sample-interval", "-1", "--", "true"], 2, "option sample_interval_s is -1.0"),
        ([], 2, "Missing argument 'COMMAND'"),
        (["--", "/no/such/program"], 2, "cannot run '/no/such/program'"),
        (  # a store that cannot be made: the command runs unprofiled, with its own exit code
            ["--home", "/proc/version/x", "--", "true"],
            0,
            "profiling was off for this run: /proc/version/x: cannot create the store directory",
        ),
    ],
)
def test_bad_usage_is_explained(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    if "--home" not in args:
        args = ["--home", str(tmp_path / "home"), *args]
    done = subprocess.run([*HYPERSCOPE, "profile", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
