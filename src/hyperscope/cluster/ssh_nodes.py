"""The recovery agent's hands on an ssh cluster's nodes (:class:`SshOperator`): everything is done
on the node's host through the same ``ssh`` steps ``create`` uses.

* **reboot**: the spec's ``recovery.reboot_command`` when it names one (IPMI, a cloud CLI,
  ``ssh $2 reboot``), then the host is waited for; without one, the node's processes are stopped
  on its host. Either way the host's munged is started again if it is gone, then the node's
  slurmd, and the node is resumed once it registered.
* **re-create**: the node's processes stopped, its spool wiped, the lifecycle script run again on
  its host, a new slurmd. A host that does not answer ssh is gone: the spec's
  ``recovery.replace_command`` (new hardware at the same address) is run and the host waited for;
  without one, the node becomes a ticket.

A host may carry several nodes: a node's processes are its recorded slurmd, the slurmstepds that
inherited its node marker, and the job tasks Slurm started for it (``SLURMD_NODENAME``).
"""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path

from hyperscope.cluster import nodeops, ssh_health
from hyperscope.cluster.operate import Outcome, run_hook
from hyperscope.cluster.slurm import Slurm
from hyperscope.cluster.spec import RecoverySettings, load_spec
from hyperscope.cluster.ssh import run_on_create, slurm_for
from hyperscope.cluster.ssh_hosts import _STOP, MARKER, NODE_MARKER, Hosts, settings, ssh_argv, start_command
from hyperscope.cluster.state import ClusterError, ClusterState, NodeState, Proc
from hyperscope.errors import HyperscopeError

#: how long a host may take to answer ssh again after its reboot or replace command
HOST_TIMEOUT_S = 300.0


def node_stop_command(procs: list[Proc], root: str, node: str) -> str:
    """Stop one node on its host: its recorded daemons, then every process carrying its node marker
    or (a job task) its name with this cluster's SLURM_CONF. Frozen ones are continued first."""
    pairs = " ".join(f"{p.pid} {p.start}" for p in procs)
    cluster = shlex.quote(f"{MARKER}={root}")
    marker = shlex.quote(f"{NODE_MARKER}={node}")
    task = shlex.quote(f"SLURMD_NODENAME={node}")
    conf = shlex.quote(f"SLURM_CONF={root}/etc/slurm.conf")
    # both of a pair must match: another cluster on the host may have a node of the same name
    script = f"""{_STOP}
has() {{ grep -qzxF "$1" "$3" 2>/dev/null && grep -qzxF "$2" "$3" 2>/dev/null; }}
ours() {{ for e in /proc/[0-9]*/environ; do p=${{e#/proc/}}; p=${{p%/environ}}
    if has {cluster} {marker} $e || has {task} {conf} $e
    then echo $p $(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f20); fi; done; }}
set -- {pairs} $(ours)
i=1; for a in "$@"; do [ $((i % 2)) = 1 ] && kill -CONT $a 2>/dev/null; i=$((i + 1)); done
stop "$@"
"""
    return f"bash -c {shlex.quote(script)}"


class SshOperator:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.hosts = Hosts(settings(state))
        self._slurm = slurm_for(state)

    def slurm(self) -> Slurm:
        return self._slurm

    def daemon_alive(self, node: NodeState) -> bool:
        return True  # a look at a remote /proc is an ssh round trip: Slurm's NOT_RESPONDING says it

    def _recovery(self) -> RecoverySettings:
        try:
            return load_spec(Path(self.state.spec_path)).recovery
        except HyperscopeError:
            return RecoverySettings()

    def _answers(self, host: str) -> bool:
        try:
            self.hosts.run(host, "true", timeout=15)
        except ClusterError:
            return False
        return True

    def _wait_host(self, host: str) -> None:
        deadline = time.monotonic() + HOST_TIMEOUT_S
        while not self._answers(host):
            if time.monotonic() > deadline:
                raise ClusterError(f"host {host} did not answer ssh within {HOST_TIMEOUT_S:g} s")
            time.sleep(1.0)

    def _stop(self, node: NodeState) -> None:
        mine = [p for p in self.state.procs if p.role == "slurmd" and p.node == node.name]
        self.hosts.run(node.host, node_stop_command(mine, self.state.run_dir, node.name))

    def _start(self, node: NodeState) -> list[Proc]:
        """The host's munged if it is gone (a rebooted host), then the node's slurmd; once it
        registered, the node is resumed."""
        root, started = self.state.run_dir, []
        m = f"{root}/munge"
        if self.hosts.run(node.host, f"[ -S {m}/munge.sock ] && echo up || echo down").strip() != "up":
            argv = ["munged", "-F", "--force", f"--socket={m}/munge.sock", f"--key-file={m}/munge.key",
                    f"--pid-file={m}/munged.pid", f"--seed-file={m}/munged.seed"]  # fmt: skip
            pid, start = self.hosts.run(node.host, start_command(root, "munged.out", argv)).split()
            started.append(Proc("munged", int(pid), int(start), "", node.host))
            self.hosts.run(
                node.host, f"for i in $(seq 100); do [ -S {m}/munge.sock ] && exit 0; sleep 0.1; done"
            )
        t0 = time.time()
        argv = ["slurmd", "-D", "-N", node.name, "-f", self.state.slurm_conf]
        pid, start = self.hosts.run(
            node.host, start_command(root, f"slurmd-{node.name}.out", argv, node.name)
        ).split()
        started.append(Proc("slurmd", int(pid), int(start), node.name, node.host))
        self.hosts.run(node.host, ssh_health.start_loop_command(self.state, node.name, int(pid)))
        nodeops.wait_registered(self._slurm, node.name, t0)
        nodeops.resume(self._slurm, node.name)
        return started

    def _provision(self, host: str) -> None:
        """A new machine at the host's address gets the cluster's files (slurm.conf, lifecycle
        scripts, munge key), copied from the controller's host as ``create`` put them there."""
        q = shlex.quote(self.state.run_dir)
        if self.hosts.run(host, f"[ -d {q}/etc ] && echo yes || echo no").strip() == "yes":
            return
        ctld = self.state.node(self.state.controller).host
        spools = " ".join(
            shlex.quote(f"{self.state.run_dir}/spool/{n.name}") for n in self.state.nodes if n.host == host
        )
        bundle = self._bundle(ctld)
        self.hosts.run(
            host,
            f"mkdir -p {q}/log {q}/state {spools} && tar -C {q} -xf - && chmod 755 {q} {q}/munge",
            stdin=bundle,
        )

    def _bundle(self, host: str) -> bytes:
        q = shlex.quote(self.state.run_dir)
        argv = ssh_argv(self.hosts.settings, host, f"tar -C {q} -cf - etc lifecycle munge/munge.key")
        done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
        if done.returncode != 0:
            raise ClusterError(
                f"{host}: could not copy the cluster's files: {done.stderr.decode(errors='replace')}"
            )
        return done.stdout

    def reboot(self, node: NodeState, reason: str) -> Outcome:
        command = self._recovery().reboot_command
        if command:
            run_hook(command, self.state, node, reason, what="reboot_command")
            self._wait_host(node.host)
        elif not self._answers(node.host):
            return Outcome(
                ticket=f"host {node.host} does not answer ssh and the spec names no reboot_command"
            )
        self._stop(node)
        return Outcome(self._start(node))

    def recreate(self, node: NodeState, reason: str) -> Outcome:
        if not self._answers(node.host):
            command = self._recovery().replace_command
            if not command:
                return Outcome(
                    ticket=f"host {node.host} does not answer ssh; the spec names no "
                    "recovery.replace_command: it needs new hardware"
                )
            run_hook(command, self.state, node, reason, what="replace_command")
            self._wait_host(node.host)
            self._provision(node.host)
        self._stop(node)
        spool = shlex.quote(f"{self.state.run_dir}/spool/{node.name}")
        self.hosts.run(node.host, f"rm -rf {spool} && mkdir -p {spool}")
        spec = load_spec(Path(self.state.spec_path))
        gpus = {g.name: g.gpus_per_node for g in spec.groups}[node.group]
        run_on_create(self.hosts, self.state, node, gpus, str(spec.on_create))
        return Outcome(self._start(node))
