"""The ssh provider: the spec's nodes on hosts hyperscope reaches with the system's OpenSSH.

Everything the local provider does on this machine is done on each node's host through one
``ssh`` command per step (a control master keeps one connection per host): the cluster's files are
unpacked under ``REMOTE_DIR/NAME`` on every host, then a private munged per host (one key for all),
slurmctld on the controller's host, each node's lifecycle script, and one ``slurmd -N NODE`` per
worker. Slurm's own commands (``describe``, ``list-nodes``, ``submit``) run on the controller's host.

Every host gets the full slurm.conf rather than using configless ``slurmd --conf-server``: slurmd
fetches its configuration before it reads ``AuthInfo``, so it can only authenticate through the
system munged's default socket (measured on 22.05: "Munge encode failed: Failed to access
/run/munge/munge.socket.2"), and hyperscope never touches a host's system munged.

The steps themselves (the ssh command line, starting and stopping daemons on a host) are
:mod:`hyperscope.cluster.ssh_hosts`. Daemons are recorded with their host, PID and start time;
``delete`` stops them on their host only while the start time still matches, as for the local
provider.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
import tarfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from hyperscope.cluster import conf, operate, ssh_ctld, ssh_health, ssh_hooks
from hyperscope.cluster.local import spec_digest
from hyperscope.cluster.slurm import Slurm, SlurmError
from hyperscope.cluster.spec import ClusterSpec
from hyperscope.cluster.ssh_hosts import Hosts, settings, start_command, stop_command, with_env
from hyperscope.cluster.state import (
    BACKUP_CTLD,
    ClusterError,
    ClusterState,
    NodeState,
    Proc,
    Progress,
    cluster_lock,
    clusters_dir,
    mark_deleting,
)

ON_CREATE_TIMEOUT_S = 600.0


def run_on_create(
    hosts: Hosts, state: ClusterState, node: NodeState, gpus: int, script: str, *, update: bool = False
) -> None:
    """The lifecycle script for one node on its host, as at create (or on a node re-created);
    ``update``: the software update step (``cluster update-software``), on_update.sh where the
    host's lifecycle folder has one, else on_create.sh again, with ``HYPERSCOPE_UPDATE=1``."""
    root = state.run_dir
    env = {
        "SLURM_CONF": state.slurm_conf, "HYPERSCOPE_CLUSTER": state.name,
        "HYPERSCOPE_GROUP": node.group, "HYPERSCOPE_ROLE": node.role, "HYPERSCOPE_NODE": node.name,
        "HYPERSCOPE_SPARE": str(int(node.spare)),
        "HYPERSCOPE_GPUS": str(gpus), "HYPERSCOPE_CONTROLLER": state.controller,
        "HYPERSCOPE_SHARED_DIR": state.shared_dir,
        "HYPERSCOPE_RESOURCE_CONFIG": f"{root}/etc/resource_config.json",
        **({"HYPERSCOPE_UPDATE": "1"} if update else {}),
    }  # fmt: skip
    q = shlex.quote(root)
    pick = "s=on_create; " + ("[ -f on_update.sh ] && s=on_update; " if update else "")
    log = f'{q}/log/"$s"-{shlex.quote(node.name)}.log'
    cmd = f'cd {q}/lifecycle && {pick}{with_env(env, ["bash"])} "$s.sh" > {log} 2>&1'
    rc = hosts.run(node.host, f"{cmd}; echo $?", timeout=ON_CREATE_TIMEOUT_S).strip()
    node.output = hosts.run(node.host, f"cd {q}/lifecycle && {pick}tail -c 4000 {log}")
    if rc != "0":
        node.status, node.since = "Failed", time.time()
        raise ClusterError(
            f"{script} exited with status {rc} on node {node.name} (host {node.host}, "
            f"group {node.group}, role {node.role}):\n" + (node.output.rstrip() or "(no output)")
        )


def slurm_for(state: ClusterState) -> Slurm:
    """Slurm's commands on the controller's host (the backup's while the primary's is gone)."""
    return Slurm(Path(state.slurm_conf), runner=Hosts(settings(state)).runner(*ssh_controllers(state)))


def ssh_controllers(state: ClusterState) -> list[str]:
    return ssh_ctld.controller_hosts(state)


def _bundle(state: ClusterState, lifecycle: Path, key: bytes) -> bytes:
    """The files every host needs, as one tar: etc/ (slurm.conf, the health wrapper and Prolog, the
    TaskProlog, the ``--auto-resume`` plugin: ssh_health, ssh_hooks), the lifecycle folder, the
    munge key."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for f in sorted((Path(state.dir) / "etc").iterdir()):
            tar.add(f, arcname=f"etc/{f.name}")
        tar.add(lifecycle, arcname="lifecycle")
        info = tarfile.TarInfo("munge/munge.key")
        info.size, info.mode = len(key), 0o400
        tar.addfile(info, io.BytesIO(key))
    return buf.getvalue()


class SshProvider:
    def __init__(self, home: Path) -> None:
        self.home = home

    def create(self, spec: ClusterSpec, progress: Progress | None = None) -> ClusterState:
        with cluster_lock(self.home, spec.name):
            d = clusters_dir(self.home) / spec.name
            if (d / "cluster.json").is_file():
                old = ClusterState.load(d)
                if old.provider != "ssh":
                    raise ClusterError(f"cluster {spec.name!r} exists with the {old.provider} provider")
                if old.spec_digest != spec_digest(spec) and old.status != "Failed":
                    raise ClusterError(
                        f"cluster {spec.name!r} exists with another spec ({old.spec_path}); "
                        f"`hyperscope cluster delete {spec.name}` first"
                    )
                if old.status == "InService" and slurm_for(old).ping():
                    return old
                self._teardown(old)
            state = self._prepare(spec, d)
            try:
                self._start(spec, state, progress or (lambda node, step: None))
            except BaseException as exc:
                with contextlib.suppress(ClusterError):  # what it could not stop stays recorded
                    self._teardown(state, remove=False)
                state.status = "Failed"
                state.error = str(exc) if isinstance(exc, ClusterError) else "interrupted during create"
                state.save()
                raise
            state.status = "InService"
            state.save()
            if spec.recovery.agent:  # on this machine: the one that reaches every host
                operate.start_agent(self.home, state)
            return state

    def _prepare(self, spec: ClusterSpec, d: Path) -> ClusterState:
        assert spec.ssh is not None
        shutil.rmtree(d, ignore_errors=True)
        (d / "etc").mkdir(parents=True)
        (d / "log").mkdir()
        root = f"{spec.ssh.remote_dir}/{spec.name}"
        base = spec.slurm.port_base or 6817  # Slurm's own defaults: 6817 slurmctld, nodes after
        state = ClusterState(
            name=spec.name, provider="ssh", status="Creating", dir=str(d), spec_path=str(spec.source or ""),
            spec_digest=spec_digest(spec), slurm_conf=f"{root}/etc/slurm.conf",
            shared_dir=str(spec.shared_dir),
            controller=spec.groups_with("controller")[0].node_names()[0], partition=spec.slurm.partition,
            ctld_port=base, run_dir=root, backup_host=spec.slurm.backup_host,
            ssh={k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(spec.ssh).items()},
        )  # fmt: skip
        ports = iter(range(base + 1, base + 1 + len(spec.slurm_nodes())))
        for group, name in spec.all_nodes():
            worker = group.role == "worker"
            state.nodes.append(
                NodeState(name, group.name, group.role, group.is_spare(name), worker,
                          port=next(ports) if worker else None, host=group.host(name))
            )  # fmt: skip
        state.save()
        return state

    def _start(self, spec: ClusterSpec, state: ClusterState, say: Progress) -> None:
        assert spec.ssh is not None and spec.lifecycle_dir is not None
        hosts, root = Hosts(spec.ssh), state.run_dir
        names = {h: hosts.run(h, "hostname -s").strip() for h in ssh_ctld.every_host(state)}
        if state.backup_host:  # slurm.conf names it as it knows itself: how it tells it is the backup
            state.backup_controller = names[state.backup_host]
            shared = shlex.quote(str(conf.shared_state_dir(state)))
            hosts.run(state.node(state.controller).host, f"rm -rf {shared} && mkdir -p {shared}")
        etc = Path(state.dir) / "etc"
        etc.joinpath("slurm.conf").write_text(
            conf.slurm_conf(
                spec, state, root=Path(root), hostnames={n.name: names[n.host] for n in state.nodes}
            )
            + "\n".join([*ssh_health.install(spec, state), *ssh_hooks.install(state, hosts, names)])
            + "\n"
        )
        gres = conf.gres_conf(spec, state, real=True)
        if gres:
            etc.joinpath("gres.conf").write_text(gres)
        etc.joinpath("resource_config.json").write_text(conf.resource_config(state))
        bundle = _bundle(state, spec.lifecycle_dir, os.urandom(1024))
        munged: set[str] = set()
        q = shlex.quote(root)
        for host in names:
            say(host, "copying slurm.conf, lifecycle scripts, munge key")
            spools = " ".join(shlex.quote(f"{root}/spool/{n.name}") for n in state.nodes if n.host == host)
            hosts.run(host, f"rm -rf {q} && mkdir -p {q}/log {q}/state {spools} && tar -C {q} -xf - "
                            f"&& chmod 755 {q} {q}/munge", stdin=bundle)  # fmt: skip
            py = shlex.quote(ssh_health.python(state))
            if any(n.slurm and n.host == host for n in state.nodes) and hosts.run(
                host, f"[ -x {py} ] && echo yes || echo no"
            ).strip() != "yes":  # fmt: skip
                state.notes.append(f"no health loop on {host}: no {py} there (spec: ssh.python)")

        def daemon(node: NodeState, role: str, argv: list[str], log: str) -> None:
            pid, start = hosts.run(
                node.host, start_command(root, log, argv, node.name if role == "slurmd" else "")
            ).split()
            state.procs.append(
                Proc(role, int(pid), int(start), node.name if role == "slurmd" else "", node.host)
            )
            state.save()
            if role == "slurmd":  # its health loop beside it (ssh_health)
                hosts.run(node.host, ssh_health.start_loop_command(state, node.name, int(pid)))

        def ensure_munged(node: NodeState) -> None:
            if node.host in munged:
                return
            m = f"{root}/munge"
            say(node.name, f"starting munged on {node.host}")
            daemon(node, "munged", ["munged", "-F", "--force", f"--socket={m}/munge.sock",
                                    f"--key-file={m}/munge.key", f"--pid-file={m}/munged.pid",
                                    f"--seed-file={m}/munged.seed"], "munged.out")  # fmt: skip
            hosts.run(
                node.host, f"for i in $(seq 100); do [ -S {m}/munge.sock ] && exit 0; sleep 0.1; done; exit 1"
            )
            munged.add(node.host)

        ctld = state.node(state.controller)
        ensure_munged(ctld)
        say(ctld.name, f"starting slurmctld on {ctld.host}")
        daemon(ctld, "slurmctld", ["slurmctld", "-D", "-c", "-f", state.slurm_conf], "slurmctld.out")
        slurm = slurm_for(state)
        _poll(
            slurm.ping,
            15,
            f"slurmctld on {ctld.host} does not answer `scontrol ping`",
            hosts,
            ctld.host,
            root,
        )
        if state.backup_host:
            say(state.backup_host, "starting the backup slurmctld")
            ssh_ctld.start_backup(hosts, state, munged=state.backup_host not in munged)
            munged.add(state.backup_host)
            state.save()
            _poll(lambda: slurm.controllers().get(state.backup_controller) == "UP", 30,
                  f"the backup slurmctld on {state.backup_host} does not answer `scontrol ping`",
                  hosts, state.backup_host, root)  # fmt: skip
        gpus = {g.name: g.gpus_per_node for g in spec.groups}
        for node in state.nodes:
            ensure_munged(node)
            say(node.name, f"running on_create.sh on {node.host}")
            node.status = "Configuring"
            state.save()
            run_on_create(hosts, state, node, gpus[node.group], str(spec.on_create))
            if node.slurm:
                say(node.name, f"starting slurmd on {node.host}")
                daemon(node, "slurmd", ["slurmd", "-D", "-N", node.name, "-f", state.slurm_conf],
                       f"slurmd-{node.name}.out")  # fmt: skip
            else:
                node.status, node.since = "Running", time.time()
        wanted = {n.name for n in state.nodes if n.slurm}
        _poll(lambda: wanted <= {n.name for n in slurm.nodes() if n.state == "IDLE" and not n.flags},
              30, "the nodes did not all become idle", hosts, ctld.host, root)  # fmt: skip
        for node in state.nodes:
            if node.slurm:
                node.status, node.since = "Running", time.time()
                say(node.name, "idle")

    def delete(self, name: str) -> bool:
        with cluster_lock(self.home, name, remove=True):
            state = mark_deleting(clusters_dir(self.home) / name)
            if state is None:
                return False
            self._teardown(state)
            return True

    def _teardown(self, state: ClusterState, *, remove: bool = True) -> None:
        """The agent (here), then on every host: slurmds and strays (slurmstepds, tasks), then
        slurmctld, then munged."""
        operate.stop_agent(state)
        hosts = Hosts(settings(state))
        every = ssh_ctld.every_host(state)
        on = {h: [p for p in state.procs if p.host == h] for h in every}
        failed: dict[str, str] = {}  # an unreachable host must not keep the others running

        def each(command: Callable[[str], str]) -> None:
            for h in every:
                if h not in failed:
                    try:
                        hosts.run(h, command(h))
                    except ClusterError as exc:
                        failed[h] = str(exc)

        keep = {h: [p for p in on[h] if p.role != "slurmd"] for h in every}
        each(
            lambda h: stop_command([p for p in on[h] if p.role == "slurmd"], root=state.run_dir, keep=keep[h])
        )
        each(lambda h: stop_command([p for p in on[h] if p.role in ("slurmctld", BACKUP_CTLD)]))
        each(lambda h: stop_command([p for p in on[h] if p.role == "munged"]))
        each(lambda h: f"rm -rf {shlex.quote(state.run_dir)}")
        if state.backup_host:  # the controllers' saved state, on the shared directory (here too)
            shutil.rmtree(conf.shared_state_dir(state), ignore_errors=True)
        ssh_hooks.remove_log(state)  # --auto-resume's decisions, on the shared directory
        for h in every:
            hosts.close(h)
        state.procs = [p for p in state.procs if p.host in failed]
        if failed:  # keep the state, so `delete` can be run again once the hosts answer
            state.save()
            raise ClusterError(
                f"cluster {state.name}: could not stop everything on {', '.join(failed)}; run delete "
                "again once they answer:\n" + "\n".join(failed.values())
            )
        if remove:
            shutil.rmtree(state.dir, ignore_errors=True)
        else:
            state.save()


def _poll(ready: Callable[[], bool], timeout: float, what: str, hosts: Hosts, host: str, root: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if ready():
                return
        except SlurmError:
            pass
        if time.monotonic() > deadline:
            tail = hosts.run(host, f"tail -n 15 {shlex.quote(root)}/log/slurmctld.log", check=False)
            raise ClusterError(
                f"{what} (after {timeout:g} s); last lines of slurmctld's log on {host}:\n{tail}"
            )
        time.sleep(0.2)
