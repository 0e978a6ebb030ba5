"""The ssh provider's agent keeper: ``python -m hyperscope.recovery.keeper --cluster NAME --home
HOME``, on the machine that created the cluster, beside the agent.

A local cluster's agent is restarted by its nodes' health loops, which run on this same machine;
an ssh cluster's loops run on its hosts, which cannot start a process here. So the agent and the
keeper watch each other: the keeper starts the agent again when nobody holds the agent's lock
(it died), and the agent starts the keeper again when nobody holds the keeper's
(:func:`ensure`, at its look at the controllers, every few seconds). Each records itself in the
cluster's state, and ``delete`` stops both first. The keeper ends when the cluster is gone or no
longer in service.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

from hyperscope.cluster import operate
from hyperscope.cluster.state import ClusterState, Proc, cluster_lock, clusters_dir, start_time

ROLE = "keeper"
LOCK = "keeper.lock"
EVERY_S = 5.0
SERVING = ("InService", "Updating")


def _free(path: Path) -> bool:
    """Nobody holds ``path``'s lock now."""
    try:
        with open(path, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False
            return True
    except OSError:
        return False


def _status(d: Path) -> str:
    try:
        return ClusterState.load(d).status
    except (OSError, ValueError) as exc:
        print(f"keeper: {exc}", file=sys.stderr)
        return ""


def ensure(home: Path, state: ClusterState) -> bool:
    """Start the keeper when none runs (the agent's half of the pair); True when started."""
    d = Path(state.dir)
    if not _free(d / LOCK):
        return False
    argv = [sys.executable, "-m", "hyperscope.recovery.keeper", "--cluster", state.name, "--home", str(home)]
    with open(d / "log" / "keeper.out", "ab") as out:
        subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    return True


def _register(home: Path, name: str) -> None:
    me = start_time(os.getpid())
    if me is None:
        return
    with cluster_lock(home, name):
        d = clusters_dir(home) / name
        if not (d / "cluster.json").is_file():
            return
        state = ClusterState.load(d)
        state.procs = [p for p in state.procs if p.role != ROLE] + [Proc(ROLE, os.getpid(), me)]
        state.save()


def _start_agent(home: Path, name: str, d: Path) -> None:
    """The agent, handed its lock (``operate.agent_lock``); it records itself."""
    argv = [sys.executable, "-m", "hyperscope", "agent", "--cluster", name, "--home", str(home)]
    with operate.agent_lock(d) as lock_env:
        if lock_env is None:
            return  # one runs
        env = {**os.environ, "HYPERSCOPE_CLUSTER_DIR": str(d), **lock_env}
        with open(d / "log" / "agent.out", "ab") as out:
            subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True, pass_fds=tuple(int(v) for v in lock_env.values()),
            )  # fmt: skip
    print(f"keeper: the agent of {name} was gone: started again", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hyperscope.recovery.keeper")
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--every", type=float, default=EVERY_S)
    args = ap.parse_args(argv)
    d = clusters_dir(args.home) / args.cluster
    try:
        lock = open(d / LOCK, "a")  # noqa: SIM115 - held for the keeper's life
    except OSError:
        return 0  # the cluster's folder is gone
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # another keeper runs
        _register(args.home, args.cluster)
        while (d / "cluster.json").is_file() and _status(d) in SERVING:
            if _free(d / "agent.lock"):
                _start_agent(args.home, args.cluster, d)
            time.sleep(args.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
