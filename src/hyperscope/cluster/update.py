"""``hyperscope cluster update`` and ``update-software`` on a live local cluster, as HyperPod's
UpdateCluster and UpdateClusterSoftware: change group counts, add or remove groups, or run the
lifecycle script's update step node by node, without stopping a running job.

What changes is decided first, as data (:func:`plan_update`, pure): spares promoted before new
nodes are made, idle nodes removed before busy ones, and what an update cannot change (the
controller, Slurm's settings, a group's GPUs, the shared folder) refused up front with the key
that differs. Applying it drains the nodes that go, waits for their jobs, and restarts slurmctld
(Slurm 22.05 learns a changed node list only at a restart; running jobs go on, recovered from its
saved state) and then ``scontrol reconfigure`` for the slurmds. The agent is stopped meanwhile
(status Updating, which its watchdog leaves alone) so it takes neither a drained nor a new node for
a failure, and started again at the end.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from hyperscope.cluster import conf, hooks, jobs, operate
from hyperscope.cluster.local import BACKUP, LocalProvider, free_ports, spec_digest
from hyperscope.cluster.slurm import Slurm
from hyperscope.cluster.spec import ClusterSpec, load_spec
from hyperscope.cluster.state import ClusterError, ClusterState, NodeState, Progress, cluster_lock, stop
from hyperscope.errors import HyperscopeError

#: the reason on a node drained by an update, so an operator's ``sinfo -R`` says why; not
#: "hyperscope: ..." (the health check's prefix, which the agent acts on): a node left drained by
#: an update that gave up is the operator's to resume
REMOVING = "Removed by cluster update"
UPDATING = "Software update (cluster update-software)"


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
    if new.slurm.partition != state.partition or bool(new.slurm.backup_controller) != bool(
        state.backup_controller
    ):
        refused.append("slurm: Slurm's settings cannot change on a live cluster")
    if str(new.shared_dir) != state.shared_dir:
        refused.append(f"shared_dir: the jobs' shared folder stays {state.shared_dir}")
    if old is not None:
        if old.slurm != new.slurm:
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


def _wait(what: str, ready: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.5)


def _busy(slurm: Slurm, nodes: Collection[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for j in slurm.jobs():
        if j.state in ("RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED") and j.nodes:
            for n in jobs.expand_hostlist(j.nodes):
                if n in nodes:
                    out.setdefault(n, []).append(j.id)
    return out


class Updating:
    """Status Updating with the agent stopped, for as long as the block runs; InService and the
    agent back at the end, also when the update failed (the cluster still runs)."""

    def __init__(self, provider: LocalProvider, name: str, *, agent: bool) -> None:
        self.provider, self.name, self.agent = provider, name, agent

    def __enter__(self) -> ClusterState:
        with cluster_lock(self.provider.home, self.name):
            state = ClusterState.load(self.provider.cluster_dir(self.name))
            if state.status != "InService":
                raise ClusterError(f"cluster {self.name!r} is {state.status}; an update needs it InService")
            state.status = "Updating"
            operate.stop_agent(state)
            state.save()
        self.state = state
        return state

    def __exit__(self, *exc: object) -> None:
        state = self.state
        state.status = "InService"
        state.save()
        if self.agent:
            self.provider.start_agent(state)


def update(
    provider: LocalProvider, spec: ClusterSpec, say: Progress, *, drain_timeout_s: float
) -> UpdatePlan:
    if spec.provider != "local":
        raise ClusterError(f"`cluster update` is built for the local provider only, not {spec.provider}")
    d = provider.cluster_dir(spec.name)
    if not (d / "cluster.json").is_file():
        raise ClusterError(f"no cluster named {spec.name!r}; `hyperscope cluster create -f` makes it")
    state = ClusterState.load(d)
    slurm = Slurm(Path(state.slurm_conf))
    plan = plan_update(state, saved_spec(state), spec, _busy(slurm, {n.name for n in state.nodes}))
    if plan.refused:
        raise ClusterError(f"cannot update {spec.name!r} in place: " + "; ".join(plan.refused))
    if plan.empty:
        say("*", "nothing to change")
        return plan
    say("*", plan.describe())
    with Updating(provider, spec.name, agent=spec.recovery.agent) as state:
        gone = set(plan.remove)
        drained = [n for n in plan.remove if state.node(n).slurm]
        for n in drained:
            slurm.run("scontrol", "update", f"nodename={n}", "state=drain", f"reason={REMOVING}", check=False)
        if held := _busy(slurm, gone):
            say(
                "*",
                "waiting for the jobs on "
                + ", ".join(f"{n} ({', '.join(map(str, j))})" for n, j in held.items()),
            )
        _drained(slurm, sorted(gone), drain_timeout_s, "run `cluster update` again once they end")
        stop([p for p in state.procs if p.role == "slurmd" and p.node in gone])
        state.procs = [p for p in state.procs if not (p.role == "slurmd" and p.node in gone)]
        state.nodes = [n for n in state.nodes if n.name not in gone]
        for n in plan.promote:
            state.node(n).spare = False
        ports = _ports(spec, state, len(plan.add))
        kinds = {g.name: g for g in spec.groups}
        for (group, name, spare), port in zip(plan.add, ports, strict=True):
            g = kinds[group]
            worker = g.role == "worker"
            state.nodes.append(
                NodeState(
                    name=name,
                    group=group,
                    role=g.role,
                    spare=spare,
                    slurm=worker,
                    port=port if worker else None,
                )
            )
        _rewrite(spec, state)
        say(state.controller, "restarting slurmctld with the new node list (running jobs go on)")
        stop([p for p in state.procs if p.role in ("slurmctld", BACKUP)])
        provider.restart_controller(state)
        slurm.run("scontrol", "reconfigure", check=False)
        new = [state.node(name) for _, name, _ in plan.add]
        for node in new:
            say(node.name, "running on_create.sh")
            provider.run_on_create(spec, state, node)
            if node.slurm:
                provider.start_slurmd(state, node)
            node.status, node.since = "Running", time.time()
        wanted = {n.name for n in new if n.slurm} | set(plan.promote)
        _wait(
            "the new nodes to be idle",
            lambda: wanted <= {x.name for x in slurm.nodes() if x.state == "IDLE" and not x.flags},
            60,
        )
        for node in new:
            say(node.name, "idle")
        conf.keep_spec(spec, state)
        state.spec_path, state.spec_digest = str(spec.source or ""), spec_digest(spec)
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


def update_software(
    provider: LocalProvider, name: str, say: Progress, *, batch: int, drain_timeout_s: float
) -> list[str]:
    """The lifecycle script's update step on every node, ``batch`` Slurm nodes at a time: each is
    drained (its jobs finish first; the others keep the partition busy), updated, its slurmd
    restarted and resumed. A node whose update fails stays drained with a reason of its own —
    neither the agent nor the next batch touches it — and the update stops there. The nodes
    updated, in order."""
    state = ClusterState.load(provider.cluster_dir(name))
    if state.provider != "local":
        raise ClusterError(
            f"`cluster update-software` is built for the local provider only, not {state.provider}"
        )
    spec = saved_spec(state) or load_spec(state.spec_path)
    slurm = Slurm(Path(state.slurm_conf))
    done: list[str] = []
    with Updating(provider, name, agent=spec.recovery.agent) as state:
        for node in [n for n in state.nodes if not n.slurm]:
            say(node.name, "running the update step")
            provider.run_on_create(spec, state, node, update=True)
            done.append(node.name)
        workers = [n.name for n in state.nodes if n.slurm]
        for i in range(0, len(workers), batch):
            group = workers[i : i + batch]
            for n in group:
                slurm.run(
                    "scontrol", "update", f"nodename={n}", "state=drain", f"reason={UPDATING}", check=False
                )
            if held := _busy(slurm, group):
                say(
                    "*",
                    "waiting for the jobs on "
                    + ", ".join(f"{n} ({', '.join(map(str, j))})" for n, j in held.items()),
                )
            _drained(slurm, group, drain_timeout_s, "run `cluster update-software` again once they end")
            for n in group:
                node = state.node(n)
                say(n, "running the update step")
                try:
                    provider.run_on_create(spec, state, node, update=True)
                except ClusterError:
                    why = f"Software update failed: see log/on_update-{n}.log or log/on_create-{n}.log"
                    slurm.run(
                        "scontrol", "update", f"nodename={n}", "state=drain", f"reason={why}", check=False
                    )
                    raise
                stop([p for p in state.procs if p.role == "slurmd" and p.node == n])
                state.procs = [p for p in state.procs if not (p.role == "slurmd" and p.node == n)]
                provider.start_slurmd(state, node)
                node.status, node.since = "Running", time.time()
            _wait(f"{', '.join(group)} to register again", functools.partial(_back, slurm, group), 60)
            for n in group:
                slurm.run("scontrol", "update", f"nodename={n}", "state=resume", check=False)
                say(n, "updated and resumed")
                done.append(n)
    return done


def _drained(slurm: Slurm, nodes: list[str], timeout: float, then: str) -> None:
    """Wait for the jobs on drained ``nodes`` to end; past ``timeout`` say which jobs hold them."""
    try:
        _wait(f"the jobs on {', '.join(nodes)} to end", lambda: not _busy(slurm, nodes), timeout)
    except ClusterError:
        held = _busy(slurm, nodes)
        jobs_ = ", ".join(f"{n}: job {', '.join(map(str, j))}" for n, j in held.items())
        raise ClusterError(
            f"jobs still run after {timeout:g} s ({jobs_}); those nodes stay drained: {then}, or "
            f"`scontrol update nodename={','.join(held)} state=resume` to give up the change"
        ) from None


def _back(slurm: Slurm, nodes: list[str]) -> bool:
    """Registered again after a slurmd restart: answering, not DOWN."""
    up = {x.name for x in slurm.nodes() if x.state != "DOWN" and "NOT_RESPONDING" not in x.flags}
    return set(nodes) <= up
