"""Operations on one node of a local cluster, as the recovery agent applies them: fence it (Slurm
DOWN, so its jobs are requeued at once), reboot it (its slurmd restarted), re-create it under the
same name (everything of it stopped, its spool wiped, ``on_create.sh`` run again, a new slurmd),
and swap a spare into the partition in its place.

A node's processes are its slurmd (recorded, by PID and start time), its slurmstepds (double-forked,
so found by the node marker they inherit from that slurmd) and its job tasks (``SLURMD_NODENAME``
with this cluster's ``SLURM_CONF``): the same set notes/local-slurm.md kills to simulate a crash.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

from hyperscope.cluster import conf, hooks
from hyperscope.cluster.local import MARKER, NODE_MARKER, LocalProvider
from hyperscope.cluster.slurm import Slurm, SlurmError
from hyperscope.cluster.spec import load_spec
from hyperscope.cluster.state import ClusterError, ClusterState, NodeState, Proc, alive, start_time, stop

REGISTER_TIMEOUT_S = 30.0


def node_pids(state: ClusterState, node: str) -> list[int]:
    """Every live process of ``node``: slurmd, slurmstepds and job tasks (not this process)."""
    ours = {f"{MARKER}={state.dir}".encode(), f"{NODE_MARKER}={node}".encode()}
    task = {f"SLURM_CONF={state.slurm_conf}".encode(), f"SLURMD_NODENAME={node}".encode()}
    pids = {p.pid for p in state.procs if p.role == "slurmd" and p.node == node and alive(p)}
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            env = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if ours <= env or task <= env:
            pids.add(int(entry.name))
    return sorted(pids)


def signal_node(state: ClusterState, node: str, sig: signal.Signals) -> list[int]:
    """Send ``sig`` to every process of ``node``: SIGKILL is a crash, SIGSTOP a frozen node."""
    pids = node_pids(state, node)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    return pids


def slurmd_alive(state: ClusterState, node: str) -> bool:
    return any(p.role == "slurmd" and p.node == node and alive(p) for p in state.procs)


def _stop_node(state: ClusterState, node: str) -> None:
    procs = [
        Proc("node", pid, t, node) for pid in node_pids(state, node) if (t := start_time(pid)) is not None
    ]
    for p in procs:  # a frozen (SIGSTOPped) process ignores SIGTERM until continued
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGCONT)
    stop(procs, grace=2.0)
    state.procs = [p for p in state.procs if not (p.role == "slurmd" and p.node == node)]


def fence(slurm: Slurm, node: str, reason: str) -> None:
    """Slurm DOWN with our reason: its running jobs are requeued now (JobRequeue=1), not after
    Slurm's own timeouts, and nothing new lands there."""
    slurm.run("scontrol", "update", f"nodename={node}", "state=down", f"reason={reason[:200]}")


def _wait_registered(slurm: Slurm, node: str, since: float) -> None:
    deadline = time.monotonic() + REGISTER_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            found = {n.name: n for n in slurm.nodes()}.get(node)
        except SlurmError:
            found = None
        if found is not None and "NOT_RESPONDING" not in found.flags and found.slurmd_start:
            try:
                started = time.mktime(time.strptime(found.slurmd_start, "%Y-%m-%dT%H:%M:%S"))
            except ValueError:
                started = 0.0
            if started >= since - 1:
                return
        time.sleep(0.1)
    raise ClusterError(f"node {node}: its new slurmd did not register within {REGISTER_TIMEOUT_S:g} s")


def _resume(slurm: Slurm, node: str) -> None:
    slurm.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)


def reboot(provider: LocalProvider, state: ClusterState, node: NodeState, reason: str) -> None:
    """Stop everything of the node and start its slurmd again; then return it to service."""
    slurm = Slurm(Path(state.slurm_conf))
    fence(slurm, node.name, f"hyperscope agent: rebooting: {reason}")
    _stop_node(state, node.name)
    t0 = time.time()
    provider.start_slurmd(state, node)
    _wait_registered(slurm, node.name, t0)
    _resume(slurm, node.name)


def recreate(provider: LocalProvider, state: ClusterState, node: NodeState) -> None:
    """A fresh node under the same name: nothing of the old one survives (processes, spool)."""
    slurm = Slurm(Path(state.slurm_conf))
    _stop_node(state, node.name)
    spool = Path(state.run_dir) / "spool" / node.name
    shutil.rmtree(spool, ignore_errors=True)
    spool.mkdir(parents=True)
    # new hardware: a fault rehearsed on the old node (its fault file) is gone with it
    (hooks.faults_dir(state) / f"{node.name}.json").unlink(missing_ok=True)
    spec = load_spec(state.spec_path)
    conf.fake_gpus(spec, state, only=node.name)  # new hardware: all its GPUs there again
    provider.run_on_create(spec, state, node)
    t0 = time.time()
    provider.start_slurmd(state, node)
    _wait_registered(slurm, node.name, t0)
    _resume(slurm, node.name)


def swap_in(slurm: Slurm, state: ClusterState, failed: NodeState, spare: NodeState) -> None:
    """The spare joins the partition in the failed node's place; the failed one leaves it and
    becomes the group's spare once re-created."""
    members = [n.name for n in state.nodes if n.slurm and not n.spare and n.name != failed.name]
    members.append(spare.name)
    slurm.run("scontrol", "update", f"partitionname={state.partition}", f"nodes={','.join(sorted(members))}")
    spare.spare, failed.spare = False, True
