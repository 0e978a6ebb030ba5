"""The health-check wrapper and the slurm.conf lines that install it and the SPANK plugin."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from hyperscope.cluster import hooks
from hyperscope.cluster.spec import ClusterSpec
from hyperscope.cluster.state import ClusterState, NodeState
from hyperscope.recovery import spank


def _state(tmp_path: Path) -> ClusterState:
    d = tmp_path / "cl"
    (d / "etc").mkdir(parents=True)
    return ClusterState(
        name="t1", provider="local", status="Creating", dir=str(d), spec_path="", spec_digest="",
        slurm_conf=str(d / "etc" / "slurm.conf"), shared_dir=str(tmp_path / "shared"),
        controller="controller-1", partition="dev", ctld_port=1, run_dir=str(tmp_path / "run"),
    )  # fmt: skip


def test_the_wrapper_gives_the_health_check_what_slurm_does_not(
    tmp_path: Path, make_spec: Callable[..., ClusterSpec]
) -> None:
    state = _state(tmp_path)
    state.nodes = [NodeState(f"workers-{i}", "workers", "worker", i == 3, True) for i in (1, 2, 3)]
    fake_python = tmp_path / "python"
    fake_python.write_text(
        '#!/bin/bash\necho $$ >> "$HYPERSCOPE_SHARED_DIR/pids"\n'
        # env first, args last, each whole at once: the test reads env once args is there
        'd="$HYPERSCOPE_SHARED_DIR"; env > "$d/env.$$" && mv "$d/env.$$" "$d/env"\n'
        'echo "$@" > "$d/args.$$" && mv "$d/args.$$" "$d/args"\n'
        '[ -n "${HOLD:-}" ] && sleep "$HOLD"; exit 0\n'
    )
    fake_python.chmod(0o755)
    script = tmp_path / "hc.sh"
    script.write_text(hooks.healthcheck_wrapper(make_spec(), state, python=str(fake_python)))
    script.chmod(0o755)
    (tmp_path / "shared").mkdir()
    hooks.faults_dir(state).mkdir()
    (hooks.faults_dir(state) / "workers-2.json").write_text("{}")
    for node in ("workers-1", "workers-2"):
        subprocess.run([str(script)], env={"SLURMD_NODENAME": node}, check=True)
        args = _written(tmp_path / "shared" / "args")  # the periodic loop runs in the background
        env = (tmp_path / "shared" / "env").read_text()
        assert args.startswith("-m hyperscope.health --loop 5 --parent ")
        assert f" --watch {script} --faults-file {hooks.faults_dir(state)}/{node}.json " in args
        assert (
            f"--drain --node {node} --expect-gpus 2 --gpu-devices {state.dir}/dev/{node} --dcgm-every 3600 "
            in args
        )
        assert f"SLURM_CONF={state.slurm_conf}" in env and f"HYPERSCOPE_CLUSTER_DIR={state.dir}" in env
        (tmp_path / "shared" / "args").unlink()
    # as the Prolog (Slurm sets SLURM_JOB_ID), only the quick checks, once, with the fault file if any
    for node, faults in (("workers-1", None), ("workers-2", hooks.faults_dir(state) / "workers-2.json")):
        subprocess.run([str(script)], env={"SLURMD_NODENAME": node, "SLURM_JOB_ID": "7"}, check=True)
        args = (tmp_path / "shared" / "args").read_text()
        assert args.startswith(f"-m hyperscope.health --quick --drain --node {node} --expect-gpus 2 ")
        env = (tmp_path / "shared" / "env").read_text()
        assert (f"HYPERSCOPE_HEALTH_FAULTS={faults}" in env) == (faults is not None)
    # never two periodic checks at once on one node: a second exits at once while the first runs
    (tmp_path / "shared" / "args").unlink()
    first = subprocess.Popen([str(script)], env={"SLURMD_NODENAME": "workers-1", "HOLD": "30"})
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "shared" / "args").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        (tmp_path / "shared" / "args").unlink()
        second = subprocess.run([str(script)], env={"SLURMD_NODENAME": "workers-1"}, timeout=20)
        time.sleep(0.5)  # what a second loop would have written by now
        assert second.returncode == 0 and not (tmp_path / "shared" / "args").exists()
        other = subprocess.run([str(script)], env={"SLURMD_NODENAME": "workers-2", "HOLD": "30"}, timeout=20)
        assert other.returncode == 0 and _written(tmp_path / "shared" / "args")  # its own lock
        (tmp_path / "shared" / "args").unlink()
        prolog = {"SLURMD_NODENAME": "workers-1", "SLURM_JOB_ID": "8"}
        assert subprocess.run([str(script)], env=prolog, timeout=20).returncode == 0
        assert "--quick" in (tmp_path / "shared" / "args").read_text()  # a job's check still runs
    finally:
        first.kill()
        first.wait()
        for pid in (tmp_path / "shared" / "pids").read_text().split():  # the loops left holding locks
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def test_install_writes_the_slurm_conf_lines(tmp_path: Path, make_spec: Callable[..., ClusterSpec]) -> None:
    state = _state(tmp_path)
    lines = hooks.install(make_spec(), state)
    assert lines[:5] == [
        f"HealthCheckProgram={Path(state.dir) / 'etc' / 'healthcheck.sh'}",
        "HealthCheckInterval=30",  # the wrapper: it starts the node's loop again if it is gone
        "HealthCheckNodeState=ANY",
        f"Prolog={Path(state.dir) / 'etc' / 'healthcheck.sh'}",
        f"TaskProlog={Path(state.dir) / 'etc' / 'taskprolog.sh'}",
    ]
    if spank.HEADER.is_file():
        assert lines[5] == f"PlugStackConfig={Path(state.dir) / 'etc' / 'plugstack.conf'}"
        assert state.notes == []


def test_no_plugin_is_a_note_not_a_failure(
    tmp_path: Path, make_spec: Callable[..., ClusterSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spank, "HEADER", tmp_path / "missing.h")
    state = _state(tmp_path)
    lines = hooks.install(make_spec(), state)
    assert not any(line.startswith("PlugStackConfig") for line in lines)
    assert state.notes and "apt-get install libslurm-dev" in state.notes[0]


def _written(path: Path, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} was not written"
        time.sleep(0.05)
    return path.read_text()


def test_the_periodic_run_exits_without_starting_a_process_while_the_loop_lives(
    tmp_path: Path, make_spec: Callable[..., ClusterSpec]
) -> None:
    """The wrapper runs on every node every interval; while the node's loop lives (named by its
    pid file, checked against its command line), it is bash builtins only and starts nothing."""
    state = _state(tmp_path)
    state.nodes = [NodeState("workers-1", "workers", "worker", False, True)]
    (tmp_path / "shared").mkdir()
    fake_python = tmp_path / "python"
    fake_python.write_text('#!/bin/bash\necho "$@" >> "$HYPERSCOPE_SHARED_DIR/args"\n')
    fake_python.chmod(0o755)
    script = tmp_path / "hc.sh"
    script.write_text(hooks.healthcheck_wrapper(make_spec(), state, python=str(fake_python)))
    script.chmod(0o755)
    locks = Path(state.run_dir) / "locks"
    locks.mkdir(parents=True)
    pid_file = locks / "loop-workers-1.pid"
    spool = Path(state.run_dir) / "spool" / "workers-1"
    env = {"SLURMD_NODENAME": "workers-1"}
    sleeper = [sys.executable, "-c", "import time; time.sleep(300)", "--loop", "5"]
    # what the wrapper matches: this node's loop, started by the wrapper's parent (its slurmd)
    loop = subprocess.Popen([*sleeper, "--parent", str(os.getpid()), "--path", str(spool)])
    other = subprocess.Popen(["sleep", "300"])  # a recycled pid: another command line
    try:
        _until_cmdline(loop.pid, "--loop")
        pid_file.write_text(f"{loop.pid}\n")
        assert subprocess.run([str(script)], env=env, timeout=20).returncode == 0
        time.sleep(0.5)  # what a started loop would have written by now
        assert not (tmp_path / "shared" / "args").exists()  # the lock was free: the fast path it was
        if shutil.which("strace"):  # strace is the wrapper's parent here: a loop of its own
            traced = tmp_path / "trace"
            argv = ["strace", "-f", "-qq", "-e", "trace=execve,clone,clone3,fork,vfork", "-o", str(traced)]
            tracer = subprocess.Popen(
                ["sh", "-c", 'read go; exec "$@"', "sh", *argv, str(script)], env=env, stdin=subprocess.PIPE
            )
            traced_loop = subprocess.Popen([*sleeper, "--parent", str(tracer.pid), "--path", str(spool)])
            try:
                _until_cmdline(traced_loop.pid, "--loop")
                pid_file.write_text(f"{traced_loop.pid}\n")
                tracer.communicate(b"go\n", timeout=20)
            finally:
                traced_loop.kill()
                traced_loop.wait()
            assert tracer.returncode == 0
            calls = [c for c in traced.read_text().splitlines() if "resumed>" not in c]
            assert len(calls) == 1 and "execve(" in calls[0], calls  # the wrapper's own exec only
        for stale in (other.pid, 999_999_999):  # another process, or none: a loop is started
            pid_file.write_text(f"{stale}\n")
            assert subprocess.run([str(script)], env=env, timeout=20).returncode == 0
            assert "--loop 5" in _written(tmp_path / "shared" / "args")
            (tmp_path / "shared" / "args").unlink()
            deadline = time.monotonic() + 20  # the fake loop exits at once: its lock is free again
            while subprocess.run(["flock", "-n", str(locks / "healthcheck-workers-1"), "true"]).returncode:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        # a loop of an earlier slurmd of this node, still holding the lock: ended, a fresh one started
        old = subprocess.Popen(["flock", str(locks / "healthcheck-workers-1"), *sleeper, "--parent", "1",
                                "--path", str(spool)])  # fmt: skip
        deadline = time.monotonic() + 20
        while subprocess.run(["flock", "-n", str(locks / "healthcheck-workers-1"), "true"]).returncode == 0:
            assert time.monotonic() < deadline  # until the old loop holds it
            time.sleep(0.05)
        holder = next(c for c in psutil.Process(old.pid).children() if "--loop" in c.cmdline())
        pid_file.write_text(f"{holder.pid}\n")
        assert subprocess.run([str(script)], env=env, timeout=60).returncode == 0
        assert "--loop 5" in _written(tmp_path / "shared" / "args")
        assert old.wait(timeout=20) != 0  # killed
    finally:
        for p in (loop, other):
            p.kill()
            p.wait()


def _until_cmdline(pid: int, word: str, timeout: float = 30.0) -> None:
    """Until the process has exec'd what it was started for (its /proc cmdline names ``word``)."""
    deadline = time.monotonic() + timeout
    while word not in psutil.Process(pid).cmdline():
        assert time.monotonic() < deadline, f"{pid} never ran {word}"
        time.sleep(0.02)
