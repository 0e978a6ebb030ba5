"""``hyperscope cluster update`` and ``update-software``, as HyperPod's UpdateCluster and
UpdateClusterSoftware: change group counts, add or remove groups, or run the lifecycle script's
update step node by node, without stopping a running job. Here: the plan and the local provider;
the ssh and existing providers' steps are in :mod:`hyperscope.cluster.update_ssh`.

What changes is decided first, as data (:func:`plan_update`, pure): spares promoted before new
nodes are made, idle nodes removed before busy ones, and what an update cannot change (the
controller, Slurm's settings, a group's GPUs, the shared folder) refused up front with the key
that differs. Applying it drains the nodes that go, waits for their jobs, and restarts slurmctld
(Slurm 22.05 learns a changed node list only at a restart; running jobs go on, recovered from its
saved state) and then ``scontrol reconfigure`` for the slurmds. The agent keeps running: the
update publishes the nodes it acts on (:class:`~hyperscope.cluster.updating.Updating`) and the
agent leaves only those alone, so a node that fails elsewhere meanwhile is still recovered.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path

from hyperscope.cluster import conf, hooks
from hyperscope.cluster.local import BACKUP, LocalProvider, free_ports
from hyperscope.cluster.slurm import Slurm
from hyperscope.cluster.spec import ClusterSpec, load_spec
from hyperscope.cluster.state import ClusterError, ClusterState, NodeState, Progress, clusters_dir, stop
from hyperscope.cluster.updating import (
    REMOVING,
    Updating,
    busy_nodes,
    drain,
    finish,
    in_batches,
    wait_drained,
)
from hyperscope.errors import HyperscopeError


@dataclass(frozen=True, slots=True)
class UpdatePlan:
    add: tuple[tuple[str, str, bool], ...] = ()  # (group, node, spare) to make
    remove: tuple[str, ...] = ()
    promote: tuple[str, ...] = ()  # spares that join the partition
    refused: tuple[str, ...] = ()  # "key: why", each a change an update cannot make

    @property
    def empty(self) -> bool:
        return not (self.add or self.remove or self.promote)

    def describe(self) -> str:
        parts = [f"add {', '.join(n for _, n, _ in self.add)}"] if self.add else []
        parts += [f"remove {', '.join(self.remove)}"] if self.remove else []
        parts += [f"move spare(s) {', '.join(self.promote)} into the partition"] if self.promote else []
        return "; ".join(parts) or "nothing to change"


#: why a backup controller is not added, moved or removed by an update: the controllers' state
#: would move (the cluster's folder or the shared one) while both daemons run with jobs in it
_BACKUP_REFUSED = (
    "slurm.backup_controller: a backup controller is added, moved or removed only when the cluster "
    "is made (`hyperscope cluster create --replace -f SPEC` re-creates it and stops its jobs); "
    "a live cluster keeps the controllers it was created with"
)


def _backup(spec: ClusterSpec) -> tuple[bool, str]:
    return (spec.slurm.backup_controller, spec.slurm.backup_host)


def _index(node: str) -> int:
    return int(node.rsplit("-", 1)[1])


def plan_update(
    state: ClusterState, old: ClusterSpec | None, new: ClusterSpec, busy: Collection[str]
) -> UpdatePlan:
    """From the nodes the cluster has (spares as they are now, after any swaps) to the counts of
    ``new``; ``busy``: nodes running a job, removed last."""
    refused = []
    if new.name != state.name or new.provider != state.provider:
        refused.append(f"name/provider: this is {state.provider} cluster {state.name!r}")
    ctl = [g for g in new.groups if g.role == "controller"]
    if not ctl or ctl[0].node_names()[0] != state.controller:
        refused.append(f"instance_groups: the controller group must stay as it is ({state.controller})")
    backup = _backup(new)
    if (backup != _backup(old)) if old is not None else (backup[0] != bool(state.backup_controller)):
        refused.append(_BACKUP_REFUSED)
    if new.slurm.partition != state.partition:
        refused.append("slurm: Slurm's settings cannot change on a live cluster")
    if str(new.shared_dir) != state.shared_dir:
        refused.append(f"shared_dir: the jobs' shared folder stays {state.shared_dir}")
    if old is not None:
        if replace(old.slurm, backup_controller=False, backup_host="") != replace(
            new.slurm, backup_controller=False, backup_host=""
        ):
            refused.append("slurm: Slurm's settings cannot change on a live cluster")
        before = {g.name: g for g in old.groups}
        for g in new.groups:
            if g.name in before and (before[g.name].gpus_per_node, before[g.name].role) != (
                g.gpus_per_node,
                g.role,
            ):
                refused.append(f"instance_groups.{g.name}: its role and gpus_per_node stay as created")
    add: list[tuple[str, str, bool]] = []
    remove: list[str] = []
    promote: list[str] = []
    for g in new.groups:
        if g.role == "controller":
            continue
        have = [n for n in state.nodes if n.group == g.name]
        active = sorted((n.name for n in have if not n.spare), key=_index)
        spares = sorted((n.name for n in have if n.spare), key=_index)
        while len(active) < g.count and spares:  # warm and configured: in at once; refilled below
            promote.append(spares.pop(0))
            active.append(promote[-1])
        # the idle and highest-numbered go first
        for pool, keep in ((active, g.count), (spares, g.spares)):
            for name in sorted(pool, key=lambda n: (n not in busy, _index(n)), reverse=True)[
                : max(0, len(pool) - keep)
            ]:
                remove.append(name)
        top = max((_index(n.name) for n in have), default=0)
        for spare, want in ((False, g.count - len(active)), (True, g.spares - len(spares))):
            for _ in range(max(0, want)):
                top += 1
                add.append((g.name, f"{g.name}-{top}", spare))
    kept = {g.name for g in new.groups}
    remove += [n.name for n in state.nodes if n.group not in kept and n.role != "controller"]
    return UpdatePlan(tuple(add), tuple(remove), tuple(promote), tuple(dict.fromkeys(refused)))


def saved_spec(state: ClusterState) -> ClusterSpec | None:
    """The spec as it was at create or the last update (None for a cluster made before copies
    were kept, or one whose copy no longer loads, e.g. its lifecycle folder moved)."""
    copy = Path(state.dir) / "etc" / conf.SPEC_COPY
    try:
        return load_spec(copy) if copy.is_file() else None
    except HyperscopeError:
        return None


def update(home: Path, spec: ClusterSpec, say: Progress, *, drain_timeout_s: float) -> UpdatePlan:
    """``cluster update -f SPEC`` on the spec's provider's cluster."""
    d = clusters_dir(home) / spec.name
    if not (d / "cluster.json").is_file():
        raise ClusterError(f"no cluster named {spec.name!r}; `hyperscope cluster create -f` makes it")
    state = ClusterState.load(d)
    if state.provider == "existing" or spec.provider == "existing":
        raise ClusterError(
            f"cluster {spec.name!r} is adopted (existing provider): its nodes are its operator's, "
            "in its own slurm.conf, and `cluster update` makes or removes only nodes hyperscope "
            "made; change them in Slurm, then `hyperscope cluster create -f` with the same spec "
            "refreshes the adopted node list (`cluster update-software` works on it)"
        )
    if spec.provider == "ssh" and state.provider == "ssh":
        from hyperscope.cluster import update_ssh

        return update_ssh.update(home, spec, say, drain_timeout_s=drain_timeout_s)
    return _update_local(LocalProvider(home), spec, say, drain_timeout_s=drain_timeout_s)


def _update_local(
    provider: LocalProvider, spec: ClusterSpec, say: Progress, *, drain_timeout_s: float
) -> UpdatePlan:
    state = ClusterState.load(provider.cluster_dir(spec.name))
    slurm = Slurm(Path(state.slurm_conf))
    plan = plan_update(state, saved_spec(state), spec, busy_nodes(slurm, {n.name for n in state.nodes}))
    if plan.refused:
        raise ClusterError(f"cannot update {spec.name!r} in place: " + "; ".join(plan.refused))
    if plan.empty:
        say("*", "nothing to change")
        return plan
    say("*", plan.describe())
    agent = provider.start_agent if spec.recovery.agent else None
    with Updating(provider.home, spec.name, agent) as up:
        gone = set(plan.remove)
        added = [name for _, name, _ in plan.add]
        up.act_on([*plan.remove, *plan.promote, *added])
        drain(slurm, [n for n in plan.remove if up.state.node(n).slurm], REMOVING, say)
        wait_drained(slurm, sorted(gone), drain_timeout_s, "run `cluster update` again once they end")
        with up.edit() as state:
            stop([p for p in state.procs if p.role == "slurmd" and p.node in gone])
            state.procs = [p for p in state.procs if not (p.role == "slurmd" and p.node in gone)]
            state.nodes = [n for n in state.nodes if n.name not in gone]
            for n in plan.promote:
                state.node(n).spare = False
            ports = _ports(spec, state, len(plan.add))
            kinds = {g.name: g for g in spec.groups}
            for (group, name, spare), port in zip(plan.add, ports, strict=True):
                worker = kinds[group].role == "worker"
                state.nodes.append(
                    NodeState(name, group, kinds[group].role, spare, worker, port=port if worker else None)
                )
            _rewrite(spec, state)
        up.act_on([*plan.promote, *added, state.controller])
        say(state.controller, "restarting slurmctld with the new node list (running jobs go on)")
        with up.edit() as state:  # the agent's watchdog leaves slurmctld to us meanwhile
            stop([p for p in state.procs if p.role in ("slurmctld", BACKUP)])
            provider.restart_controller(state)
        slurm.run("scontrol", "reconfigure", check=False)
        up.act_on([*plan.promote, *added])
        for name in added:
            node = up.state.node(name)
            say(name, "running on_create.sh")
            try:
                provider.run_on_create(spec, up.state, node)  # minutes, maybe: under no lock
            finally:
                with up.edit() as state:
                    mine = state.node(name)
                    mine.output, mine.status, mine.since = node.output, node.status, node.since
                    if mine.status != "Failed":
                        if mine.slurm:
                            provider.start_slurmd(state, mine, save=False)
                        mine.status, mine.since = "Running", time.time()
        finish(up, slurm, spec, say, added, plan.promote)
    return plan


def _ports(spec: ClusterSpec, state: ClusterState, n: int) -> list[int]:
    """Free ports, or the next ones after the highest in use when the spec fixes a port base."""
    if spec.slurm.port_base == 0:
        return free_ports(n)
    top = max([state.ctld_port, *(x.port or 0 for x in state.nodes)])
    return list(range(top + 1, top + 1 + n))


def _rewrite(spec: ClusterSpec, state: ClusterState) -> None:
    """slurm.conf, gres.conf and the resource config for the new node list; the munge key stays."""
    conf.write_files(spec, state, new_key=False)
    with open(state.slurm_conf, "a") as f:
        f.write("\n".join(hooks.install(spec, state)) + "\n")
    state.notes = list(dict.fromkeys(state.notes))
    state.save()


def update_software(home: Path, name: str, say: Progress, *, batch: int, drain_timeout_s: float) -> list[str]:
    """``cluster update-software NAME`` on the cluster's provider's nodes."""
    state = ClusterState.load(clusters_dir(home) / name)
    if state.provider in ("ssh", "existing"):
        from hyperscope.cluster import update_ssh

        return update_ssh.update_software(home, state, say, batch=batch, drain_timeout_s=drain_timeout_s)
    return _software_local(LocalProvider(home), name, say, batch=batch, drain_timeout_s=drain_timeout_s)


def _software_local(
    provider: LocalProvider, name: str, say: Progress, *, batch: int, drain_timeout_s: float
) -> list[str]:
    """The lifecycle script's update step on every node, ``batch`` Slurm nodes at a time: each is
    drained (its jobs finish first; the others keep the partition busy), updated, its slurmd
    restarted and resumed. A node whose update fails stays drained with a reason of its own —
    neither the agent nor the next batch touches it — and the update stops there. The nodes
    updated, in order."""
    state = ClusterState.load(provider.cluster_dir(name))
    spec = saved_spec(state) or load_spec(state.spec_path)
    slurm = Slurm(Path(state.slurm_conf))

    def step(node: NodeState) -> None:
        provider.run_on_create(spec, state, node, update=True)

    def restart(state: ClusterState, node: NodeState) -> None:
        stop([p for p in state.procs if p.role == "slurmd" and p.node == node.name])
        state.procs = [p for p in state.procs if not (p.role == "slurmd" and p.node == node.name)]
        provider.start_slurmd(state, node, save=False)

    agent = provider.start_agent if spec.recovery.agent else None
    with Updating(provider.home, name, agent) as up:
        return in_batches(up, slurm, say, step, restart, batch=batch, drain_timeout_s=drain_timeout_s)
