"""The agent's lock is taken before the agent is spawned and handed to it: a Python start-up on a
loaded machine can outlast a slurmd watchdog's interval, and a watchdog that found the lock free
started a second agent (CI: the pid recorded at create was stale a second later)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from hyperscope.cluster.operate import AGENT_LOCK_FD_ENV, agent_lock

# what the agent does first (``hyperscope.recovery.agent._single``), then waits to be told to exit
CHILD = """
import sys
from pathlib import Path
from hyperscope.recovery.agent import _single
with _single(Path(sys.argv[1]) / "agent.lock") as first:
    print("first" if first else "second", flush=True)
    sys.stdin.readline()
"""


def _free(path: Path) -> bool:
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True


def _spawn(d: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    fds = tuple(int(v) for v in env.values())
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(d)], env={**os.environ, **env}, pass_fds=fds,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_the_lock_is_held_from_the_spawn_on_and_the_agent_keeps_it(tmp_path: Path) -> None:
    with agent_lock(tmp_path) as env:
        assert env is not None and set(env) == {AGENT_LOCK_FD_ENV}
        child = _spawn(tmp_path, env)
    try:
        # before the child has run a line of Python: a watchdog's `flock -n` finds it taken
        assert not _free(tmp_path / "agent.lock")
        assert child.stdout is not None and child.stdout.readline().strip() == "first"
        with agent_lock(tmp_path) as again:  # a second start while it runs: none spawned
            assert again is None
        # a watchdog's agent started meanwhile exits at once
        late = subprocess.run(
            [sys.executable, "-c", CHILD, str(tmp_path)], input="\n", capture_output=True, text=True,
            check=True, timeout=60,
        )  # fmt: skip
        assert late.stdout.strip() == "second"
    finally:
        child.communicate("\n", timeout=60)
    assert child.returncode == 0 and _free(tmp_path / "agent.lock")  # released when the agent ends
