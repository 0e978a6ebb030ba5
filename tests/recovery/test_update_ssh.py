"""``cluster update`` and ``update-software`` on an ssh cluster of real hosts (network namespaces of
this machine, each with its own sshd, hostname and disk for the cluster's files): a worker made on
a host the edited spec lists while a job runs, the lifecycle folder's new update step run on every
host, and nodes removed and stopped on their hosts; the agent runs throughout."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperscope.cluster import manage
from hyperscope.cluster.state import ClusterError, ClusterState, alive
from tests.recovery.conftest import ROOT, wait_for
from tests.recovery.netns import Hosts

pytestmark = pytest.mark.slurm


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def test_an_ssh_cluster_grows_onto_a_new_host_updates_its_software_and_shrinks(
    tmp_path: Path, net_hosts: Callable[[int], Hosts]
) -> None:
    hosts = net_hosts(4)
    a = [h.addr for h in hosts.hosts]
    shutil.copytree(ROOT / "examples" / "lifecycle", tmp_path / "lifecycle")
    workers: dict[str, Any] = {"name": "workers", "role": "worker", "count": 2, "hosts": a[1:3]}
    doc: dict[str, Any] = {
        "name": "grow", "provider": "ssh", "lifecycle_scripts": "lifecycle",
        "shared_dir": str(tmp_path / "shared"), "ssh": hosts.ssh_options(),
        "instance_groups": [
            {"name": "controller", "role": "controller", "count": 1, "hosts": [a[0]]}, workers,
        ],
    }  # fmt: skip
    spec = _write(tmp_path / "grow.yaml", doc)
    home, said = tmp_path / "home", []

    def say(node: str, step: str) -> None:
        said.append(f"{time.monotonic():.1f} {node}: {step}")

    state = manage.create(spec, home)
    slurm = manage._slurm(state)
    try:
        job = int(slurm.run("sbatch", "--parsable", "-w", "workers-1", "-o", "/dev/null",
                            "--wrap", "sleep 600").stdout)  # fmt: skip
        wait_for("the job running", lambda: _job(state, job) == ("RUNNING", "workers-1"), 60)

        # grow: workers-3 on the host the spec adds, made while the job runs on
        workers.update(count=3, hosts=a[1:4])
        plan = manage.update(_write(spec, doc), home, say, drain_timeout_s=60)
        assert plan.describe() == "add workers-3"
        now = manage.load("grow", home)
        assert now.node("workers-3").host == a[3] and now.status == "InService"
        assert _job(state, job) == ("RUNNING", "workers-1")
        log = hosts.ssh(a[3], f"cat {hosts.remote_dir}/grow/log/on_create-workers-3.log")
        assert "on_create: workers-3" in log  # its lifecycle script ran on its new host
        out = slurm.run("srun", "-N2", "-x", "workers-1", "hostname").stdout
        assert sorted(out.split()) == ["h3", "h4"]
        assert any(p.role == "agent" for p in now.procs)

        # software: a new update step in the spec's folder, run on every host, a batch at a time;
        # the job's node waits for its job
        shared = tmp_path / "shared"
        (tmp_path / "lifecycle" / "on_update.sh").write_text(
            "#!/bin/bash\n"
            'touch "$HYPERSCOPE_SHARED_DIR/updated-$HYPERSCOPE_NODE-$(hostname)-$HYPERSCOPE_UPDATE"\n'
        )
        slurm.run("scancel", str(job))
        done = manage.update_software("grow", home, say, batch=2, drain_timeout_s=60)
        assert done == ["controller-1", "workers-1", "workers-2", "workers-3"]
        assert sorted(p.name for p in shared.glob("updated-*")) == [
            "updated-controller-1-h1-1", "updated-workers-1-h2-1", "updated-workers-2-h3-1",
            "updated-workers-3-h4-1",
        ]  # fmt: skip
        wait_for("every node idle", lambda: {(n.state, n.flags, n.reason) for n in slurm.nodes()}
                 == {("IDLE", (), "")}, 60)  # fmt: skip
        after = manage.load("grow", home)
        new = {p.node: p.pid for p in after.procs if p.role == "slurmd"}
        old = {p.node: p.pid for p in now.procs if p.role == "slurmd"}
        assert set(new) == set(old) and all(new[n] != old[n] for n in new)  # restarted

        # shrink: the two highest go, stopped on their hosts
        workers.update(count=1, hosts=a[1:2])
        plan = manage.update(_write(spec, doc), home, say, drain_timeout_s=60)
        assert plan.describe() == "remove workers-3, workers-2"
        assert [n.name for n in slurm.nodes()] == ["workers-1"]
        gone = [p for p in after.procs if p.role == "slurmd" and p.node in ("workers-2", "workers-3")]
        assert len(gone) == 2 and not any(alive(p) for p in gone)  # stopped on their hosts
        final = manage.load("grow", home)
        assert [n.name for n in final.nodes] == ["controller-1", "workers-1"]
        assert final.status == "InService" and final.updating == []
        assert slurm.run("srun", "-N1", "hostname").stdout.split() == ["h2"]
    finally:
        print("\n".join(said))
        if (home / "clusters" / "grow" / "cluster.json").is_file():
            with contextlib.suppress(ClusterError):
                manage.delete("grow", home)


def _job(state: ClusterState, job: int) -> tuple[str, str] | None:
    j = {x.id: x for x in manage._slurm(state).jobs()}.get(job)
    return None if j is None else (j.state, j.nodes)
