"""Issue 14 on an ssh cluster of real hosts (network namespaces of this machine, each with its own
sshd, hostname and disk): Slurm's backup controller on a host of its own
(``slurm.backup_controller: HOST``) schedules jobs while the primary slurmctld is gone, and the
agent starts the primary again on its host; each node's health loop runs on its host beside its
slurmd, and a failing check there drains the node, which the agent then re-creates. One cluster
for the whole module (4 hosts: the primary, the backup, two workers)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperscope.cluster import manage, ssh_health
from hyperscope.cluster.local import missing_requirements
from hyperscope.cluster.slurm import Slurm, SlurmError
from hyperscope.cluster.ssh import slurm_for
from hyperscope.cluster.state import ClusterError, ClusterState, Proc, alive
from hyperscope.recovery.agent import read_log
from tests.recovery import netns
from tests.recovery.conftest import ROOT, wait_for

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterState, netns.Hosts]]:
    why = netns.missing() or missing_requirements()
    if why:
        pytest.skip(f"multi-host tests need namespaces and Slurm: {why}")
    tmp = tmp_path_factory.mktemp("sshsup")
    hosts = netns.Hosts(tmp, f"/run/hs-ns-{uuid.uuid4().hex[:8]}")
    home = tmp / "home"
    try:
        hosts.open(4)
        shutil.copytree(ROOT / "examples" / "lifecycle", tmp / "lifecycle")
        a = [h.addr for h in hosts.hosts]
        doc = {
            "name": "sup", "provider": "ssh", "lifecycle_scripts": "lifecycle",
            "shared_dir": str(tmp / "shared"), "ssh": hosts.ssh_options(),
            "slurm": {"backup_controller": a[1]},
            "instance_groups": [
                {"name": "controller", "role": "controller", "count": 1, "hosts": [a[0]]},
                {"name": "workers", "role": "worker", "count": 2, "hosts": a[2:4]},
            ],
            "recovery": {"health_check_interval": 2, "max_replacements": 20},
        }  # fmt: skip
        (tmp / "sup.yaml").write_text(yaml.safe_dump(doc))
        state = manage.create(tmp / "sup.yaml", home)
        yield state, hosts
    finally:
        if (home / "clusters" / "sup" / "agent.log").is_file():  # shown when a test fails
            print((home / "clusters" / "sup" / "agent.log").read_text())
        if (home / "clusters" / "sup" / "cluster.json").is_file():
            with contextlib.suppress(ClusterError):
                manage.delete("sup", home)
        hosts.close()


def _home(state: ClusterState) -> Path:
    return Path(state.dir).parents[1]


def _now(state: ClusterState) -> ClusterState:
    return manage.load(state.name, _home(state))


def _proc(state: ClusterState, role: str, node: str = "") -> Any:
    return next(p for p in _now(state).procs if p.role == role and p.node == node)


def _log(state: ClusterState, after: int = 0) -> list[dict[str, Any]]:
    return read_log(Path(state.dir))[after:]


def _submit(slurm: Slurm, *args: str) -> int:
    """sbatch, tried again while no controller takes it (the backup takes over after
    SlurmctldTimeout)."""

    def once() -> int | None:
        try:
            return slurm.submit(*args)
        except SlurmError:
            return None

    job = wait_for("a controller to take the job", once, 60)
    assert isinstance(job, int)
    return job


def _restarted(state: ClusterState, mark: int) -> dict[str, Any] | None:
    """The end (done or failed) of the first restart the agent logged after ``mark``."""
    return next((r for r in _log(state, mark) if r["kind"] == "restart" and r["phase"] != "decided"), None)


def _completed(slurm: Slurm, job: int) -> bool:
    try:
        return any(j.id == job and j.state == "COMPLETED" for j in slurm.jobs())
    except SlurmError:
        return False


def test_the_backup_schedules_while_the_primary_is_gone_and_the_agent_restarts_the_primary(
    cluster: tuple[ClusterState, netns.Hosts],
) -> None:
    state, hosts = cluster
    primary, backup = hosts.hosts[0].addr, hosts.hosts[1].addr
    conf = hosts.ssh(primary, f"cat {state.slurm_conf}")
    assert f"SlurmctldHost=h1({primary})\nSlurmctldHost=h2({backup})\n" in conf
    assert f"StateSaveLocation={Path(state.shared_dir) / 'slurm-state' / 'sup'}\n" in conf
    slurm = slurm_for(_now(state))
    assert slurm.controllers() == {"h1": "UP", "h2": "UP"}
    assert _proc(state, "slurmctld-backup").host == backup

    # the agent held still, so only the backup can schedule the job submitted after the kill
    agent = _proc(state, "agent")
    old = _proc(state, "slurmctld")
    os.kill(agent.pid, signal.SIGSTOP)
    try:
        hosts.ssh(primary, f"kill -9 {old.pid}")
        job = _submit(slurm, "-N2", "--wrap", "srun true")
        wait_for("the job to complete through the backup", lambda: _completed(slurm, job), 90)
        assert slurm.controllers() == {"h1": "DOWN", "h2": "UP"}
        mark = len(_log(state))
    finally:
        os.kill(agent.pid, signal.SIGCONT)

    done = wait_for("the agent to restart the primary on its host", lambda: _restarted(state, mark), 60)
    assert isinstance(done, dict) and done["phase"] == "done", done
    assert done["nodes"] == ["slurmctld"] and done["hosts"] == [primary]
    decided = next(r for r in _log(state, mark) if r["kind"] == "restart")
    assert decided["reason"] == f"slurmctld (pid {old.pid}) is gone: started again"
    new = _proc(state, "slurmctld")
    assert new.host == primary and new.pid != old.pid
    assert slurm.controllers() == {"h1": "UP", "h2": "UP"}
    job = _submit(slurm, "-N2", "--wrap", "srun true")  # the primary in control again: it schedules
    wait_for("a job after the restart", lambda: _completed(slurm, job), 90)


def test_with_the_primary_host_cut_off_jobs_go_through_the_backup_and_describe_answers(
    cluster: tuple[ClusterState, netns.Hosts],
) -> None:
    """The primary's host gone without a whole-host kill: its slurmctld killed by pid, then its
    link taken down inside its namespace (ssh to it fails as to a machine that is off). Slurm's
    commands fall back to the backup's host, the backup schedules, ``describe`` and
    ``list-nodes`` answer; the link back, the agent restarts the primary on its host."""
    state, hosts = cluster
    h1, primary = hosts.hosts[0], hosts.hosts[0].addr
    home = _home(state)
    old = _proc(state, "slurmctld")
    os.kill(old.pid, signal.SIGKILL)  # the namespaces share this machine's PIDs
    link = netns.IFNAME  # the host's one interface, inside its namespace
    netns._ip("link", "set", link, "down", ns=h1.ns)
    try:
        slurm = slurm_for(_now(state))
        job = _submit(slurm, "-N2", "--wrap", "srun true")
        wait_for("the job to complete through the backup", lambda: _completed(slurm, job), 120)
        described = manage.describe(state.name, home)
        assert described.running and described.slurm_version
        assert any(j.name for j in described.jobs)  # the catalog synced through the backup
        rows = {r.node: r.health for r in manage.list_nodes(state.name, home)}
        assert rows["workers-1"] == rows["workers-2"] == "healthy"
        assert slurm.controllers() == {"h1": "DOWN", "h2": "UP"}
        assert _proc(state, "slurmctld").pid == old.pid  # unreachable: nothing restarted meanwhile
        mark = len(_log(state))
    finally:
        netns._ip("link", "set", link, "up", ns=h1.ns)

    done = wait_for("the primary restarted once its host answers", lambda: _restarted(state, mark), 90)
    assert isinstance(done, dict) and done["phase"] == "done", done
    assert done["nodes"] == ["slurmctld"] and done["hosts"] == [primary]
    assert slurm.controllers() == {"h1": "UP", "h2": "UP"}


def test_a_failing_health_check_on_a_host_drains_its_node_and_the_agent_re_creates_it(
    cluster: tuple[ClusterState, netns.Hosts],
) -> None:
    state, hosts = cluster
    by_node = {n.name: n.host for n in state.nodes}
    root = state.run_dir

    def loop(node: str) -> list[str]:
        """The node's health loop's command line, on its host (from its pid file)."""
        out = hosts.ssh(
            by_node[node], f"tr '\\0' ' ' < /proc/$(cat {root}/locks/loop-{node}.pid)/cmdline", check=False
        )
        return out.split()

    for node in ("workers-1", "workers-2"):  # one loop per node, beside its slurmd, on its host
        assert wait_for(f"{node}'s health loop", lambda n=node: "--loop" in loop(n), 30)  # type: ignore[misc]
        assert loop(node)[loop(node).index("--parent") + 1] == str(_proc(state, "slurmd", node).pid)
        assert loop(node)[loop(node).index("--node") + 1] == node
    sick = "workers-2"
    mark = len(_log(state))
    faults = ssh_health.faults_file(state, sick)
    fault = json.dumps({"fail": {"nic": "link down on eth0"}})
    hosts.ssh(by_node[sick], f"mkdir -p {Path(faults).parent} && echo '{fault}' > {faults}")

    def decided() -> dict[str, Any] | None:
        return next(
            (r for r in _log(state, mark) if r["kind"] == "replace" and r["phase"] == "decided"), None
        )

    first = wait_for("the drain to be acted on", decided, 60)
    hosts.ssh(by_node[sick], f"rm -f {faults}")  # repaired: the re-created node is healthy
    assert isinstance(first, dict) and first["nodes"] == [sick]
    assert first["reason"].startswith("drained by its health check: hyperscope: ")
    assert "link down on eth0" in first["reason"]

    def ended() -> dict[str, Any] | None:
        return next(
            (r for r in _log(state, mark) if r["kind"] == "replace" and r["phase"] not in ("decided",)), None
        )

    done = wait_for(f"{sick} re-created", ended, 120)
    assert isinstance(done, dict) and done["phase"] == "done", done
    slurm = slurm_for(_now(state))
    out = slurm.run("srun", "-N2", "bash", "-c", "echo $SLURMD_NODENAME").stdout
    assert sorted(out.split()) == ["workers-1", "workers-2"]
    new = _proc(state, "slurmd", sick).pid
    wait_for("the re-created node's loop", lambda: "--loop" in loop(sick), 30)
    assert loop(sick)[loop(sick).index("--parent") + 1] == str(new)


def test_the_agent_and_its_keeper_on_this_machine_restart_each_other(
    cluster: tuple[ClusterState, netns.Hosts],
) -> None:
    state, _ = cluster
    keeper = wait_for(
        "the keeper", lambda: next((p for p in _now(state).procs if p.role == "keeper"), None), 30
    )
    agent = _proc(state, "agent")
    assert isinstance(keeper, Proc) and alive(keeper) and alive(agent)
    os.kill(agent.pid, signal.SIGKILL)
    new = wait_for(
        "a new agent", lambda: (p := _proc(state, "agent")).pid != agent.pid and alive(p) and p, 40
    )
    assert isinstance(new, Proc)
    assert (
        "keeper: the agent of sup was gone: started again"
        in (Path(state.dir) / "log" / "keeper.out").read_text()
    )
    os.kill(keeper.pid, signal.SIGKILL)
    again = wait_for(
        "a new keeper", lambda: (p := _proc(state, "keeper")).pid != keeper.pid and alive(p) and p, 40
    )
    assert isinstance(again, Proc)


def test_the_agent_and_its_keeper_killed_at_once_come_back_by_the_third_path(
    cluster: tuple[ClusterState, netns.Hosts],
) -> None:
    """Both killed together (neither can start the other): ``keeper --once`` (a cron line's
    command) starts them again; killed again, the operator's next ``list-nodes`` does."""
    state, _ = cluster
    home = _home(state)
    once = [sys.executable, "-m", "hyperscope.recovery.keeper", "--once", "--cluster", state.name,
            "--home", str(home)]  # fmt: skip
    _kill_both_then(
        state, lambda: subprocess.run(once, check=True), "`python -m hyperscope.recovery.keeper --once`"
    )
    _kill_both_then(state, lambda: manage.list_nodes(state.name, home), "`hyperscope cluster list-nodes`")


def _running(state: ClusterState, role: str, besides: int = 0) -> Proc | None:
    """The recorded ``role`` (other than pid ``besides``) if it runs."""
    p = next((p for p in _now(state).procs if p.role == role and not p.host), None)
    return p if p is not None and p.pid != besides and alive(p) else None


def _holders(lock: Path) -> list[str]:
    """The processes with ``lock`` open (what a failed wait shows)."""
    out = []
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        with contextlib.suppress(OSError):
            if Path(os.readlink(fd)) == lock:
                out.append((fd.parents[1] / "cmdline").read_text().replace("\0", " ")[:200])
    return out


def _kill_both_then(state: ClusterState, revive: Callable[[], object], how: str) -> None:
    agent = wait_for("the agent", lambda: _running(state, "agent"), 40)
    keeper = wait_for("the keeper", lambda: _running(state, "keeper"), 40)
    assert isinstance(agent, Proc) and isinstance(keeper, Proc)
    for sig in (signal.SIGSTOP, signal.SIGKILL):  # held first: neither restarts the other meanwhile
        for p in (keeper, agent):
            os.kill(p.pid, sig)
    wait_for("both gone", lambda: not alive(agent) and not alive(keeper), 10)
    mark = len(_log(state))
    revive()
    try:
        new = wait_for("a new agent", lambda: _running(state, "agent", besides=agent.pid), 40)
    except AssertionError:
        held = _holders(Path(state.dir) / "agent.lock")
        raise AssertionError(f"no new agent; agent.lock held by {held}") from None
    again = wait_for("a new keeper", lambda: _running(state, "keeper", besides=keeper.pid), 40)
    assert isinstance(new, Proc) and isinstance(again, Proc)
    said = [r for r in _log(state, mark) if r["kind"] == "restart" and r["nodes"] == ["agent"]]
    assert [r["reason"] for r in said] == [f"the agent and its keeper were gone: started again by {how}"]


def test_update_of_a_cluster_with_a_backup_controller_restarts_both_on_the_new_node_list(
    cluster: tuple[ClusterState, netns.Hosts],
) -> None:
    """``cluster update`` (workers 2 → 1): slurm.conf on both controllers' hosts without the node
    gone, both slurmctld restarted (the backup stopped first, started again on the new list) and
    standing; adding or removing the backup controller is refused, with what to do instead."""
    state, hosts = cluster
    home, tmp = _home(state), _home(state).parent
    primary, backup = hosts.hosts[0].addr, hosts.hosts[1].addr
    doc = yaml.safe_load((tmp / "sup.yaml").read_text())
    gone = {**doc, "slurm": {}}
    (tmp / "nobackup.yaml").write_text(yaml.safe_dump(gone))
    with pytest.raises(ClusterError, match=r"slurm\.backup_controller: a backup controller is added"):
        manage.update(tmp / "nobackup.yaml", home, lambda n, s: None, drain_timeout_s=30)
    before = _now(state)
    assert before.status == "InService"
    doc["instance_groups"][1].update(count=1, hosts=doc["instance_groups"][1]["hosts"][:1])
    (tmp / "sup.yaml").write_text(yaml.safe_dump(doc))
    said: list[str] = []
    plan = manage.update(tmp / "sup.yaml", home, lambda n, s: said.append(f"{n}: {s}"), drain_timeout_s=60)
    assert plan.describe() == "remove workers-2"
    order = [s for s in said if "slurmctld" in s]
    assert order == [
        f"controller-1: stopping the backup slurmctld on {backup} (started again below)",
        f"controller-1: restarting slurmctld on {primary} with the new node list (running jobs go on)",
        f"controller-1: starting the backup slurmctld on {backup} with the new node list",
    ]
    after = _now(state)
    for role in ("slurmctld", "slurmctld-backup"):
        was, now = (next(p for p in s.procs if p.role == role) for s in (before, after))
        assert now.pid != was.pid and now.host == was.host
    for host in (primary, backup):
        conf = hosts.ssh(host, f"cat {state.slurm_conf}")
        assert "NodeName=workers-1 " in conf and "workers-2" not in conf
    slurm = slurm_for(after)
    assert slurm.controllers() == {"h1": "UP", "h2": "UP"}
    assert [n.name for n in slurm.nodes()] == ["workers-1"]
    job = _submit(slurm, "-N1", "--wrap", "srun true")
    wait_for("a job after the update", lambda: _completed(slurm, job), 90)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return f"{pid} (gone)"


def test_delete_stops_both_controllers_and_every_health_loop_on_every_host(
    cluster: tuple[ClusterState, netns.Hosts],
) -> None:
    state, hosts = cluster
    here = [p for p in _now(state).procs if p.role in ("agent", "keeper")]
    assert manage.delete(state.name, _home(state))
    assert here and not any(alive(p) for p in here)
    left = [p for h in hosts.hosts for p in hosts.pids(h) if p != h.sshd.pid]
    assert left == [], f"delete left processes on the hosts: {[_cmdline(p) for p in left]}"
    assert not (Path(state.shared_dir) / "slurm-state" / "sup").exists()
