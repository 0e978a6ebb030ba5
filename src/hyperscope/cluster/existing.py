"""The existing provider: adopt a Slurm cluster the user already runs, through its ``slurm.conf``.

Nothing is started, configured or stopped: adopting records the cluster (its controller, partition
and nodes as Slurm reports them) so describe, list-nodes, shell and submit work on it, and so the
agent and auto-resume of the next issue have a cluster to attach to. ``delete`` forgets it and
leaves every Slurm daemon as it was.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

from hyperscope.cluster.local import spec_digest
from hyperscope.cluster.slurm import Slurm, SlurmError
from hyperscope.cluster.spec import ClusterSpec
from hyperscope.cluster.state import (
    ClusterError,
    ClusterState,
    NodeState,
    Progress,
    cluster_lock,
    clusters_dir,
)


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
            if (d / "cluster.json").is_file():
                old = ClusterState.load(d)
                if old.provider != "existing" or old.spec_digest != spec_digest(spec):
                    raise ClusterError(
                        f"cluster {spec.name!r} exists with another spec ({old.spec_path}); "
                        f"`hyperscope cluster delete {spec.name}` first"
                    )
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
            )
            for n in nodes:
                group = n.partitions[0] if n.partitions else "(no partition)"
                state.nodes.append(
                    NodeState(n.name, group, "worker", not n.partitions, True, status="Running", port=n.port)
                )
                state.nodes[-1].since = time.time()
                say(n.name, n.display_state)
            state.save()
            return state

    def delete(self, name: str) -> bool:
        """Forget the cluster; its daemons are the user's and keep running."""
        with cluster_lock(self.home, name, remove=True):
            d = clusters_dir(self.home) / name
            existed = (d / "cluster.json").is_file()
            shutil.rmtree(d, ignore_errors=True)
            return existed
