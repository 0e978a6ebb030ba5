"""The periodic health check on an ssh cluster's hosts, as on local nodes: one long-lived
``python -m hyperscope.health --loop`` per node, started over ssh beside the node's slurmd (and
again by slurmd itself, through ``HealthCheckProgram``, should it die), which drains its node
when a check fails; the agent then acts on the drain as on any other.

The wrapper is the local provider's (:func:`hooks.healthcheck_wrapper`), written for a host: it
lives in the cluster's folder there (``REMOTE_DIR/NAME/etc``, copied with slurm.conf), its
faults, locks and spool are that folder's, it checks the host's own GPU devices, and it is no
agent watchdog (the agent runs on the machine that created the cluster). The loop runs the
Python the spec names (``ssh.python``: hyperscope installed on every host), by default this
machine's own interpreter path, for hosts that mount the same software.

The same wrapper is the Prolog (the quick checks before every job on each of its nodes: a
node that fails them is drained before the job runs there), and beside it is the TaskProlog
(:func:`hooks.task_prolog`: heartbeats and a checkpoint folder on the shared directory, which
every host and this machine mount at the same path, so the agent here reads the heartbeats that
jobs write on the hosts). ``--auto-resume``'s plugin is :mod:`ssh_hooks`'. A folder of the user's
checks is read at its path on each host.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from hyperscope.cluster import hooks
from hyperscope.cluster.spec import ClusterSpec
from hyperscope.cluster.ssh_hosts import MARKER, NODE_MARKER
from hyperscope.cluster.state import ClusterState


def python(state: ClusterState) -> str:
    return str(state.ssh.get("python") or "") or sys.executable


def install(spec: ClusterSpec, state: ClusterState) -> list[str]:
    """Write the hosts' wrapper and TaskProlog beside slurm.conf (here, in the folder copied to
    every host); the slurm.conf lines that run them there."""
    etc = Path(state.dir) / "etc"
    hooks.write_scripts(spec, state, etc, python=python(state), remote=True)
    return hooks.conf_lines(spec, f"{state.run_dir}/etc")


def remote_wrapper(state: ClusterState) -> str:
    return f"{state.run_dir}/etc/{hooks.WRAPPER}"


def faults_file(state: ClusterState, node: str) -> str:
    """On the node's host: ``HYPERSCOPE_HEALTH_FAULTS`` of its loop (the seam to rehearse a fault)."""
    return f"{state.run_dir}/faults/{node}.json"


def start_loop_command(state: ClusterState, node: str, slurmd_pid: int) -> str:
    """The shell step that starts ``node``'s loop on its host, told which slurmd it ends with: the
    wrapper, as slurmd runs it (slurmd first runs it only at its first HealthCheckInterval).
    Nothing happens on a host whose cluster folder has no wrapper (created before it)."""
    w = shlex.quote(remote_wrapper(state))
    env = {"SLURMD_NODENAME": node, "HYPERSCOPE_SLURMD_PID": str(slurmd_pid)}
    env |= {MARKER: state.run_dir, NODE_MARKER: node}
    argv = shlex.join(["env", *(f"{k}={v}" for k, v in env.items()), "setsid", remote_wrapper(state)])
    return f"[ -x {w} ] || exit 0; {argv} </dev/null >/dev/null 2>&1"
