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

import contextlib
import functools
import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hyperscope.cluster import conf, hooks, jobs
from hyperscope.cluster.local import BACKUP, LocalProvider, free_ports, spec_digest
from hyperscope.cluster.slurm import Slurm
from hyperscope.cluster.spec import ClusterSpec, load_spec
from hyperscope.cluster.state import (
    ClusterError,
    ClusterState,
    NodeState,
    Progress,
    cluster_lock,
    clusters_dir,
    start_time,
    stop,
    update_running,
)
from hyperscope.errors import HyperscopeError

#: the reason on a node drained by an update, so an operator's ``sinfo -R`` says why; not
#: "hyperscope: ..." (the health check's prefix, which the agent acts on): a node left drained by
#: an update that gave up is the operator's to resume
REMOVING = "Removed by cluster update"
UPDATING = "Software update (cluster update-software)"
#: how long an update waits for the agent to finish a recovery it began on a node the update wants
AGENT_WAIT_S = 900.0


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
    """Status Updating for as long as the block runs, with this command recorded as the update (its
    pid and start time) and the nodes it acts on published (:meth:`act_on`): the agent keeps
    running and recovering every other node, and leaves those alone. Every change to the state is
    made on a fresh copy under the cluster's lock (:meth:`edit`), so what the agent records
    meanwhile is kept. InService again at the end, also when the update failed (the cluster still
    runs), and the agent started again if it died meanwhile."""

    def __init__(self, home: Path, name: str, start_agent: Callable[[ClusterState], object] | None) -> None:
        self.home, self.name, self.start_agent = home, name, start_agent
        self.dir = clusters_dir(home) / name

    def __enter__(self) -> Updating:
        with cluster_lock(self.home, self.name):
            state = ClusterState.load(self.dir)
            if (work := _recovering(state)) or (
                state.status != "InService" and not (state.status == "Updating" and state.update_pid)
            ):
                why = f" (the agent is recovering {', '.join(work)})" if work else ""
                raise ClusterError(
                    f"cluster {self.name!r} is {state.status}{why}; an update needs it InService"
                )
            if update_running(state):
                raise ClusterError(f"cluster {self.name!r}: another update runs (pid {state.update_pid})")
            state.status, state.update_pid = "Updating", os.getpid()
            state.update_start, state.updating = start_time(os.getpid()) or 0, []
            state.save()
        self.state = state
        return self

    @contextlib.contextmanager
    def edit(self) -> Iterator[ClusterState]:
        """The state, fresh, for one short change, saved at the end (the agent's way too)."""
        with cluster_lock(self.home, self.name):
            state = ClusterState.load(self.dir)
            yield state
            state.save()
        self.state = state

    def act_on(self, nodes: Iterable[str]) -> None:
        """Publish the nodes the update acts on now (the agent leaves them alone); the agent may
        have begun a recovery of one of them just before: it is waited for."""
        with self.edit() as state:
            state.updating = list(dict.fromkeys(nodes))
        _wait(
            "the agent to finish its recovery of " + ", ".join(self.state.updating),
            lambda: not set(_recovering(ClusterState.load(self.dir))) & set(self.state.updating),
            AGENT_WAIT_S,
        )

    def __exit__(self, *exc: object) -> None:
        with self.edit() as state:
            state.update_pid = state.update_start = 0
            state.updating = []
            state.status = "Updating" if _recovering(state) else "InService"
            if self.start_agent is not None:
                self.start_agent(state)  # None when it runs (it kept running: the usual case)


def _recovering(state: ClusterState) -> list[str]:
    return [n.name for n in state.nodes if n.status in ("Replacing", "Rebooting")]


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
    plan = plan_update(state, saved_spec(state), spec, _busy(slurm, {n.name for n in state.nodes}))
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
        _drained(slurm, sorted(gone), drain_timeout_s, "run `cluster update` again once they end")
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
        wanted = {n for n in added if up.state.node(n).slurm} | set(plan.promote)
        _wait(
            "the new nodes to be idle",
            lambda: wanted <= {x.name for x in slurm.nodes() if x.state == "IDLE" and not x.flags},
            60,
        )
        for name in added:
            say(name, "idle")
        with up.edit() as state:
            conf.keep_spec(spec, state)
            state.spec_path, state.spec_digest = str(spec.source or ""), spec_digest(spec)
    return plan


def drain(slurm: Slurm, nodes: Collection[str], reason: str, say: Progress) -> None:
    """Drain ``nodes`` (their jobs go on; nothing new lands there) and say which jobs hold them."""
    for n in nodes:
        slurm.run("scontrol", "update", f"nodename={n}", "state=drain", f"reason={reason}", check=False)
    if held := _busy(slurm, nodes):
        say(
            "*",
            "waiting for the jobs on "
            + ", ".join(f"{n} ({', '.join(map(str, j))})" for n, j in held.items()),
        )


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


def in_batches(
    up: Updating,
    slurm: Slurm,
    say: Progress,
    step: Callable[[NodeState], None],
    restart: Callable[[ClusterState, NodeState], None] | None,
    *,
    batch: int,
    drain_timeout_s: float,
) -> list[str]:
    """The update step on the nodes without a slurmd, then on the Slurm nodes ``batch`` at a time,
    each batch published (the agent leaves it alone), drained, its jobs waited for, updated,
    ``restart``-ed (a new slurmd, recorded under the lock) and resumed once it registered. A failed
    node stays drained with a reason of its own and the update stops there."""
    done: list[str] = []
    for node in [n for n in up.state.nodes if not n.slurm]:
        up.act_on([node.name])
        say(node.name, "running the update step")
        step(node)
        done.append(node.name)
    workers = [n.name for n in up.state.nodes if n.slurm]
    for i in range(0, len(workers), batch):
        group = workers[i : i + batch]
        up.act_on(group)
        drain(slurm, group, UPDATING, say)
        _drained(slurm, group, drain_timeout_s, "run `cluster update-software` again once they end")
        for n in group:
            node = up.state.node(n)
            say(n, "running the update step")
            try:
                step(node)
            except ClusterError as exc:  # the node's own reason: neither the agent nor we resume it
                why = f"Software update failed: {str(exc).splitlines()[0]}"[:200]
                slurm.run("scontrol", "update", f"nodename={n}", "state=drain", f"reason={why}", check=False)
                with up.edit() as state:
                    mine = state.node(n)
                    mine.output, mine.status, mine.since = node.output, "Failed", time.time()
                raise
            with up.edit() as state:
                mine = state.node(n)
                if restart is not None:
                    restart(state, mine)
                mine.output, mine.status, mine.since = node.output, "Running", time.time()
        _wait(f"{', '.join(group)} to register again", functools.partial(_back, slurm, group), 120)
        for n in group:
            slurm.run("scontrol", "update", f"nodename={n}", "state=resume", check=False)
            say(n, "updated and resumed")
            done.append(n)
    up.act_on([])
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
