"""The agent on an ssh cluster of real hosts (network namespaces of this machine, each with its own
sshd, hostname and disk for the cluster's files; slurmctld on one, a slurmd on each of the others,
everything reached over ssh): a killed node, two nodes failing at once (recovered in parallel),
a failed health check, an operator's reboot through the spec's reboot_command, and a host that
is gone for good (a ticket)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperscope.cluster import manage
from hyperscope.cluster.state import ClusterError, ClusterState, alive
from hyperscope.recovery.agent import read_log
from tests.recovery.conftest import ROOT, wait_for
from tests.recovery.netns import Hosts

pytestmark = pytest.mark.slurm


def _spec(tmp_path: Path, hosts: Hosts, **recovery: object) -> Path:
    shutil.copytree(ROOT / "examples" / "lifecycle", tmp_path / "lifecycle")
    a = [h.addr for h in hosts.hosts]
    doc = {
        "name": "net", "provider": "ssh", "lifecycle_scripts": "lifecycle",
        "shared_dir": str(tmp_path / "shared"), "ssh": hosts.ssh_options(),
        "instance_groups": [
            {"name": "controller", "role": "controller", "count": 1, "hosts": [a[0]]},
            {"name": "workers", "role": "worker", "count": 2, "spares": 1, "hosts": a[1:4]},
        ],
        "recovery": recovery,
    }  # fmt: skip
    (tmp_path / "net.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path / "net.yaml"


def _log(state: ClusterState) -> list[dict[str, Any]]:
    return read_log(Path(state.dir))


def _ended(state: ClusterState, kind: str, node: str, after: int = 0) -> dict[str, Any] | None:
    for r in _log(state)[after:]:
        if r["kind"] == kind and r["nodes"][0] == node and r["phase"] in ("done", "failed", "ticket"):
            return r
    return None


def _slurmd(state: ClusterState, node: str) -> int:
    procs = manage.load(state.name, _home(state)).procs
    (pid,) = [p.pid for p in procs if p.role == "slurmd" and p.node == node]
    return pid


def _home(state: ClusterState) -> Path:
    return Path(state.dir).parents[1]


def _in_service(state: ClusterState, nodes: list[str]) -> list[str]:
    out = manage._slurm(state).run("srun", f"-N{len(nodes)}", "bash", "-c", "echo $SLURMD_NODENAME")
    return sorted(out.stdout.split())


def test_the_agent_recovers_nodes_of_an_ssh_cluster_on_other_hosts(
    tmp_path: Path, net_hosts: Callable[[int], Hosts]
) -> None:
    hosts = net_hosts(4)
    record = tmp_path / "hooks.log"
    spec = _spec(
        tmp_path, hosts,
        reboot_command=f'echo "reboot $1 $2" >> {record}',
        max_replacements=20,  # five automatic replacements here: not held by the brake
        ticket_command=f'echo "ticket $1 $2 $3" >> {record}',
    )  # fmt: skip
    home = tmp_path / "home"
    state = manage.create(spec, home)
    try:
        assert any(p.role == "agent" and not p.host for p in state.procs)
        by_node = {n.name: n.host for n in state.nodes}
        assert len(set(by_node.values())) == 4  # every node on a host of its own

        # a crash: slurmd killed on its host; the spare takes its place, the node is re-created there
        os.kill(_slurmd(state, "workers-1"), signal.SIGKILL)
        done = wait_for("workers-1 replaced", lambda: _ended(state, "replace", "workers-1"), 90)
        assert isinstance(done, dict) and done["phase"] == "done", done
        assert done["nodes"] == ["workers-1", "workers-3"]
        decided = next(r for r in _log(state) if r["phase"] == "decided")
        assert decided["reason"].startswith("not responding (Slurm: ")
        on_create = hosts.ssh(by_node["workers-1"], f"cat {hosts.remote_dir}/net/log/on_create-workers-1.log")
        assert "on_create: workers-1" in on_create  # the lifecycle script ran again on its host
        now = manage.load("net", home)
        assert now.node("workers-1").spare and not now.node("workers-3").spare
        assert now.node("workers-1").replacements == 1 and now.node("workers-1").status == "Running"
        assert _in_service(state, ["workers-2", "workers-3"]) == ["workers-2", "workers-3"]

        # two at once, one frozen and one killed: recovered in parallel, one by the spare (now
        # workers-1), the other re-created on its own host
        mark = len(_log(state))
        os.kill(_slurmd(state, "workers-2"), signal.SIGSTOP)
        os.kill(_slurmd(state, "workers-3"), signal.SIGKILL)
        for node in ("workers-2", "workers-3"):
            r = wait_for(f"{node} replaced", lambda n=node: _ended(state, "replace", n, mark), 120)
            assert isinstance(r, dict) and r["phase"] == "done", r
        records = _log(state)[mark:]
        spans = {
            node: [r["time"] for r in records if r["kind"] == "replace" and r["nodes"][0] == node]
            for node in ("workers-2", "workers-3")
        }
        (_, first_done), (second_decided, _) = sorted(spans.values())
        assert second_decided < first_done, f"the second recovery waited for the first: {spans}"
        now = manage.load("net", home)
        active = sorted(n.name for n in now.nodes if n.slurm and not n.spare)
        assert len(active) == 2 and _in_service(state, active) == active
        assert not any(alive(p) for p in state.procs if p.role == "slurmd")  # same PIDs, this machine

        # a failed health check on its host (the real `hyperscope health --drain`, a fault file)
        sick = active[0]
        faults = tmp_path / "shared" / "faults.json"
        faults.write_text(json.dumps({"fail": {"nic": "link down on eth0"}}))
        mark = len(_log(state))
        hosts.ssh(
            by_node[sick],
            f"env SLURM_CONF={now.slurm_conf} HYPERSCOPE_HEALTH_FAULTS={faults} "
            f"{sys.executable} -m hyperscope health --drain --node {sick}",
            check=False,
        )
        r = wait_for(f"{sick} replaced", lambda: _ended(state, "replace", sick, mark), 90)
        assert isinstance(r, dict) and r["phase"] == "done", r
        reason = next(x["reason"] for x in _log(state)[mark:] if x["phase"] == "decided")
        assert reason.startswith("drained by its health check: hyperscope: ")
        assert "link down on eth0" in reason

        # an operator's reboot, through the spec's reboot_command (given the node and its host)
        now = manage.load("net", home)
        target = next(n.name for n in now.nodes if n.slurm and not n.spare)
        mark = len(_log(state))
        manage.mark_node("net", home, target, "reboot")
        r = wait_for(f"{target} rebooted", lambda: _ended(state, "reboot", target, mark), 90)
        assert isinstance(r, dict) and r["phase"] == "done", r
        assert f"reboot {target} {by_node[target]}" in record.read_text()

        # a host gone for good (its sshd too): the spare takes over, the node becomes a ticket
        now = manage.load("net", home)
        gone = next(n.name for n in now.nodes if n.slurm and not n.spare and n.name != target)
        mark = len(_log(state))
        hosts.kill(next(h for h in hosts.hosts if h.addr == by_node[gone]))
        r = wait_for(f"{gone} ticketed", lambda: _ended(state, "replace", gone, mark), 120)
        assert isinstance(r, dict) and r["phase"] == "ticket", r
        assert "does not answer ssh" in r["reason"]
        ticket = next(x for x in _log(state)[mark:] if x["kind"] == "ticket")
        assert ticket["hook"] == "recovery.ticket_command run"
        assert f"ticket {gone} {by_node[gone]} " in record.read_text()
        rows = {row.node: row for row in manage.list_nodes("net", home)}
        assert rows[gone].status == "NeedsHardware" and "ticket" in rows[gone].last_action
        assert "needs hardware" in rows[gone].health
        now = manage.load("net", home)
        active = sorted(n.name for n in now.nodes if n.slurm and not n.spare)
        assert gone not in active and _in_service(state, active) == active
        # delete stops everything on the hosts that answer, and says which one it could not reach
        with pytest.raises(ClusterError, match=f"could not stop everything on {by_node[gone]}"):
            manage.delete("net", home)
        left = [p for h in hosts.hosts for p in hosts.pids(h) if p != h.sshd.pid]
        assert left == [], "delete left processes on the hosts"
        assert not any(alive(p) for p in manage.load("net", home).procs if p.role == "agent")
    finally:
        if (home / "clusters" / "net" / "agent.log").is_file():  # shown when the test fails
            print((home / "clusters" / "net" / "agent.log").read_text())
        if (home / "clusters" / "net" / "cluster.json").is_file():
            with contextlib.suppress(ClusterError):
                manage.delete("net", home)
