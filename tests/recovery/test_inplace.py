"""The in-job supervisor (``hyperscope restart-in-place``) without Slurm: its decisions as data,
and real child processes that fail, hang or succeed. On real Slurm: test_restart_in_place.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from hyperscope.cli.main import app
from hyperscope.recovery import heartbeat
from hyperscope.recovery.inplace import InPlacePolicy, decide, supervise

POLICY = InPlacePolicy(max_restarts=2, hang_timeout_s=1.0)


def test_decisions_restart_a_failed_step_until_the_limit_and_never_past_a_lost_node() -> None:
    assert decide(0, 0, [], POLICY).restart is False
    v = decide(3, 0, [], POLICY)
    assert v.restart and v.reason == "the step failed (3): restart 1 of 2 in place, in the same allocation"
    assert decide(-9, 1, [], POLICY).restart  # killed by a signal
    v = decide(3, 2, [], POLICY)
    assert not v.restart and "after 2 restart(s) in place (at most 2)" in v.reason
    v = decide(143, 0, ["workers-2"], POLICY)
    assert not v.restart and "workers-2 of the allocation lost" in v.reason and "requeue" in v.reason
    assert not decide(2, 0, [], POLICY).restart  # a usage error is not retried
    assert not decide(127, 0, [], POLICY).restart  # nor a command not found


def _script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "step.py"
    path.write_text(body)
    return [sys.executable, str(path)]


def test_a_failing_step_runs_again_with_its_restart_number_and_a_new_port(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    argv = _script(tmp_path, (
        "import os, sys\ne = os.environ\n"
        f"open({str(runs)!r}, 'a').write(e['HYPERSCOPE_RESTART'] + ' ' + e['MASTER_PORT'] + '\\n')\n"
        "sys.exit(0 if os.environ['HYPERSCOPE_RESTART'] == '2' else 3)\n"
    ))  # fmt: skip
    said: list[str] = []
    env = {"PATH": "/usr/bin:/bin", "MASTER_PORT": "29999"}
    assert supervise(argv, POLICY, say=said.append, environ=env) == 0
    lines = [line.split() for line in runs.read_text().splitlines()]
    assert [r for r, _ in lines] == ["0", "1", "2"]
    assert lines[0][1] == "29999" and lines[1][1] != "29999"  # the first run keeps the job's own
    assert said == [
        "the step failed (3): restart 1 of 2 in place, in the same allocation",
        "the step failed (3): restart 2 of 2 in place, in the same allocation",
        "the step completed",
    ]
    always = _script(tmp_path, "import sys; sys.exit(4)\n")
    assert supervise(always, POLICY, say=said.append, environ=env) == 4  # its status, at the limit


def test_a_hung_step_is_ended_and_started_again(tmp_path: Path) -> None:
    """A step whose every rank stopped beating (its heartbeat older than the hang timeout)."""
    beats, runs = tmp_path / "hb", tmp_path / "runs"
    argv = _script(tmp_path, (
        "import os, time\nfrom hyperscope.recovery import heartbeat\n"
        f"open({str(runs)!r}, 'a').write('run\\n')\n"
        "heartbeat.beat(force=True)\n"
        "if os.environ['HYPERSCOPE_RESTART'] == '0':\n    time.sleep(600)\n"
    ))  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", heartbeat.DIR_ENV: str(beats), "SLURM_JOB_ID": "5", "SLURM_NTASKS": "1",
           "PYTHONPATH": ":".join(sys.path)}  # fmt: skip
    said: list[str] = []
    assert supervise(argv, POLICY, say=said.append, environ=env) == 0
    assert runs.read_text() == "run\nrun\n"
    assert said[0] == "every rank silent for more than 1 s: the step is hung, ended"
    assert said[1].startswith("the step failed (") and said[-1] == "the step completed"


def test_the_command_needs_a_step() -> None:
    done = CliRunner().invoke(app, ["restart-in-place"])
    assert done.exit_code != 0


def test_a_warm_launcher_forks_a_failed_rank_again_with_its_own_port(tmp_path: Path) -> None:
    """``hyperscope.recovery.warm`` in a real process: the script fails once, runs again forked
    from the same launcher (the same parent pid: nothing imported twice), on MASTER_PORT + 1."""
    runs = tmp_path / "runs"
    script = tmp_path / "train.py"
    script.write_text(
        "import os, sys\ne = os.environ\n"
        "line = [e['HYPERSCOPE_RESTART'], e['MASTER_PORT'], str(os.getppid()), str(sys.argv[1:])]\n"
        f"open({str(runs)!r}, 'a').write(' '.join(line) + '\\n')\n"
        "sys.exit(3 if e['HYPERSCOPE_RESTART'] == '0' else 0)\n"
    )  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "MASTER_PORT": "29400", "PYTHONPATH": ":".join(sys.path)}
    argv = [
        sys.executable,
        "-m",
        "hyperscope.recovery.warm",
        "--preload",
        "json",
        "--",
        str(script),
        "--x",
        "1",
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    first, second = runs.read_text().splitlines()
    assert first.split(" ", 3)[:2] == ["0", "29400"] and second.split(" ", 3)[:2] == ["1", "29401"]
    assert first.split(" ", 3)[2] == second.split(" ", 3)[2]  # one launcher forked both
    assert first.endswith("['--x', '1']")
    assert "hyperscope warm: rank ? failed (3): warm restart 1 of 3" in done.stdout
    always = tmp_path / "always.py"
    always.write_text("import sys; sys.exit(5)\n")
    gave_up = subprocess.run([*argv[:3], "--max-restarts", "1", "--preload", "", str(always)], env=env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert gave_up.returncode == 5 and "failed (5), after 1 warm restart(s)" in gave_up.stderr
