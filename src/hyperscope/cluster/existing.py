"""The existing provider: adopt a Slurm cluster the user already runs, through its ``slurm.conf``.

Nothing of the cluster is started, configured or stopped: adopting records it (its controller,
partitions and nodes as Slurm reports them; nodes in no partition are the spares of the default
one) so describe, list-nodes, shell and submit work on it. With ``recovery: {agent: true}`` in the
spec (never by default: the cluster is someone else's) the recovery agent runs on this machine and
acts through :class:`ExistingOperator`: Slurm's commands, a spare swapped into a failed node's
partition, and the spec's own ``reboot_command``/``replace_command``; what no command of the spec
can do becomes a ticket. ``delete`` stops that agent, forgets the cluster and leaves every Slurm
daemon as it was.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from hyperscope.cluster import existing_ops, nodeops, operate
from hyperscope.cluster.local import spec_digest
from hyperscope.cluster.operate import Outcome, run_hook
from hyperscope.cluster.slurm import Slurm, SlurmError
from hyperscope.cluster.spec import ClusterSpec, RecoverySettings, load_spec
from hyperscope.cluster.state import (
    ClusterError,
    ClusterState,
    NodeState,
    Proc,
    Progress,
    cluster_lock,
    clusters_dir,
)
from hyperscope.errors import HyperscopeError

#: how long a node rebooted or replaced by the spec's command may take to register again
REGISTER_TIMEOUT_S = 600.0


class ExistingProvider:
    def __init__(self, home: Path, slurm: type[Slurm] = Slurm) -> None:
        self.home = home
        self._slurm = slurm

    def create(self, spec: ClusterSpec, progress: Progress | None = None) -> ClusterState:
        """Adopt the cluster; again with the same spec refreshes its nodes."""
        say = progress or (lambda node, step: None)
        if spec.slurm_conf is None:
            raise ClusterError(f"{spec.source}: slurm_conf: is required by the existing provider")
        with cluster_lock(self.home, spec.name):
            d = clusters_dir(self.home) / spec.name
            kept: list[Proc] = []
            if (d / "cluster.json").is_file():
                old = ClusterState.load(d)
                if old.provider != "existing" or old.spec_digest != spec_digest(spec):
                    raise ClusterError(
                        f"cluster {spec.name!r} exists with another spec ({old.spec_path}); "
                        f"`hyperscope cluster delete {spec.name}` first"
                    )
                existing_ops.stop_health_loops(old)  # adopted again: fresh loops below, not twice
                kept = [p for p in old.procs if p.role in ("agent", "keeper")]
            slurm = self._slurm(spec.slurm_conf)
            say("*", f"asking slurmctld ({spec.slurm_conf})")
            try:
                config = slurm.config()
                nodes = slurm.nodes()
                default = next((r.partition for r in slurm.sinfo() if r.default_partition), "")
            except SlurmError as exc:
                raise ClusterError(f"cannot adopt {spec.name!r}: its Slurm does not answer: {exc}") from exc
            d.mkdir(parents=True, exist_ok=True)
            spec.shared_dir.mkdir(parents=True, exist_ok=True)
            host = config.get("SlurmctldHost[0]", config.get("SlurmctldHost", ""))
            backup = config.get("SlurmctldHost[1]", "")  # the operator's backup controller, if any
            state = ClusterState(
                name=spec.name,
                provider="existing",
                status="InService",
                dir=str(d),
                spec_path=str(spec.source or ""),
                spec_digest=spec_digest(spec),
                slurm_conf=str(spec.slurm_conf),
                shared_dir=str(spec.shared_dir),
                controller=re.sub(r"\(.*\)$", "", host) or "(unknown)",
                partition=default,
                ctld_port=int(config.get("SlurmctldPort", "0").split("-")[0] or 0),
                backup_controller=re.sub(r"\(.*\)$", "", backup),
                backup_host=backup[backup.find("(") + 1 : -1] if backup.endswith(")") else "",
                ssh={k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(spec.ssh).items()}
                if spec.ssh
                else {},
            )
            state.procs = kept
            for n in nodes:
                group = n.partitions[0] if n.partitions else (default or "(no partition)")
                state.nodes.append(
                    NodeState(
                        n.name, group, "worker", not n.partitions, True, status="Running", port=n.port,
                        host=n.fields.get("NodeAddr", ""),
                    )
                )  # fmt: skip
                state.nodes[-1].since = time.time()
                say(n.name, n.display_state)
            if spec.recovery.health_loops:  # opted in: one per node, over ssh (existing_ops)
                say("*", "starting a health loop on every node's host")
                state.notes += existing_ops.start_health_loops(spec, state, config)
            state.save()
            if spec.recovery.agent:
                say("*", "starting the recovery agent on this machine")
                (d / "log").mkdir(exist_ok=True)
                operate.start_agent(self.home, state)
            return state

    def delete(self, name: str) -> bool:
        """Forget the cluster; its daemons are the user's and keep running."""
        with cluster_lock(self.home, name, remove=True):
            d = clusters_dir(self.home) / name
            existed = (d / "cluster.json").is_file()
            if existed:
                state = ClusterState.load(d)
                operate.stop_agent(state)
                existing_ops.stop_health_loops(state)
            shutil.rmtree(d, ignore_errors=True)
            return existed


class ExistingOperator:
    """Slurm's commands here; reboots and replacements only through the spec's commands (an
    adopted cluster's machines are not ours to restart), else a ticket."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._slurm = Slurm(Path(state.slurm_conf))

    def slurm(self) -> Slurm:
        return self._slurm

    def daemon_alive(self, node: NodeState) -> bool:
        return True  # not ours to look at: Slurm's NOT_RESPONDING says it

    def _recovery(self) -> RecoverySettings:
        try:
            return load_spec(Path(self.state.spec_path)).recovery
        except HyperscopeError:
            return RecoverySettings()

    def spare_script(self) -> Path | None:
        """The spec's ``recovery.spare_script`` (run on a spare before it joins), if any."""
        return self._recovery().spare_script if self.state.ssh else None

    def prepare_spare(self, spare: NodeState) -> str:
        """The spare script on the spare's host: "" when it passed, else why."""
        script = self.spare_script()
        return existing_ops.run_spare_script(self.state, spare, script) if script else ""

    def _through(self, command: str, what: str, node: NodeState, reason: str) -> Outcome:
        t0 = time.time()
        run_hook(command, self.state, node, reason, what=what)
        nodeops.wait_registered(self._slurm, node.name, t0, timeout=REGISTER_TIMEOUT_S)
        nodeops.resume(self._slurm, node.name)
        return Outcome()

    def reboot(self, node: NodeState, reason: str) -> Outcome:
        command = self._recovery().reboot_command
        if not command:
            return Outcome(ticket=f"reboot wanted ({reason}); the spec names no recovery.reboot_command")
        return self._through(command, "reboot_command", node, reason)

    def recreate(self, node: NodeState, reason: str) -> Outcome:
        command = self._recovery().replace_command
        if not command:
            return Outcome(
                ticket=f"needs new hardware ({reason}); the spec names no recovery.replace_command"
            )
        return self._through(command, "replace_command", node, reason)
