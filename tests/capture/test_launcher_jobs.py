"""``hyperscope profile``: start-up is not step 0, a run is one job, PyTorch's profiler is quiet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hyperscope import JobStatus, Store
from hyperscope.capture.api import launcher_identity
from hyperscope.capture.config import ProfilerConfig
from hyperscope.capture.parts import STARTUP_NAME
from tests.capture.profiles import query
from tests.capture.test_launcher import HYPERSCOPE, PLAIN, profile
from tests.conftest import REPO

pytest.importorskip("torch", reason="capture tests need PyTorch (./dev test installs it)")
pytestmark = pytest.mark.capture

EXAMPLES = REPO / "examples"


def printed_step_times(stdout: str) -> list[float]:
    line = next(x for x in stdout.splitlines() if x.startswith("step times (ms):"))
    return [float(v) for v in line.split(":", 1)[1].split()]


def test_startup_is_its_own_mark_and_the_steps_are_the_scripts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = profile(
        home, "--job", "tt", "--cpu-ops", "--", sys.executable, str(EXAMPLES / "train_transformer.py"),
        "--tiny", "--steps", "4", "--no-profile",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    printed = printed_step_times(done.stdout)
    assert len(printed) == 4
    # Quiet: Kineto's own lines at every start and stop of the profiler stay off the terminal.
    assert "USDT" not in done.stderr + done.stdout and "profiler_start" not in done.stderr
    steps = query(home, "tt", "SELECT name, ts_ns, dur_ns FROM events WHERE kind = 'step' ORDER BY ts_ns")
    assert [s[0] for s in steps] == [f"ProfilerStep#{i}" for i in range(4)]
    (startup,) = query(home, "tt", f"SELECT ts_ns, args FROM events WHERE name = '{STARTUP_NAME}'")
    assert startup[0] == steps[0][1]  # the training begins where step 0 does
    took = json.loads(startup[1])["startup_ns"]
    assert took > 0  # interpreter start, imports, the model built: before step 0
    # Nothing recorded lies before the training began: start-up is not in the profile's span.
    first = query(home, "tt", "SELECT min(ts_ns) FROM events WHERE ph <> 'M'")[0][0]
    assert first == steps[0][1]
    report = subprocess.run(
        [*HYPERSCOPE, "report", "tt", "--json", "--home", str(home)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    tables = json.loads(report.stdout)["tables"]
    (row,) = tables["steps"]["rows"]
    # The script's own clock and the stored steps agree, step 0 included (it was 4 s of start-up
    # in `./dev demo` before), and so do the report's statistics of them.
    tolerance_ms = 3.0
    recorded = [s[2] / 1e6 for s in steps]
    pairs = zip(recorded, printed, strict=True)
    assert all(abs(a - b) <= tolerance_ms for a, b in pairs), (recorded, printed)
    counted = printed
    if row["steps"] == 3:  # the report leaves out a last step much shorter than the others, and says so
        assert any("last step 3" in n and "partial" in n for n in tables["steps"]["notes"])
        counted = printed[:3]
    assert row["steps"] == len(counted)
    assert abs(row["max_ns"] / 1e6 - max(counted)) <= tolerance_ms, (row, printed)
    assert abs(row["min_ns"] / 1e6 - min(counted)) <= tolerance_ms, (row, printed)
    assert abs(row["mean_ns"] / 1e6 - sum(counted) / len(counted)) <= tolerance_ms, (row, printed)
    with Store(home) as store:
        notes = store.profile("tt").meta.ranks[0].notes
    assert any(n.startswith("start-up (interpreter start to training) took") for n in notes), notes


def test_mp_spawn_ranks_that_start_profiling_themselves_record_into_the_launchers_job(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    done = profile(
        home, "--job", "spawned", "--", sys.executable, str(EXAMPLES / "ddp_gloo.py"), "--steps", "3",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with Store(home) as store:
        jobs = store.jobs()
        job = store.job("spawned")
    assert [j.name for j in jobs] == ["spawned"]  # one job, not the launcher's and the ranks'
    assert job.status is JobStatus.COMPLETED and job.profiles[0].ranks == 2
    per_rank = query(
        home, "spawned",
        "SELECT rank, count(*) FILTER (WHERE kind = 'step'), "
        "count(*) FILTER (WHERE name = 'gloo:all_reduce') FROM events GROUP BY rank ORDER BY rank",
    )  # fmt: skip
    assert [r[0] for r in per_rank] == [0, 1]
    assert all(r[1] == 3 and r[2] >= 3 for r in per_rank), per_rank  # the script's cpu_ops=True kept
    assert "2 rank(s)" in done.stderr


def test_a_job_that_records_no_event_says_why(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = profile(home, "--job", "late", "--steps", "50:60", "--", sys.executable, str(PLAIN))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no events were recorded: the run ended in step 6, before the first step to record (50" in (
        done.stderr
    )
    with Store(home) as store:
        assert "before the first step to record" in store.job("late").message


def test_a_python_process_that_never_trains_records_nothing_and_says_why(tmp_path: Path) -> None:
    done = profile(tmp_path / "home", "--", sys.executable, "-c", "print('no training here')")
    assert done.returncode == 0  # the command's own exit code, whatever the profile
    assert "no profile was recorded" in done.stderr and "began training" in done.stderr


def test_the_launchers_job_and_store_win_over_the_scripts_config() -> None:
    mine = ProfilerConfig(job="mine", home="/tmp/mine", cpu_ops=True)
    env = {"HYPERSCOPE_AUTOSTART": "0", "HYPERSCOPE_JOB": "launched", "HYPERSCOPE_HOME": "/tmp/h"}
    got = launcher_identity(mine, env)
    assert (got.job, got.home, got.cpu_ops) == ("launched", "/tmp/h", True)
    assert launcher_identity(mine, {"HYPERSCOPE_JOB": "x"}) is mine  # not under the launcher
