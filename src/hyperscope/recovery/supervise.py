"""The agent as the supervisor of a cluster's controllers, on each provider.

* **local**: munged, slurmctld or the backup slurmctld gone (a /proc look, every pass) is started
  again (slurmctld recovers its jobs from its saved state), so a killed slurmctld does not leave
  the cluster unable to schedule or to finish its jobs.
* **ssh**: the same, on the controllers' hosts: every :data:`ssh_ctld.CHECK_EVERY_S` seconds one
  ssh step per controller host (the primary's, and the backup's with
  ``slurm.backup_controller: HOST``) finds which recorded daemons are gone, and each is started
  again on its own host; a restarted primary takes control back from the backup. The agent also
  starts its keeper again if it died (:mod:`hyperscope.recovery.keeper`: they watch each other).
* **existing**: the controllers are the operator's. The agent's Slurm commands reach whichever
  controller answers (slurm.conf names both), ``scontrol ping`` is read at the same pace, and a
  controller found DOWN is logged once; it is restarted only through the spec's
  ``recovery.restart_controller_command`` (the controller's name as ``$1``, its address as
  ``$2``), never otherwise. The health loops the spec opted in to (``recovery.health_loops``)
  are hyperscope's own: one that died is started again on its host at the same look.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyperscope.cluster import ssh_ctld
from hyperscope.cluster.operate import run_hook
from hyperscope.cluster.slurm import SlurmError
from hyperscope.cluster.spec import load_spec
from hyperscope.cluster.state import (
    ClusterError,
    ClusterState,
    NodeState,
    Proc,
    alive,
    cluster_lock,
    updating_now,
)
from hyperscope.errors import HyperscopeError
from hyperscope.recovery import keeper
from hyperscope.recovery.decide import Action, Kind, decide_daemons

if TYPE_CHECKING:
    from hyperscope.recovery.agent import Agent

#: how long a restarted remote slurmctld may take to answer ``scontrol ping``
RESTART_TIMEOUT_S = 30.0


def supervise(agent: Agent, state: ClusterState) -> list[Action]:
    """The restarts made this pass (one action), or nothing."""
    if state.controller in updating_now(state):
        return []  # a `cluster update` restarting slurmctld with a new node list: its own
    if state.provider == "local":
        dead = [p for p in state.procs if p.role in ssh_ctld.ROLES and not alive(p)]
        return _restart(agent, dead, _local(agent)) if dead else []
    now = agent.clock()
    if state.provider not in ("ssh", "existing") or now - agent.ctld_checked < ssh_ctld.CHECK_EVERY_S:
        return []
    agent.ctld_checked = now
    keeper.ensure(agent.home, state)  # the agent's own keeper (it, in turn, restarts this agent)
    if state.provider == "existing":
        return _loops(agent, state) + _adopted(agent, state)
    from hyperscope.cluster.ssh_hosts import Hosts, settings  # the ssh provider's only

    hosts = Hosts(settings(state))
    dead = ssh_ctld.dead(hosts, state)
    return _restart(agent, dead, _remote(agent, hosts)) if dead else []


def _local(agent: Agent) -> Callable[[ClusterState, list[Proc]], None]:
    def restart(fresh: ClusterState, dead: list[Proc]) -> None:
        from hyperscope.cluster.local import LocalProvider  # the local provider's only

        LocalProvider(agent.home).restart_controller(fresh)

    return restart


def _remote(agent: Agent, hosts: ssh_ctld.Runner) -> Callable[[ClusterState, list[Proc]], None]:
    def restart(fresh: ClusterState, dead: list[Proc]) -> None:
        keys = {(p.host, p.pid, p.start) for p in dead}
        gone = [p for p in fresh.procs if (p.host, p.pid, p.start) in keys]
        ssh_ctld.restart(hosts, fresh, gone)
        fresh.save()

    return restart


def _restart(
    agent: Agent, dead: list[Proc], restart: Callable[[ClusterState, list[Proc]], None]
) -> list[Action]:
    dead.sort(key=lambda p: p.role != "munged")
    (action,) = decide_daemons([(p.role, p.pid) for p in dead])
    base: dict[str, Any] = {"kind": action.kind.value, "nodes": list(action.nodes), "job": None}
    hosts = sorted({p.host for p in dead if p.host})
    if hosts:
        base["hosts"] = hosts
    agent.log({**base, "phase": "decided", "reason": action.reason})
    t0 = agent.clock()
    try:
        with cluster_lock(agent.home, agent.name):
            fresh = ClusterState.load(agent.dir)
            if fresh.status in ("InService", "Updating"):
                restart(fresh, dead)
        if hosts:
            _wait_up(agent, fresh)
    except (ClusterError, SlurmError, OSError) as exc:
        agent.log({**base, "phase": "failed", "error": str(exc), "seconds": round(agent.clock() - t0, 3)})
        return [action]
    agent.log({**base, "phase": "done", "seconds": round(agent.clock() - t0, 3)})
    return [action]


def _wait_up(agent: Agent, state: ClusterState) -> None:
    """Every controller (the restarted one among them) answers ``scontrol ping``."""
    from hyperscope.cluster.ssh import slurm_for

    slurm = slurm_for(state)
    deadline = time.monotonic() + RESTART_TIMEOUT_S
    while True:
        up = slurm.controllers()
        if up and all(s == "UP" for s in up.values()):
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"started again, but `scontrol ping` says {up or 'nothing'}")
        time.sleep(0.5)


def _loops(agent: Agent, state: ClusterState) -> list[Action]:
    """An adopted cluster's health loops (``recovery.health_loops``) that died, started again on
    their hosts (no slurmd of the operator's runs a wrapper of ours that would): one action."""
    from hyperscope.cluster import existing_ops  # the existing provider's only

    if not any(p.role == existing_ops.HEALTH for p in state.procs):
        return []
    dead = existing_ops.dead_loops(state)
    if not dead:
        return []
    why = ", ".join(f"the health loop of {p.node} (pid {p.pid} on {p.host}) is gone" for p in dead)
    action = Action(Kind.RESTART, tuple(p.node for p in dead), f"{why}: started again")
    base: dict[str, Any] = {"kind": action.kind.value, "nodes": list(action.nodes), "job": None,
                            "hosts": sorted({p.host for p in dead})}  # fmt: skip
    agent.log({**base, "phase": "decided", "reason": action.reason})
    t0 = agent.clock()
    keys = {(p.host, p.pid, p.start) for p in dead}
    try:
        spec = load_spec(Path(state.spec_path))
        config = agent._ops(state).slurm().config()
        with agent._update() as fresh:
            fresh.procs = [p for p in fresh.procs if (p.host, p.pid, p.start) not in keys]
            problems = existing_ops.start_health_loops(spec, fresh, config, only=set(action.nodes))
        if problems:
            raise ClusterError("; ".join(problems))
    except (HyperscopeError, SlurmError, OSError) as exc:
        agent.log({**base, "phase": "failed", "error": str(exc), "seconds": round(agent.clock() - t0, 3)})
        return [action]
    agent.log({**base, "phase": "done", "seconds": round(agent.clock() - t0, 3)})
    return [action]


def _adopted(agent: Agent, state: ClusterState) -> list[Action]:
    """An operator's controllers: watched, logged once per change, restarted only by the spec's
    own command."""
    try:
        ping = agent._ops(state).slurm().controllers()
    except SlurmError:
        return []
    down = sorted(h for h, s in ping.items() if s != "UP")
    seen = ",".join(down)
    if seen == agent.ctld_noted:
        return []
    agent.ctld_noted = seen
    if not down:
        agent.log({"kind": "controller", "nodes": sorted(ping), "job": None, "phase": "done",
                   "reason": "every controller answers `scontrol ping`"})  # fmt: skip
        return []
    serving = sorted(h for h, s in ping.items() if s == "UP")
    command = agent.recovery(state).restart_controller_command
    why = f"{', '.join(down)} DOWN (scontrol ping); " + (
        f"{', '.join(serving)} in control" if serving else "no controller answers"
    )
    if not command:
        left = f"{why}: the operator's, left alone (no recovery.restart_controller_command)"
        agent.log({"kind": "controller", "nodes": down, "job": None, "phase": "decided", "reason": left})
        return []
    action = Action(Kind.RESTART, tuple(down), f"{why}: recovery.restart_controller_command")
    base: dict[str, Any] = {"kind": action.kind.value, "nodes": down, "job": None}
    agent.log({**base, "phase": "decided", "reason": action.reason})
    addrs = _addresses(agent, state)
    for host in down:
        node = NodeState(host, "controller", "controller", False, False, host=addrs.get(host, host))
        try:
            run_hook(command, state, node, action.reason, what="restart_controller_command")
        except ClusterError as exc:
            agent.log({**base, "phase": "failed", "error": str(exc)})
            agent.ctld_noted = ""  # tried again at the next look
            return [action]
    agent.log({**base, "phase": "done"})
    return [action]


def _addresses(agent: Agent, state: ClusterState) -> dict[str, str]:
    """Each controller's name → its address, as slurm.conf's ``SlurmctldHost=NAME(ADDR)`` says."""
    try:
        config = agent._ops(state).slurm().config()
    except SlurmError:
        return {}
    out = {}
    for key, value in config.items():
        name, _, addr = value.partition("(")
        if key.startswith("SlurmctldHost") and addr.endswith(")"):
            out[name] = addr[:-1]
    return out


__all__ = ["supervise"]
