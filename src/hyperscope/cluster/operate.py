"""What the recovery agent asks of a provider, and nothing more: the seam that lets one agent loop
(detect → decide → act, :mod:`hyperscope.recovery.agent`) run on every provider.

A provider's :class:`NodeOperator` answers what Slurm says (its commands, here or on the
controller's host), whether a node's slurmd is still alive where the provider can tell cheaply,
and does the two things Slurm cannot: reboot a node and re-create it (new hardware, or the same
host wiped and its lifecycle script run again). Fencing a node and swapping a spare into the
partition are Slurm commands (:mod:`hyperscope.cluster.nodeops`), the same for every provider.

An operation either succeeds, returning the node's new daemons (the agent records them), or says
it cannot be done here: a :class:`Outcome` with a ``ticket``: the node needs hardware (its host
does not answer, or the spec names no command that replaces it), which the agent shows in
``list-nodes`` and ``agent.log`` and hands to the spec's ``recovery.ticket_command``.

Operations never save the cluster state: several nodes recover at once, each on its own thread,
and the agent merges each result into the state under a short lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from hyperscope.cluster.slurm import Slurm
from hyperscope.cluster.spec import RecoverySettings
from hyperscope.cluster.state import ClusterError, ClusterState, NodeState, Proc, adopt, stop

HOOK_TIMEOUT_S = 600.0
#: the agent's lock, already taken for it by whoever started it (see :func:`agent_lock`)
AGENT_LOCK_FD_ENV = "HYPERSCOPE_AGENT_LOCK_FD"


@dataclass(slots=True)
class Outcome:
    #: the node's daemons after the operation: they replace the ones recorded for it
    procs: list[Proc] = field(default_factory=list)
    #: not done: why the node needs an operator (new hardware); "" = done
    ticket: str = ""


class NodeOperator(Protocol):
    """One provider's hands on one cluster's nodes (local, ssh and existing implement it)."""

    def slurm(self) -> Slurm:
        """Slurm's commands for the cluster."""
        ...

    def daemon_alive(self, node: NodeState) -> bool:
        """The provider's own view of the node's slurmd, where it is cheap to have (a /proc read);
        True where it is not (a remote host): Slurm's NOT_RESPONDING then says it."""
        ...

    def reboot(self, node: NodeState, reason: str) -> Outcome:
        """The node restarted and back in service, or a ticket."""
        ...

    def recreate(self, node: NodeState, reason: str) -> Outcome:
        """A fresh node under the same name (nothing of the old one kept), back in service and
        left out of the partition if it is a spare now; or a ticket."""
        ...


def operator_for(state: ClusterState, home: Path) -> NodeOperator:
    """The cluster's provider's operator (imported here: the providers import this module)."""
    if state.provider == "local":
        from hyperscope.cluster.nodeops import LocalOperator

        return LocalOperator(home, state)
    if state.provider == "ssh":
        from hyperscope.cluster.ssh_nodes import SshOperator

        return SshOperator(state)
    if state.provider == "existing":
        from hyperscope.cluster.existing import ExistingOperator

        return ExistingOperator(state)
    raise ClusterError(f"cluster {state.name!r}: no recovery for the {state.provider} provider")


def run_hook(
    command: str, state: ClusterState, node: NodeState, reason: str, *, what: str
) -> subprocess.CompletedProcess[str]:
    """A command of the spec's ``recovery:`` on this machine: ``bash -c COMMAND hyperscope NODE
    HOST REASON``, with the same facts in ``HYPERSCOPE_NODE``/``_HOST``/``_REASON``/``_CLUSTER``.
    Raises with the command's output when it fails: a reboot that did not happen must not be
    waited for."""
    env = {
        **os.environ,
        "SLURM_CONF": state.slurm_conf,
        "HYPERSCOPE_CLUSTER": state.name,
        "HYPERSCOPE_NODE": node.name,
        "HYPERSCOPE_HOST": node.host,
        "HYPERSCOPE_REASON": reason,
    }
    argv = ["bash", "-c", command, "hyperscope", node.name, node.host, reason]
    try:
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=HOOK_TIMEOUT_S, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"recovery.{what} ran over {HOOK_TIMEOUT_S:g} s for node {node.name}") from exc
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[-1000:] or "(no output)"
        raise ClusterError(
            f"recovery.{what} `{command}` exited with status {done.returncode} for node {node.name}: {said}"
        )
    return done


def open_ticket(recovery: RecoverySettings, state: ClusterState, node: NodeState, reason: str) -> str:
    """Hand the ticket to the spec's ``ticket_command``; what happened to it, for the log."""
    if not recovery.ticket_command:
        return "no recovery.ticket_command in the spec: shown in list-nodes and agent.log only"
    try:
        run_hook(recovery.ticket_command, state, node, reason, what="ticket_command")
    except ClusterError as exc:
        return str(exc)
    return "recovery.ticket_command run"


@contextlib.contextmanager
def agent_lock(cluster_dir: Path) -> Iterator[dict[str, str] | None]:
    """The agent's lock, taken before the agent is spawned and inherited by it: a Python start-up
    on a loaded machine can take longer than a slurmd's watchdog interval, and a watchdog that
    found the lock free would start a second agent (the first then exits, and the pid recorded
    at create is stale). Yields the environment to add to the child's, or None when an agent
    already holds the lock (a watchdog's was quicker; it records itself)."""
    try:
        f = open(cluster_dir / "agent.lock", "a")  # noqa: SIM115 - handed to the child
    except OSError:
        yield {}
        return
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield None
            return
        yield {AGENT_LOCK_FD_ENV: str(f.fileno())}  # closed here; the child's copy keeps the lock


def start_agent(home: Path, state: ClusterState) -> Proc | None:
    """``hyperscope agent`` on this machine (the one that created or adopted the cluster): one more
    recorded daemon, stopped first by delete. None when an agent runs already."""
    argv = [sys.executable, "-m", "hyperscope", "agent", "--cluster", state.name, "--home", str(home)]
    with agent_lock(Path(state.dir)) as lock_env:
        if lock_env is None:
            return None
        env = {**os.environ, "HYPERSCOPE_CLUSTER_DIR": state.dir, **lock_env}
        fds = tuple(int(v) for v in lock_env.values())
        with open(Path(state.dir) / "log" / "agent.out", "ab") as out:
            child = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True, pass_fds=fds,
            )  # fmt: skip
    proc = adopt(child, "agent")
    state.procs.append(proc)
    state.save()
    return proc


def stop_agent(state: ClusterState) -> None:
    """Before anything else of a cluster is stopped, so it replaces nothing meanwhile; the ssh
    provider's agent keeper (``recovery.keeper``) first, so it does not start the agent again."""
    for role in ("keeper", "agent"):
        stop([p for p in state.procs if p.role == role and not p.host])
    state.procs = [p for p in state.procs if p.role not in ("keeper", "agent")]
