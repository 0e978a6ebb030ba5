"""The ssh provider's agent keeper: ``python -m hyperscope.recovery.keeper --cluster NAME --home
HOME``, on the machine that created the cluster, beside the agent.

A local cluster's agent is restarted by its nodes' health loops, which run on this same machine;
an ssh cluster's loops run on its hosts, which cannot start a process here. So the agent and the
keeper watch each other: the keeper starts the agent again when nobody holds the agent's lock
(it died), and the agent starts the keeper again when nobody holds the keeper's
(:func:`ensure`, at its look at the controllers, every few seconds). Each records itself in the
cluster's state, and ``delete`` stops both first. The keeper ends when the cluster is gone or no
longer in service. Should both be killed at once, :func:`revive` is the third path: the next
``describe``, ``list-nodes`` or ``submit`` of the cluster on this machine starts them again, as
does ``--once`` (one look, for a cron line: ``* * * * * PYTHON -m hyperscope.recovery.keeper
--once --cluster NAME --home HOME``).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from hyperscope.cluster import operate
from hyperscope.cluster.state import ClusterState, Proc, alive, cluster_lock, clusters_dir, start_time

ROLE = "keeper"
LOCK = "keeper.lock"
EVERY_S = 5.0
#: how long :func:`revive` waits for a dead agent's lock to be let go
LOCK_WAIT_S = 5.0
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


def _start_agent(home: Path, name: str, d: Path) -> bool:
    """The agent, handed its lock (``operate.agent_lock``); it records itself. False when one
    runs."""
    argv = [sys.executable, "-m", "hyperscope", "agent", "--cluster", name, "--home", str(home)]
    with operate.agent_lock(d) as lock_env:
        if lock_env is None:
            return False  # one runs
        env = {**os.environ, "HYPERSCOPE_CLUSTER_DIR": str(d), **lock_env}
        with open(d / "log" / "agent.out", "ab") as out:
            subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True, pass_fds=tuple(int(v) for v in lock_env.values()),
            )  # fmt: skip
    print(f"keeper: the agent of {name} was gone: started again", file=sys.stderr, flush=True)
    return True


def revive(home: Path, name: str, by: str) -> str:
    """The third restart path, for when the agent and its keeper were both killed (neither can
    start the other): an agent meant to run (recorded in the cluster's state) whose lock nobody
    holds is started again, and its keeper with it, logged in agent.log. Run by the commands an
    operator runs on this machine (``describe``, ``list-nodes``, ``submit``) and by
    ``python -m hyperscope.recovery.keeper --once`` (a cron or systemd timer line where the machine
    has one). What was done, or "" when nothing was needed."""
    d = clusters_dir(home) / name
    try:
        state = ClusterState.load(d)
    except (OSError, ValueError):
        return ""
    if state.provider not in ("ssh", "existing") or state.status not in SERVING:
        return ""  # the local provider's agent is restarted by its nodes' health loops
    recorded = [p for p in state.procs if p.role == "agent" and not p.host]
    if not recorded:
        return ""  # off in the spec, or being deleted
    deadline = time.monotonic() + LOCK_WAIT_S
    while not _free(d / "agent.lock"):  # a recorded agent that is dead may still be letting go
        if any(alive(p) for p in recorded) or time.monotonic() > deadline:
            return ""  # it runs (or another one, just started, holds the lock)
        time.sleep(0.1)
    keeper_gone = _free(d / LOCK)
    if not _start_agent(home, name, d):
        return ""  # its keeper was quicker
    if keeper_gone:
        ensure(home, state)
    what = "the agent and its keeper were" if keeper_gone else "the agent was"
    why = f"{what} gone: started again by {by}"
    record = {"time": round(time.time(), 3), "kind": "restart", "nodes": ["agent"], "job": None,
              "phase": "done", "reason": why}  # fmt: skip
    with open(d / "agent.log", "a") as f:
        f.write(json.dumps(record) + "\n")
    return why


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hyperscope.recovery.keeper")
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--every", type=float, default=EVERY_S)
    ap.add_argument("--once", action="store_true", help="one look (for cron): start what is gone, end")
    args = ap.parse_args(argv)
    d = clusters_dir(args.home) / args.cluster
    if args.once:
        said = revive(args.home, args.cluster, "`python -m hyperscope.recovery.keeper --once`")
        if said:
            print(f"keeper: {args.cluster}: {said}", file=sys.stderr, flush=True)
        return 0
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
