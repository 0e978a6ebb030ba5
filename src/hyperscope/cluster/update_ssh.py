"""``cluster update`` and ``update-software`` on the ssh provider's hosts, and ``update-software`` on
an adopted (existing) cluster: the local provider's steps (:mod:`hyperscope.cluster.update`), each
done on the node's host through the ssh provider's commands.

ssh, ``update``: the same plan as data; a new node is made on a host its group lists that no node
of the cluster uses yet (or the group's one host); a new host gets the cluster's files from the
controller's host, as a replaced host does; slurm.conf is written for the new node list and pushed
to every host (the backup controller's too); slurmctld is restarted on its host without ``-c``
(running jobs go on; with a backup controller, the backup is stopped first and started again on the
new list once the primary answers) and the slurmds are told with ``scontrol reconfigure``; then
each new node's lifecycle script runs over ssh and its slurmd starts. Nodes that go are drained,
their jobs finish, and they are stopped on their hosts. ssh, ``update-software``: the spec's
lifecycle folder is pushed to every host, then the nodes a few at a time are drained, updated over
ssh (on_update.sh, else on_create.sh with ``HYPERSCOPE_UPDATE=1``), their slurmd restarted and
resumed.

existing: the nodes are the operator's, so ``update-software`` drains a few at a time and runs the
spec's ``recovery.update_command`` for each (as the agent runs ``reboot_command``: here, the node
as ``$1``, its host as ``$2``), then resumes it once Slurm hears from it again.
"""

from __future__ import annotations

import io
import shlex
import tarfile
import time
from pathlib import Path

from hyperscope.cluster import conf, operate, ssh_ctld, ssh_health, ssh_hooks
from hyperscope.cluster.slurm import Slurm, SlurmError
from hyperscope.cluster.spec import ClusterSpec, load_spec
from hyperscope.cluster.ssh import run_on_create, slurm_for
from hyperscope.cluster.ssh_hosts import Hosts, settings, start_command, stop_command
from hyperscope.cluster.ssh_nodes import SshOperator, node_stop_command
from hyperscope.cluster.state import (
    BACKUP_CTLD,
    ClusterError,
    ClusterState,
    NodeState,
    Proc,
    Progress,
    clusters_dir,
)
from hyperscope.cluster.update import UpdatePlan, plan_update, saved_spec
from hyperscope.cluster.updating import (
    REMOVING,
    UPDATING,
    Updating,
    busy_nodes,
    drain,
    finish,
    in_batches,
    wait_drained,
    wait_until,
)


def place(state: ClusterState, spec: ClusterSpec, plan: UpdatePlan) -> tuple[dict[str, str], list[str]]:
    """The host of each node the plan makes: a host its group lists and no node keeps (a group that
    lists several hosts has one node per host), or the group's one host; and what cannot be placed."""
    used = {n.host for n in state.nodes if n.name not in plan.remove}
    groups = {g.name: g for g in spec.groups}
    out: dict[str, str] = {}
    refused: list[str] = []
    for group, name, _ in plan.add:
        hosts = groups[group].hosts
        free = [h for h in hosts if h not in used and h not in out.values()]
        if len(hosts) == 1:
            out[name] = hosts[0]
        elif free:
            out[name] = free[0]
        else:
            refused.append(f"instance_groups.{group}.hosts: no listed host is free for {name}")
    if spec.ssh is not None and spec.ssh.remote_dir != state.ssh.get("remote_dir"):
        refused.append(f"ssh.remote_dir: the cluster's files stay in {state.ssh.get('remote_dir')}")
    return out, refused


def update(home: Path, spec: ClusterSpec, say: Progress, *, drain_timeout_s: float) -> UpdatePlan:
    state = ClusterState.load(clusters_dir(home) / spec.name)
    slurm = slurm_for(state)
    plan = plan_update(state, saved_spec(state), spec, busy_nodes(slurm, {n.name for n in state.nodes}))
    placed, unplaced = place(state, spec, plan)
    if refused := (*plan.refused, *unplaced):
        raise ClusterError(f"cannot update {spec.name!r} in place: " + "; ".join(refused))
    if plan.empty:
        say("*", "nothing to change")
        return plan
    say("*", plan.describe())
    hosts, root = Hosts(settings(state)), state.run_dir
    agent = (lambda st: operate.start_agent(home, st)) if spec.recovery.agent else None
    with Updating(home, spec.name, agent) as up:
        gone, added = set(plan.remove), [name for _, name, _ in plan.add]
        up.act_on([*plan.remove, *plan.promote, *added])
        drain(slurm, [n for n in plan.remove if up.state.node(n).slurm], REMOVING, say)
        wait_drained(slurm, sorted(gone), drain_timeout_s, "run `cluster update` again once they end")
        for name in plan.remove:
            node = up.state.node(name)
            mine = [p for p in up.state.procs if p.node == name]
            say(name, f"stopping it on {node.host}")
            try:
                hosts.run(node.host, node_stop_command(mine, root, name))
            except ClusterError as exc:  # a host that is gone has nothing left to stop
                say(name, f"could not stop it ({exc}); removed all the same")
            hosts.close(node.host)  # its ssh master: `delete` no longer knows a host left empty
        with up.edit() as state:
            state.procs = [p for p in state.procs if p.node not in gone]
            state.nodes = [n for n in state.nodes if n.name not in gone]
            for n in plan.promote:
                state.node(n).spare = False
            kinds = {g.name: g for g in spec.groups}
            port = max([state.ctld_port, *(x.port or 0 for x in state.nodes)])
            for group, name, spare in plan.add:
                worker = kinds[group].role == "worker"
                port += worker
                state.nodes.append(
                    NodeState(name, group, kinds[group].role, spare, worker,
                              port=port if worker else None, host=placed[name])
                )  # fmt: skip
            _push_conf(spec, state, hosts, {placed[n] for n in added})
        up.act_on([*plan.promote, *added, state.controller])
        _restart_controllers(up, hosts, slurm, say)
        slurm.run("scontrol", "reconfigure", check=False)
        up.act_on([*plan.promote, *added])
        gpus = {g.name: g.gpus_per_node for g in spec.groups}
        for name in added:
            node = up.state.node(name)
            say(name, f"running on_create.sh on {node.host}")
            try:  # minutes, maybe: under no lock
                run_on_create(hosts, up.state, node, gpus[node.group], str(spec.on_create))
                procs = SshOperator(up.state)._start(node) if node.slurm else []
            finally:
                with up.edit() as state:
                    made = state.node(name)
                    made.output, made.status, made.since = node.output, node.status, time.time()
            with up.edit() as state:
                state.procs += procs
                state.node(name).status = "Running"
        finish(up, slurm, spec, say, added, plan.promote)
    return plan


def _restart_controllers(up: Updating, hosts: Hosts, slurm: Slurm, say: Progress) -> None:
    """slurmctld (and the backup, with ``slurm.backup_controller``) on the new node list, running
    jobs kept (no ``-c``: both read the saved state on the shared folder). The backup is stopped
    first, so it cannot take control on the old list while the primary restarts, and is started
    again once the primary answers (it then stands by on the new list)."""
    state = up.state
    ctld = state.node(state.controller)
    if state.backup_host:
        say(ctld.name, f"stopping the backup slurmctld on {state.backup_host} (started again below)")
        with up.edit() as state:
            was = [p for p in state.procs if p.role == BACKUP_CTLD]
            hosts.run(state.backup_host, stop_command(was))
            state.procs = [p for p in state.procs if p not in was]
    say(ctld.name, f"restarting slurmctld on {ctld.host} with the new node list (running jobs go on)")
    with up.edit() as state:
        old = [p for p in state.procs if p.role == "slurmctld"]
        hosts.run(ctld.host, stop_command(old))
        argv = ["slurmctld", "-D", "-f", state.slurm_conf]
        pid, start = hosts.run(ctld.host, start_command(state.run_dir, "slurmctld.out", argv)).split()
        state.procs = [p for p in state.procs if p not in old]
        state.procs.append(Proc("slurmctld", int(pid), int(start), "", ctld.host))
    wait_until(f"slurmctld on {ctld.host} to answer", lambda: _pings(slurm), 60)
    if state.backup_host:
        say(ctld.name, f"starting the backup slurmctld on {state.backup_host} with the new node list")
        with up.edit() as state:
            ssh_ctld.start_backup(hosts, state, munged=False)
        wait_until(
            f"the backup slurmctld on {state.backup_host} to answer",
            lambda: set(_controllers(slurm).values()) == {"UP"},
            60,
        )


def _controllers(slurm: Slurm) -> dict[str, str]:
    try:
        return slurm.controllers()
    except SlurmError:
        return {}


def _pings(slurm: Slurm) -> bool:
    try:
        return slurm.ping()
    except SlurmError:
        return False


def _push_conf(spec: ClusterSpec, state: ClusterState, hosts: Hosts, new: set[str]) -> None:
    """slurm.conf, gres.conf and the resource config for the new node list, on every host; a new
    host first gets the cluster's files (the munge key among them) from the controller's host."""
    root = state.run_dir
    ops = SshOperator(state)
    for host in sorted(new):
        ops._provision(host)  # etc, lifecycle and the munge key, as for a replaced host
    names = {h: hosts.run(h, "hostname -s").strip() for h in ssh_ctld.every_host(state)}  # backup's too
    etc = Path(state.dir) / "etc"
    etc.joinpath("slurm.conf").write_text(
        conf.slurm_conf(spec, state, root=Path(root), hostnames={n.name: names[n.host] for n in state.nodes})
        # the nodes' health loops, Prolog and TaskProlog (ssh_health), --auto-resume (ssh_hooks)
        + "\n".join([*ssh_health.install(spec, state), *ssh_hooks.install(state, hosts, names)])
        + "\n"
    )
    gres = conf.gres_conf(spec, state, real=True)
    if gres:
        etc.joinpath("gres.conf").write_text(gres)
    etc.joinpath("resource_config.json").write_text(conf.resource_config(state))
    bundle = io.BytesIO()
    with tarfile.open(fileobj=bundle, mode="w") as tar:
        for f in sorted(etc.iterdir()):
            tar.add(f, arcname=f"etc/{f.name}")
    q = shlex.quote(root)
    for host in names:
        spools = " ".join(shlex.quote(f"{root}/spool/{n.name}") for n in state.nodes if n.host == host)
        # the backup controller's host may have no node (so no spool): the root alone then
        hosts.run(host, f"mkdir -p {q} {spools} && tar -C {q} -xf -", stdin=bundle.getvalue())


def _push_lifecycle(state: ClusterState, hosts: Hosts, lifecycle: Path) -> None:
    """The spec's lifecycle folder as it is now, on every host: the update step is the new one."""
    bundle = io.BytesIO()
    with tarfile.open(fileobj=bundle, mode="w") as tar:
        tar.add(lifecycle, arcname="lifecycle")
    q = shlex.quote(state.run_dir)
    for host in dict.fromkeys(n.host for n in state.nodes):
        hosts.run(host, f"rm -rf {q}/lifecycle && tar -C {q} -xf -", stdin=bundle.getvalue())


def update_software(
    home: Path, state: ClusterState, say: Progress, *, batch: int, drain_timeout_s: float
) -> list[str]:
    if state.provider == "existing":
        return _software_existing(home, state, say, batch=batch, drain_timeout_s=drain_timeout_s)
    spec = saved_spec(state) or load_spec(state.spec_path)
    hosts, slurm = Hosts(settings(state)), slurm_for(state)
    if spec.lifecycle_dir is not None:
        say("*", "copying the lifecycle scripts to every host")
        _push_lifecycle(state, hosts, spec.lifecycle_dir)
    gpus = {g.name: g.gpus_per_node for g in spec.groups}

    def step(node: NodeState) -> None:
        run_on_create(hosts, state, node, gpus[node.group], "the update step", update=True)

    def restart(st: ClusterState, node: NodeState) -> None:
        mine = [p for p in st.procs if p.role == "slurmd" and p.node == node.name]
        hosts.run(node.host, node_stop_command(mine, st.run_dir, node.name))
        argv = ["slurmd", "-D", "-N", node.name, "-f", st.slurm_conf]
        log = f"slurmd-{node.name}.out"
        pid, start = hosts.run(node.host, start_command(st.run_dir, log, argv, node.name)).split()
        st.procs = [p for p in st.procs if p not in mine]
        st.procs.append(Proc("slurmd", int(pid), int(start), node.name, node.host))
        hosts.run(node.host, ssh_health.start_loop_command(st, node.name, int(pid)))

    agent = (lambda st: operate.start_agent(home, st)) if spec.recovery.agent else None
    with Updating(home, state.name, agent) as up:
        return in_batches(up, slurm, say, step, restart, batch=batch, drain_timeout_s=drain_timeout_s)


def _software_existing(
    home: Path, state: ClusterState, say: Progress, *, batch: int, drain_timeout_s: float
) -> list[str]:
    """The operator's own update command, one drained node at a time (``batch`` together)."""
    spec = load_spec(Path(state.spec_path))
    command = spec.recovery.update_command
    if not command:
        raise ClusterError(
            f"{state.spec_path}: recovery.update_command: an adopted cluster's software is its "
            "operator's; name the command that updates one drained node (run with bash -c on this "
            "machine, the node as $1 and its host as $2, e.g. `ssh $2 'apt-get -y upgrade && "
            "systemctl restart slurmd'`)"
        )

    def step(node: NodeState) -> None:
        say(node.name, f"running recovery.update_command for {node.name}")
        operate.run_hook(command, state, node, UPDATING, what="update_command")

    agent = (lambda st: operate.start_agent(home, st)) if spec.recovery.agent else None
    with Updating(home, state.name, agent) as up:
        return in_batches(up, Slurm(Path(state.slurm_conf)), say, step, None, batch=batch,
                          drain_timeout_s=drain_timeout_s)  # fmt: skip
