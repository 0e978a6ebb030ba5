"""Restart in place (``hyperscope restart-in-place -- srun ...``): an in-job supervisor run by the
batch script, on the batch host, inside the job's allocation. It runs the job step (the
``srun`` line); when the step fails — a rank crashed, and ``srun --kill-on-bad-exit`` ended the
others — or hangs (every rank's heartbeat silent past ``hang_timeout_s``), it starts the step again
in the same allocation, where the ranks reload their checkpoint: no requeue, so none of what a
requeue costs (the job's end and epilog, the requeue, Slurm's post-requeue hold, scheduling,
the prolog, a new batch script). A requeue only when a node is lost: if a node of the allocation
is down or not responding, the supervisor exits with the step's status and Slurm (``JobRequeue``,
the agent's fence, ``--auto-resume``) requeues the job onto healthy nodes.

What to do after a step ends is :func:`decide` (pure); the rest is the seam to the step (a
process) and to Slurm (``scontrol``). Each restart gets a new ``MASTER_PORT`` (the last one may
still be held by a dying rank) and ``HYPERSCOPE_RESTART`` (0 for the first run).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hyperscope.recovery import heartbeat

__all__ = ["InPlacePolicy", "Verdict", "decide", "supervise"]

RESTART_ENV = "HYPERSCOPE_RESTART"
#: exit statuses that say the command itself is wrong (usage errors; not found): never retried
NOT_RETRIED = frozenset({2, 126, 127})


@dataclass(frozen=True, slots=True)
class InPlacePolicy:
    max_restarts: int = 3
    #: every rank silent this long (heartbeats, from their first beat of the run): a hang
    hang_timeout_s: float = 300.0


@dataclass(frozen=True, slots=True)
class Verdict:
    restart: bool
    reason: str


def decide(code: int, restarts: int, lost_nodes: Sequence[str], policy: InPlacePolicy) -> Verdict:
    """After the step ended with ``code`` (negative: killed by that signal; ``restarts`` already
    made): start it again in place, or stop with its status (a requeue's business)."""
    if code == 0:
        return Verdict(False, "the step completed")
    if lost_nodes:
        return Verdict(False, f"node(s) {', '.join(lost_nodes)} of the allocation lost: exiting "
                              f"{code} for Slurm to requeue the job onto healthy nodes")  # fmt: skip
    if code in NOT_RETRIED:
        return Verdict(False, f"the step exited {code} (a usage error or a command not found): not retried")
    if restarts >= policy.max_restarts:
        return Verdict(False, f"the step failed ({code}) after {restarts} restart(s) in place "
                              f"(at most {policy.max_restarts}): exiting {code}")  # fmt: skip
    return Verdict(True, f"the step failed ({code}): restart {restarts + 1} of {policy.max_restarts} "
                         "in place, in the same allocation")  # fmt: skip


def lost_nodes(
    job_id: str, run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
) -> list[str]:
    """The job's nodes Slurm says are down, failing or not responding (``scontrol``; [] when it
    cannot say: the next failure asks again)."""
    from hyperscope.cluster.jobs import expand_hostlist
    from hyperscope.cluster.slurm import parse_show_job, parse_show_node

    try:
        jobs = parse_show_job(run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                                  text=True, timeout=10).stdout)  # fmt: skip
        if not jobs:
            return []
        names = set(expand_hostlist(jobs[0].nodes))
        nodes = parse_show_node(run(["scontrol", "show", "node", "-o"], capture_output=True, text=True,
                                    timeout=10).stdout)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    bad = {"DOWN", "FAIL", "NOT_RESPONDING"}
    return sorted(n.name for n in nodes if n.name in names and bad & {n.state, *n.flags})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _hung(directory: Path | None, job: str, ranks: int, since: float, timeout_s: float) -> bool:
    """Every rank silent past the timeout, counted from the run's first beat (a run still
    importing or loading its checkpoint has none yet, and is not hung)."""
    if directory is None or not job:
        return False
    newest = heartbeat.newest(directory, job, ranks)
    return newest is not None and newest >= since and time.time() - newest > timeout_s


def supervise(
    argv: Sequence[str],
    policy: InPlacePolicy = InPlacePolicy(),
    *,
    say: Callable[[str], None] = lambda line: print(f"hyperscope restart-in-place: {line}", flush=True),
    environ: dict[str, str] | None = None,
) -> int:
    """Run ``argv`` until it completes or :func:`decide` says stop; its last status."""
    env = dict(os.environ if environ is None else environ)
    job = env.get("SLURM_JOB_ID", "")
    ranks = int(env.get("SLURM_NTASKS", "0") or 0)
    beats = Path(env[heartbeat.DIR_ENV]) if env.get(heartbeat.DIR_ENV) else None
    restarts = 0
    while True:
        started = time.time()
        run_env = {**env, RESTART_ENV: str(restarts), "MASTER_PORT": str(_free_port())}
        if restarts == 0 and env.get("MASTER_PORT"):
            run_env["MASTER_PORT"] = env["MASTER_PORT"]
        proc = subprocess.Popen(list(argv), env=run_env, start_new_session=True)
        code = _wait(proc, beats, job, ranks, started, policy, say)
        verdict = decide(code, restarts, lost_nodes(job) if code and job else [], policy)
        say(verdict.reason)
        if not verdict.restart:
            return code if code >= 0 else 128 - code
        restarts += 1


def _wait(proc: subprocess.Popen[bytes], beats: Path | None, job: str, ranks: int, started: float,
          policy: InPlacePolicy, say: Callable[[str], None]) -> int:  # fmt: skip
    """The step's status; a hung step is ended (SIGTERM, then SIGKILL) and counts as failed."""
    while True:
        try:
            return proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        if _hung(beats, job, ranks, started, policy.hang_timeout_s):
            say(f"every rank silent for more than {policy.hang_timeout_s:g} s: the step is hung, ended")
            for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 30.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
            return proc.wait() or 1


def main(argv: Sequence[str], max_restarts: int, hang_timeout_s: float) -> int:
    if not argv:
        print("hyperscope restart-in-place: give the step to run after --, e.g. -- srun python train.py",
              file=sys.stderr)  # fmt: skip
        return 2
    return supervise(argv, dataclasses.replace(InPlacePolicy(), max_restarts=max_restarts,
                                               hang_timeout_s=hang_timeout_s))  # fmt: skip
