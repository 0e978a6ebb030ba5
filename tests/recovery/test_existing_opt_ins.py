"""Issue 14 on an adopted (existing-provider) cluster of real hosts: a multi-host Slurm brought up
by the ssh provider (its agent off; a backup controller on a host of its own), reached from this
machine as from a login node. The adopted cluster's spec opts in to health loops on the nodes'
hosts (one killed is started again by the agent) and names a spare script. With the operator's
primary slurmctld killed, the agent logs it and leaves it alone (no restart command in the spec)
while it works through the backup: a check failing on a host drains its node, the spare script
runs on the spare's host, and the spare joins the partition; a spare the script fails on is left
out of it, a ticket. One cluster for the module (4 hosts)."""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperscope.cluster import existing_ops, manage
from hyperscope.cluster.local import missing_requirements
from hyperscope.cluster.slurm import Slurm, SlurmError
from hyperscope.cluster.state import ClusterError, ClusterState
from hyperscope.recovery.agent import read_log
from tests.recovery import netns
from tests.recovery.conftest import ROOT, wait_for

pytestmark = pytest.mark.slurm

SPARE_SCRIPT = """#!/bin/bash
# the operator's preparation of a spare: fails while the shared folder says the driver is missing
if [ -e "$HYPERSCOPE_SHARED_DIR/no-driver" ]; then echo "no GPU driver on $HYPERSCOPE_NODE"; exit 3; fi
echo "prepared $HYPERSCOPE_NODE on $(hostname)" > "$HYPERSCOPE_SHARED_DIR/prepared-$HYPERSCOPE_NODE"
"""


@dataclass
class Adopted:
    real: ClusterState
    state: ClusterState
    hosts: netns.Hosts
    tmp: Path
    tickets: Path


@pytest.fixture(scope="module")
def adopted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Adopted]:
    why = netns.missing() or missing_requirements()
    if why:
        pytest.skip(f"multi-host tests need namespaces and Slurm: {why}")
    tmp = tmp_path_factory.mktemp("optin")
    hosts = netns.Hosts(tmp, f"/run/hs-ns-{uuid.uuid4().hex[:8]}")
    home = tmp / "home"
    munged: subprocess.Popen[bytes] | None = None
    root = ""
    try:
        hosts.open(4)
        shutil.copytree(ROOT / "examples" / "lifecycle", tmp / "lifecycle")
        a = [h.addr for h in hosts.hosts]
        doc = {
            "name": "ops", "provider": "ssh", "lifecycle_scripts": "lifecycle",
            "shared_dir": str(tmp / "shared"), "ssh": hosts.ssh_options(), "recovery": {"agent": False},
            "slurm": {"backup_controller": a[1]},
            "instance_groups": [
                {"name": "controller", "role": "controller", "count": 1, "hosts": [a[0]]},
                {"name": "workers", "role": "worker", "count": 1, "spares": 1, "hosts": a[2:4]},
            ],
        }  # fmt: skip
        (tmp / "ops.yaml").write_text(yaml.safe_dump(doc))
        real = manage.create(tmp / "ops.yaml", home)
        root = real.run_dir
        # this machine as a login node: a munged of its own with the cluster's key
        key = base64.b64decode(hosts.ssh(a[0], f"base64 -w0 {root}/munge/munge.key"))
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
        (tmp / "spare.sh").write_text(SPARE_SCRIPT)
        tickets = tmp / "tickets.log"
        spec = {
            "name": "adopted", "provider": "existing", "shared_dir": str(tmp / "shared"),
            "slurm_conf": str(Path(real.dir) / "etc" / "slurm.conf"), "ssh": hosts.ssh_options(),
            "recovery": {
                "agent": True, "health_loops": True, "health_check_interval": 2, "spare_script": "spare.sh",
                "ticket_command": f'echo "ticket $1: $3" >> {tickets}',
            },
        }  # fmt: skip
        (tmp / "adopt.yaml").write_text(yaml.safe_dump(spec))
        state = manage.create(tmp / "adopt.yaml", home)
        yield Adopted(real, state, hosts, tmp, tickets)
    finally:
        for name in ("adopted", "ops"):
            if (home / "clusters" / name / "agent.log").is_file():  # shown when a test fails
                print((home / "clusters" / name / "agent.log").read_text())
            if (home / "clusters" / name / "cluster.json").is_file():
                with contextlib.suppress(ClusterError):
                    manage.delete(name, home)
        if munged is not None:
            munged.terminate()
            munged.wait(10)
        if root:
            shutil.rmtree(root, ignore_errors=True)  # this machine's side of the remote folder
        hosts.close()


def _log(state: ClusterState, after: int = 0) -> list[dict[str, Any]]:
    return read_log(Path(state.dir))[after:]


def _first(state: ClusterState, after: int, **match: object) -> dict[str, Any] | None:
    for r in _log(state, after):
        if all(r.get(k) == v for k, v in match.items()):
            return r
    return None


def _partition(slurm: Slurm) -> list[str]:
    try:
        return sorted(r.node for r in slurm.sinfo() if r.partition == "dev")
    except SlurmError:
        return []


def _idle(slurm: Slurm, node: str) -> bool:
    """Slurm (the controller in charge now) has ``node`` idle and unflagged: a spare it can take."""
    try:
        return any(n.name == node and n.state == "IDLE" and not n.flags for n in slurm.nodes())
    except SlurmError:
        return False


def _fail_check(ad: Adopted, node: str) -> None:
    """A fault file for the adopted cluster's loop on the node's host (the NIC "down")."""
    f = existing_ops.faults_file(ad.state, node)
    fault = json.dumps({"fail": {"nic": "link down on eth0"}})
    ad.hosts.ssh(ad.real.node(node).host, f"mkdir -p {Path(f).parent} && echo '{fault}' > {f}")


def _repair(ad: Adopted, node: str) -> None:
    ad.hosts.ssh(ad.real.node(node).host, f"rm -f {existing_ops.faults_file(ad.state, node)}")


def test_adopting_records_the_operators_backup_controller_and_starts_a_loop_per_node(
    adopted: Adopted,
) -> None:
    state = adopted.state
    assert (state.backup_controller, state.backup_host) == ("h2", adopted.hosts.hosts[1].addr)
    loops = {p.node: p for p in state.procs if p.role == existing_ops.HEALTH}
    assert sorted(loops) == ["workers-1", "workers-2"]
    for node, p in loops.items():
        assert p.host == adopted.real.node(node).host
        argv = adopted.hosts.ssh(p.host, f"tr '\\0' ' ' < /proc/{p.pid}/cmdline").split()
        assert argv[1:5] == ["-m", "hyperscope.health", "--loop", "2"]
        assert argv[argv.index("--node") + 1] == node
    # on the hosts, only the adopted cluster's own folder beside the operator's
    for h in adopted.hosts.hosts[2:]:
        assert adopted.hosts.ssh(h.addr, f"ls {adopted.hosts.remote_dir}").split() == ["adopted", "ops"]


def test_a_health_loop_killed_on_its_host_is_started_again_by_the_agent(adopted: Adopted) -> None:
    """workers-1's loop killed (by pid, on its host): the agent starts a new one there; the next
    test's failing check on workers-1 is caught by this new loop."""
    ad, state = adopted, adopted.state
    home = Path(state.dir).parents[1]
    old = next(p for p in manage.load("adopted", home).procs if p.role == existing_ops.HEALTH
               and p.node == "workers-1")  # fmt: skip
    mark = len(_log(state))
    ad.hosts.ssh(old.host, f"kill -9 {old.pid}")
    done = wait_for("the loop restarted", lambda: _first(state, mark, kind="restart", phase="done"), 60)
    assert isinstance(done, dict) and done["nodes"] == ["workers-1"] and done["hosts"] == [old.host]
    decided = _first(state, mark, kind="restart", phase="decided")
    assert decided is not None
    assert decided["reason"] == (
        f"the health loop of workers-1 (pid {old.pid} on {old.host}) is gone: started again"
    )
    new = next(p for p in manage.load("adopted", home).procs if p.role == existing_ops.HEALTH
               and p.node == "workers-1")  # fmt: skip
    assert new.host == old.host and new.pid != old.pid
    argv = ad.hosts.ssh(new.host, f"tr '\\0' ' ' < /proc/{new.pid}/cmdline").split()
    assert argv[1:5] == ["-m", "hyperscope.health", "--loop", "2"]
    assert argv[argv.index("--node") + 1] == "workers-1"
    # the other node's loop was left as it was
    other = [p for p in manage.load("adopted", home).procs if p.role == existing_ops.HEALTH
             and p.node == "workers-2"]  # fmt: skip
    assert [p.pid for p in other] == [p.pid for p in state.procs if p.role == existing_ops.HEALTH
                                      and p.node == "workers-2"]  # fmt: skip


def test_with_the_primary_gone_the_agent_leaves_it_and_prepares_a_spare_through_the_backup(
    adopted: Adopted,
) -> None:
    ad, state = adopted, adopted.state
    slurm = Slurm(Path(state.slurm_conf))
    primary = next(p for p in ad.real.procs if p.role == "slurmctld")
    mark = len(_log(state))
    ad.hosts.ssh(primary.host, f"kill -9 {primary.pid}")
    left = wait_for("the dead primary logged", lambda: _first(state, mark, kind="controller"), 30)
    assert isinstance(left, dict) and left["phase"] == "decided" and left["nodes"] == ["h1"]
    assert left["reason"] == (
        "h1 DOWN (scontrol ping); h2 in control: the operator's, left alone "
        "(no recovery.restart_controller_command)"
    )
    # a failing check on workers-1's host: drained by its loop; the spare is prepared, then joins
    wait_for("the backup to see the spare idle", lambda: _idle(slurm, "workers-2"), 60)
    mark = len(_log(state))
    _fail_check(ad, "workers-1")
    decided = wait_for("the drain acted on", lambda: _first(state, mark, kind="replace", phase="decided"), 90)
    _repair(ad, "workers-1")
    assert isinstance(decided, dict) and decided["nodes"] == ["workers-1", "workers-2"]
    assert decided["reason"].startswith("drained by its health check: hyperscope: ")
    joined = wait_for("the spare prepared", lambda: _first(state, mark, kind="spare"), 90)
    assert isinstance(joined, dict) and joined["phase"] == "done", joined
    prepared = (ad.tmp / "shared" / "prepared-workers-2").read_text()
    assert prepared == "prepared workers-2 on h4\n"  # on the spare's own host
    assert wait_for("the spare in the partition", lambda: _partition(slurm) == ["workers-2"], 30)
    ticket = wait_for("workers-1 ticketed", lambda: _first(state, mark, kind="replace", phase="ticket"), 60)
    assert isinstance(ticket, dict) and "needs new hardware" in ticket["reason"]
    out = ad.tmp / "job.out"  # jobs run while the primary is gone: the backup schedules them
    job = ["--wait", "-N1", "-o", str(out), "--wrap", "srun bash -c 'echo $SLURMD_NODENAME'"]
    manage.submit("adopted", Path(state.dir).parents[1], job)
    assert out.read_text().split() == ["workers-2"]
    # the operator's daemon untouched: the only restart was of our own loop
    restarts = [r["reason"] for r in _log(state) if r["kind"] == "restart" and r["phase"] == "decided"]
    assert restarts and all(r.startswith("the health loop of workers-1 ") for r in restarts)


def test_a_spare_the_script_fails_on_is_left_out_of_the_partition_as_a_ticket(adopted: Adopted) -> None:
    ad, state = adopted, adopted.state
    slurm = Slurm(Path(state.slurm_conf))
    home = Path(state.dir).parents[1]
    # the operator repairs workers-1 and resumes it: a spare again once its ticket is closed
    mark = len(_log(state))
    slurm.run("scontrol", "update", "nodename=workers-1", "state=resume")
    wait_for("the ticket closed", lambda: _first(state, mark, kind="ticket", phase="closed"), 30)
    (ad.tmp / "shared" / "no-driver").write_text("")
    wait_for("the spare idle again", lambda: _idle(slurm, "workers-1"), 60)
    mark = len(_log(state))
    _fail_check(ad, "workers-2")
    decided = wait_for("the drain acted on", lambda: _first(state, mark, kind="replace", phase="decided"), 90)
    _repair(ad, "workers-2")
    assert isinstance(decided, dict) and decided["nodes"] == ["workers-2", "workers-1"]
    opened = wait_for("the spare ticketed", lambda: _first(state, mark, kind="ticket", phase="opened"), 90)
    assert isinstance(opened, dict) and opened["nodes"] == ["workers-1"]
    assert "exited with status 3 on workers-1" in opened["reason"]
    assert "no GPU driver on workers-1" in opened["reason"]
    assert "workers-1" not in _partition(slurm)
    rows = {r.node: r for r in manage.list_nodes("adopted", home)}
    assert (
        rows["workers-1"].status == "NeedsHardware"
        and "left out of the partition" in rows["workers-1"].last_action
    )
    assert "ticket workers-1: recovery.spare_script" in ad.tickets.read_text()


def test_the_operators_controller_is_restarted_only_through_the_specs_command(adopted: Adopted) -> None:
    ad, root = adopted, adopted.real.run_dir
    home = Path(ad.state.dir).parents[1]
    slurm = Slurm(Path(ad.state.slurm_conf))
    assert slurm.controllers() == {"h1": "DOWN", "h2": "UP"}  # left alone so far
    h = ad.hosts
    ssh = f"ssh -p {h.port} -i {h.key} -o BatchMode=yes -o StrictHostKeyChecking=no"
    ssh += " -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
    remote = (
        f"cd {root} || exit 1; env HYPERSCOPE_CLUSTER_DIR={root} setsid slurmctld -D "
        f"-f {root}/etc/slurm.conf > {root}/log/restarted.out 2>&1 < /dev/null &"
    )
    restart = ad.tmp / "restart-ctld.sh"
    restart.write_text(f'#!/bin/bash\nset -e\n{ssh} root@"$2" "{remote}"\necho "restarted $1 at $2"\n')
    restart.chmod(0o755)
    spec = yaml.safe_load((ad.tmp / "adopt.yaml").read_text())
    spec["name"] = "fixer"
    spec["recovery"] = {"agent": True, "restart_controller_command": f"{restart} $1 $2"}
    (ad.tmp / "fixer.yaml").write_text(yaml.safe_dump(spec))
    fixer = manage.create(ad.tmp / "fixer.yaml", home)
    try:
        done = wait_for("the restart", lambda: _first(fixer, 0, kind="restart", phase="done"), 60)
        assert isinstance(done, dict) and done["nodes"] == ["h1"]
        decided = _first(fixer, 0, kind="restart", phase="decided")
        assert decided is not None
        assert (
            decided["reason"] == "h1 DOWN (scontrol ping); h2 in control: recovery.restart_controller_command"
        )
        assert wait_for("h1 up", lambda: slurm.controllers() == {"h1": "UP", "h2": "UP"}, 60)
    finally:
        print((Path(fixer.dir) / "agent.log").read_text())  # shown when the test fails
        manage.delete("fixer", home)


def test_delete_stops_the_loops_and_leaves_the_operators_daemons(adopted: Adopted) -> None:
    ad, state = adopted, adopted.state
    loops = [
        p for p in manage.load("adopted", Path(state.dir).parents[1]).procs if p.role == existing_ops.HEALTH
    ]
    assert manage.delete("adopted", Path(state.dir).parents[1])
    for p in loops:  # a zombie (killed, not reaped yet by whoever inherited it) is gone too
        state_of = f"sed 's/.*) //' /proc/{p.pid}/stat 2>/dev/null | cut -d' ' -f1"
        assert (
            ad.hosts.ssh(
                p.host, f's=$({state_of}); [ -n "$s" ] && [ "$s" != Z ] && echo alive || echo gone'
            ).strip()
            == "gone"
        )
        assert (
            ad.hosts.ssh(p.host, f"[ -e {existing_ops.remote_root(state)} ] && echo yes || echo no").strip()
            == "no"
        )
    backup = next(p for p in ad.real.procs if p.role == "slurmctld-backup")
    assert (
        ad.hosts.ssh(backup.host, f"[ -e /proc/{backup.pid} ] && echo alive || echo gone").strip() == "alive"
    )
