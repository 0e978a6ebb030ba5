"""The agent on an adopted (existing-provider) cluster: a real multi-host Slurm (slurmctld and
slurmds on network-namespace hosts, brought up by the ssh provider with its own agent off) that
this machine reaches as a login node would (its own munged with the cluster's key). The adopted
cluster's agent swaps the spare in for a killed node and opens a ticket for it (no replace command
in the spec), reboots a node through the spec's reboot_command, and takes the ticketed node back
once an operator repaired and resumed it."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperscope.cluster import manage
from hyperscope.cluster.state import ClusterState, alive
from hyperscope.recovery.agent import read_log
from tests.recovery.conftest import ROOT, wait_for
from tests.recovery.netns import Hosts

pytestmark = pytest.mark.slurm


def _ssh_cluster(tmp_path: Path, hosts: Hosts) -> Path:
    shutil.copytree(ROOT / "examples" / "lifecycle", tmp_path / "lifecycle")
    a = [h.addr for h in hosts.hosts]
    doc = {
        "name": "real", "provider": "ssh", "lifecycle_scripts": "lifecycle",
        "shared_dir": str(tmp_path / "shared"), "ssh": hosts.ssh_options(), "recovery": {"agent": False},
        "instance_groups": [
            {"name": "controller", "role": "controller", "count": 1, "hosts": [a[0]]},
            {"name": "workers", "role": "worker", "count": 2, "spares": 1, "hosts": a[1:4]},
        ],
    }  # fmt: skip
    (tmp_path / "real.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path / "real.yaml"


def _restart_script(tmp_path: Path, hosts: Hosts, root: str) -> Path:
    """What an operator's reboot does to one node of this cluster: its slurmd killed (by the pid
    file Slurm keeps on the host) and started again."""
    ssh = (
        f"ssh -p {hosts.port} -i {hosts.key} -o BatchMode=yes -o StrictHostKeyChecking=no "
        "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
    )
    remote = (
        f"kill -9 \\$(cat {root}/state/slurmd-$1.pid) 2>/dev/null; sleep 0.5; cd {root} || exit 1; "
        f"env HYPERSCOPE_CLUSTER_DIR={root} setsid slurmd -D -N $1 -f {root}/etc/slurm.conf "
        f"> {root}/log/restarted-$1.out 2>&1 < /dev/null &"
    )
    script = tmp_path / "restart-slurmd.sh"
    script.write_text(f'#!/bin/bash\nset -e\n{ssh} root@"$2" "{remote}"\necho "restarted $1 on $2"\n')
    script.chmod(0o755)
    return script


def _ended(state: ClusterState, kind: str, node: str) -> dict[str, Any] | None:
    for r in read_log(Path(state.dir)):
        if (
            r["kind"] == kind
            and r["nodes"][0] == node
            and r["phase"] in ("done", "failed", "ticket", "closed")
        ):
            return r
    return None


def test_the_agent_recovers_nodes_of_an_adopted_multi_host_cluster(
    tmp_path: Path, net_hosts: Callable[[int], Hosts]
) -> None:
    hosts = net_hosts(4)
    home = tmp_path / "home"
    real = manage.create(_ssh_cluster(tmp_path, hosts), home)
    root = real.run_dir
    munged: subprocess.Popen[bytes] | None = None
    try:
        # this machine as a login node: a munged of its own with the cluster's key
        ctld = real.node(real.controller).host
        key = base64.b64decode(hosts.ssh(ctld, f"base64 -w0 {root}/munge/munge.key"))
        m = Path(root) / "munge"
        m.mkdir(parents=True)
        m.chmod(0o755)
        (m / "munge.key").write_bytes(key)
        (m / "munge.key").chmod(0o400)
        munged = subprocess.Popen(
            ["munged", "-F", "--force", f"--socket={m}/munge.sock", f"--key-file={m}/munge.key",
             f"--pid-file={m}/munged.pid", f"--seed-file={m}/munged.seed"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_for("the local munged", lambda: (m / "munge.sock").exists(), 10)

        record, updates = tmp_path / "tickets.log", tmp_path / "updates.log"
        restart = _restart_script(tmp_path, hosts, root)
        spec = tmp_path / "adopt.yaml"
        spec.write_text(
            yaml.safe_dump(
                {
                    "name": "adopted",
                    "provider": "existing",
                    "shared_dir": str(tmp_path / "shared"),
                    "slurm_conf": str(Path(real.dir) / "etc" / "slurm.conf"),
                    "recovery": {
                        "agent": True,
                        "reboot_command": f"{restart} $1 $2",
                        "ticket_command": f'echo "ticket $1 $2: $3" >> {record}',
                        # the operator's software update: recorded while drained, slurmd restarted
                        "update_command": f'echo "$1 $2" >> {updates} && {restart} $1 $2',
                    },
                }
            )
        )
        adopted = manage.create(spec, home)
        assert any(p.role == "agent" for p in adopted.procs)
        nodes = {n.name: n for n in adopted.nodes}
        assert nodes["workers-3"].spare and nodes["workers-3"].group == "dev"  # in no partition
        assert nodes["workers-1"].host == real.node("workers-1").host  # Slurm's NodeAddr

        # a crash: the spare goes into the partition; the node needs hardware (a ticket)
        (pid,) = [p.pid for p in real.procs if p.role == "slurmd" and p.node == "workers-1"]
        os.kill(pid, signal.SIGKILL)
        r = wait_for("workers-1 ticketed", lambda: _ended(adopted, "replace", "workers-1"), 90)
        assert isinstance(r, dict) and r["phase"] == "ticket" and r["nodes"] == ["workers-1", "workers-3"], r
        assert "the spec names no recovery.replace_command" in r["reason"]
        assert f"ticket workers-1 {real.node('workers-1').host}: needs new hardware" in record.read_text()
        rows = {row.node: row for row in manage.list_nodes("adopted", home)}
        assert rows["workers-1"].status == "NeedsHardware" and rows["workers-3"].slurm_state == "idle"
        out = tmp_path / "job.out"
        done = manage.submit(
            "adopted",
            home,
            ["--wait", "-N2", "-o", str(out), "--wrap", "srun bash -c 'echo $SLURMD_NODENAME'"],
        )
        assert done.job_id > 0 and sorted(out.read_text().split()) == ["workers-2", "workers-3"]

        # an operator's reboot, through the spec's command
        manage.mark_node("adopted", home, "workers-2", "reboot")
        r = wait_for("workers-2 rebooted", lambda: _ended(adopted, "reboot", "workers-2"), 90)
        assert isinstance(r, dict) and r["phase"] == "done", r

        # the operator repairs workers-1 and resumes it: the agent takes it back
        subprocess.run([str(restart), "workers-1", real.node("workers-1").host], check=True)
        slurm = manage._slurm(adopted)

        def registered() -> bool:
            node = {n.name: n for n in slurm.nodes()}["workers-1"]
            return "NOT_RESPONDING" not in node.flags

        wait_for("workers-1's slurmd registered", registered, 60)
        slurm.run("scontrol", "update", "nodename=workers-1", "state=resume")
        r = wait_for("the ticket closed", lambda: _ended(adopted, "ticket", "workers-1"), 30)
        assert isinstance(r, dict) and r["phase"] == "closed"
        assert manage.load("adopted", home).node("workers-1").status == "Running"

        # a software update through the operator's command, two nodes at a time, the agent on
        wait_for("every node idle", lambda: {(n.state, n.flags) for n in slurm.nodes()} == {("IDLE", ())}, 60)
        done_ = manage.update_software("adopted", home, lambda n, s: None, batch=2, drain_timeout_s=60)
        assert done_ == ["workers-1", "workers-2", "workers-3"]
        hosts_of = {n: real.node(n).host for n in ("workers-1", "workers-2", "workers-3")}
        assert updates.read_text().splitlines() == [f"{n} {h}" for n, h in hosts_of.items()]
        for node in ("workers-1", "workers-3"):  # slurmd restarted on its own host
            assert hosts.ssh(real.node(node).host, f"ls {root}/log/restarted-{node}.out").strip()
        wait_for("every node back", lambda: {(n.state, n.flags) for n in slurm.nodes()} == {("IDLE", ())}, 60)
        assert manage.load("adopted", home).status == "InService"
    finally:
        if (home / "clusters" / "adopted" / "agent.log").is_file():  # shown when the test fails
            print((home / "clusters" / "adopted" / "agent.log").read_text())
        agents = (
            [p for p in manage.load("adopted", home).procs if p.role == "agent"]
            if (home / "clusters" / "adopted").exists()
            else []
        )
        manage.delete("adopted", home)
        assert not any(alive(p) for p in agents)
        manage.delete("real", home)
        if munged is not None:
            munged.terminate()
            munged.wait(10)
        shutil.rmtree(Path(root), ignore_errors=True)  # this machine's side of the remote folder
