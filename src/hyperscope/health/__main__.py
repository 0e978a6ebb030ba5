"""``python -m hyperscope.health``: the node health check as Slurm runs it, kept light.

Slurm runs its Prolog on every node before every job, and the periodic check on every node every
few seconds; ``hyperscope health`` (the CLI, with PyArrow, NumPy and typer behind it) took 0.7 s
of CPU per run, which at 32 nodes on one machine kept two cores busy. This entry imports the
checks alone (about 0.07 s). With ``--loop S`` it stays up and checks every S seconds in-process:
what the cluster's periodic check starts once per node (the wrapper's lock, inherited as fd 9,
stays held for its life, so the next wrapper runs exit at once); it is also the agent's watchdog
(``--agent-watchdog``), so the wrapper itself need run only rarely. The loop ends when its slurmd
(``--parent``) is gone or the wrapper that started it was rewritten (``--watch``), so a changed
spec or a re-created node gets a fresh one.

Exit status as ``hyperscope health``: 0 pass or warn, 1 fail, 2 an unreadable fault file.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

from hyperscope import health
from hyperscope._proc import process_alive
from hyperscope.health.sources import FAULTS_ENV
from hyperscope.recovery import calm


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m hyperscope.health", description=__doc__.splitlines()[0])
    ap.add_argument("--node", default=None)
    ap.add_argument("--drain", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--expect-gpus", type=int, default=None)
    ap.add_argument("--gpu-devices", type=Path, default=Path("/dev"))
    ap.add_argument("--checks-dir", type=Path, default=None)
    ap.add_argument("--dcgm-every", type=float, default=0.0)
    ap.add_argument("--dcgm-record", type=Path, default=None)
    ap.add_argument("--path", type=Path, action="append", default=[])
    ap.add_argument("--min-free-gib", type=float, default=1.0)
    ap.add_argument("--shared", type=Path, default=None)
    ap.add_argument("--faults-file", type=Path, default=None, help=f"read each run (as ${FAULTS_ENV})")
    ap.add_argument("--loop", type=float, default=0.0, metavar="SECONDS")
    ap.add_argument("--parent", type=int, default=0, metavar="PID")
    ap.add_argument("--watch", type=Path, default=None, metavar="FILE")
    ap.add_argument("--probe-every", type=float, default=0.0, metavar="SECONDS",
                    help="write to a writable path again only after this long (0: every run)")  # fmt: skip
    ap.add_argument("--pid-file", type=Path, default=None, metavar="FILE")
    ap.add_argument("--agent-watchdog", type=Path, default=None, metavar="CLUSTER_DIR")
    return ap


def _once(args: argparse.Namespace) -> int:
    if args.faults_file is not None:  # a fault file written after the loop started counts
        if args.faults_file.exists():
            os.environ[FAULTS_ENV] = str(args.faults_file)
        else:
            os.environ.pop(FAULTS_ENV, None)
    config = health.configure(
        expect_gpus=args.expect_gpus, paths=tuple(args.path), min_free_gib=args.min_free_gib,
        shared=args.shared, checks_dir=args.checks_dir, quick=args.quick, dcgm_every_s=args.dcgm_every,
        dcgm_record=args.dcgm_record, gpu_devices=args.gpu_devices, probe_every_s=args.probe_every,
    )  # fmt: skip
    try:
        report = health.run(config, node=args.node)
    except ValueError as exc:  # an unreadable fault file
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.drain:
        try:
            command = health.drain(report)
        except (RuntimeError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if command:
            print(f"drained: {command}", file=sys.stderr)
            calm.nudge(os.environ.get("HYPERSCOPE_CLUSTER_DIR"))  # the agent looks at once
    return 1 if report.status == "fail" else 0


def _watch_agent(cluster_dir: Path) -> None:
    """The agent's watchdog, each pass: a cluster in service whose agent's lock nobody holds (the
    agent died) gets a new agent; a second one started by another node's loop exits at once."""
    try:
        if '"status": "InService"' not in (cluster_dir / "cluster.json").read_text():
            return
        with open(cluster_dir / "agent.lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return  # held: the agent runs
            fcntl.flock(lock, fcntl.LOCK_UN)
        argv = [sys.executable, "-m", "hyperscope", "agent", "--cluster", cluster_dir.name,
                "--home", str(cluster_dir.parents[1])]  # fmt: skip
        with open(cluster_dir / "log" / "agent.out", "ab") as out:
            subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
    except OSError as exc:  # the cluster's folder went away (deleted): nothing to watch
        print(f"agent watchdog: {exc}", file=sys.stderr)


def _write_pid(path: Path) -> None:
    """Name this loop in ``path`` (whole or not at all): the wrapper's fast path reads it and
    exits at once, without starting a process, while this loop lives."""
    try:
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(f"{os.getpid()}\n")
        os.replace(tmp, path)
    except OSError as exc:  # no fast path then: the wrapper's lock still keeps one loop per node
        print(f"pid file: {exc}", file=sys.stderr)


def _hand_over(args: argparse.Namespace) -> None:
    """The wrapper was rewritten (a cluster update): run the new one now, as slurmd would, so
    the node's next loop starts at once and not at slurmd's next run (``HealthCheckInterval``).
    First this loop lets go of what keeps a wrapper from starting one: its pid file and the
    wrapper's lock (inherited as fd 9). Only for a loop the wrapper started (it names both)."""
    if args.pid_file is None or not args.parent or args.watch is None or args.node is None:
        return
    with contextlib.suppress(OSError):
        if args.pid_file.read_text().strip() == str(os.getpid()):
            args.pid_file.unlink()
    with contextlib.suppress(OSError):
        os.close(9)
    env = {"SLURMD_NODENAME": args.node, "HYPERSCOPE_SLURMD_PID": str(args.parent)}
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run([str(args.watch)], env=env, stdin=subprocess.DEVNULL, timeout=120, check=False)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.loop <= 0:
        return _once(args)
    stamp = args.watch.stat().st_mtime_ns if args.watch is not None and args.watch.exists() else None
    if args.pid_file is not None:
        _write_pid(args.pid_file)
    while True:
        _once(args)
        if args.agent_watchdog is not None:
            _watch_agent(args.agent_watchdog)
        time.sleep(args.loop)
        if args.parent and not process_alive(args.parent):
            return 0
        if args.watch is not None:
            now = args.watch.stat().st_mtime_ns if args.watch.exists() else None
            if now != stamp:
                _hand_over(args)
                return 0


if __name__ == "__main__":
    sys.exit(main())
