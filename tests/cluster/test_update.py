"""``cluster update`` and ``update-software`` (issue 14, item 7): the plan as data, then a live local
cluster (real slurmctld and slurmds) grown, shrunk and updated while a job runs on it."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from hyperscope.cli.main import app
from hyperscope.cluster import manage, nodeops
from hyperscope.cluster.slurm import Slurm
from hyperscope.cluster.spec import load_spec
from hyperscope.cluster.state import ClusterError, ClusterState, NodeState, alive, start_time, updating_now
from hyperscope.cluster.update import Updating, plan_update
from hyperscope.recovery.agent import read_log
from tests.cluster.conftest import EXAMPLE_LIFECYCLE


def _state(nodes: list[tuple[str, str, bool]]) -> ClusterState:
    state = ClusterState(
        name="u", provider="local", status="InService", dir="/nonexistent", spec_path="", spec_digest="",
        slurm_conf="", shared_dir="/s", controller="controller-1", partition="dev", ctld_port=1,
    )  # fmt: skip
    state.nodes = [NodeState("controller-1", "controller", "controller", False, False)]
    state.nodes += [NodeState(n, g, "worker", spare, True) for g, n, spare in nodes]
    return state


def _spec(tmp_path: Path, groups: list[dict[str, Any]], name: str = "u") -> Any:
    d = tmp_path / "spec"
    if not (d / "lifecycle").is_dir():
        shutil.copytree(EXAMPLE_LIFECYCLE, d / "lifecycle")
    doc = {
        "name": name,
        "provider": "local",
        "lifecycle_scripts": "lifecycle",
        "shared_dir": "/s" if name == "u" else str(tmp_path / "shared"),
        "instance_groups": [{"name": "controller", "role": "controller", "count": 1}, *groups],
    }
    (d / "cluster.yaml").write_text(yaml.safe_dump(doc))
    return load_spec(d / "cluster.yaml")


def test_the_plan_promotes_spares_first_removes_idle_nodes_first_and_refuses_what_cannot_change(
    tmp_path: Path,
) -> None:
    # workers-3 had replaced workers-2, which is now the spare
    state = _state(
        [("workers", "workers-1", False), ("workers", "workers-3", False), ("workers", "workers-2", True)]
    )
    old = _spec(tmp_path, [{"name": "workers", "role": "worker", "count": 2, "spares": 1}])
    grow = _spec(tmp_path, [{"name": "workers", "role": "worker", "count": 3, "spares": 1}])
    plan = plan_update(state, old, grow, busy=set())
    assert (plan.promote, plan.add, plan.remove, plan.refused) == (
        ("workers-2",), (("workers", "workers-4", True),), (), ()
    )  # fmt: skip
    shrink = _spec(tmp_path, [{"name": "workers", "role": "worker", "count": 1}])
    plan = plan_update(state, old, shrink, busy={"workers-3"})  # the busy one stays
    assert plan.remove == ("workers-1", "workers-2") and not plan.add
    gpus = _spec(
        tmp_path, [{"name": "workers", "role": "worker", "count": 2, "spares": 1, "gpus_per_node": 2}]
    )
    assert plan_update(state, old, gpus, busy=set()).refused == (
        "instance_groups.workers: its role and gpus_per_node stay as created",
    )


def test_the_plan_refuses_adding_or_removing_a_backup_controller_saying_how(tmp_path: Path) -> None:
    state = _state([("workers", "workers-1", False)])
    old = _spec(tmp_path, [{"name": "workers", "role": "worker", "count": 1}])
    backup = dataclasses.replace(old, slurm=dataclasses.replace(old.slurm, backup_controller=True))
    for before, after in ((old, backup), (backup, old), (None, backup)):
        (why,) = plan_update(state, before, after, busy=set()).refused
        assert why.startswith("slurm.backup_controller: a backup controller is added, moved or removed")
        assert "`hyperscope cluster create --replace -f SPEC`" in why
    other = dataclasses.replace(old, slurm=dataclasses.replace(old.slurm, slurmd_timeout=9))
    assert plan_update(state, old, other, busy=set()).refused == (
        "slurm: Slurm's settings cannot change on a live cluster",
    )


def _write(d: Path, doc: dict[str, Any]) -> Path:
    (d / "cluster.yaml").write_text(yaml.safe_dump(doc))
    return d / "cluster.yaml"


@pytest.mark.slurm
@pytest.mark.usefixtures("needs_slurm")
def test_a_live_cluster_grows_shrinks_and_updates_its_software_while_a_job_runs(tmp_path: Path) -> None:
    home, d = tmp_path / "home", tmp_path / "spec"
    shutil.copytree(EXAMPLE_LIFECYCLE, d / "lifecycle")
    (d / "lifecycle" / "on_update.sh").write_text(
        '#!/bin/bash\necho "v2" > "$HYPERSCOPE_SHARED_DIR/updated-$HYPERSCOPE_NODE-$HYPERSCOPE_UPDATE"\n'
    )
    workers: dict[str, Any] = {"name": "workers", "role": "worker", "count": 2, "spares": 1}
    doc: dict[str, Any] = {
        "name": "up", "provider": "local", "lifecycle_scripts": "lifecycle",
        "shared_dir": str(tmp_path / "shared"),
        "instance_groups": [{"name": "controller", "role": "controller", "count": 1}, workers],
    }  # fmt: skip
    runner = CliRunner()
    spec = _write(d, doc)
    try:
        made = runner.invoke(app, ["cluster", "create", "-f", str(spec), "--home", str(home)])
        assert made.exit_code == 0, made.output
        state = ClusterState.load(home / "clusters" / "up")
        slurm = Slurm(Path(state.slurm_conf))
        started = tmp_path / "started"
        job = int(
            slurm.run(
                "sbatch", "--parsable", "-N1", "-o", str(started), "--wrap", "echo up; sleep 300"
            ).stdout
        )
        # running in the script, past its prolog (the health check, seconds under load)
        _until(lambda: started.is_file() and started.read_text() == "up\n")
        assert _job(slurm, job) == ("RUNNING", "workers-1")

        # grow: the spare joins the partition, a new spare and a new group are made
        workers.update(count=3, spares=1)
        doc["instance_groups"].append({"name": "big", "role": "worker", "count": 1})
        grown = runner.invoke(app, ["cluster", "update", "-f", str(_write(d, doc)), "--home", str(home)])
        assert grown.exit_code == 0, grown.output
        assert "add workers-4, big-1; move spare(s) workers-3 into the partition" in grown.output
        nodes = {n.name: (n.state, n.partitions) for n in slurm.nodes()}
        assert nodes == {
            **{f"workers-{i}": ("IDLE", ("dev",)) for i in (2, 3)}, "workers-1": ("MIXED", ("dev",)),
            "big-1": ("IDLE", ("dev",)), "workers-4": ("IDLE", ()),
        }  # fmt: skip
        assert _job(slurm, job) == ("RUNNING", "workers-1")
        out = slurm.run("srun", "-N4", "-p", "dev", "bash", "-c", "echo $SLURMD_NODENAME").stdout
        assert sorted(out.split()) == ["big-1", "workers-1", "workers-2", "workers-3"]

        # shrink: the idle go; the job's node stays; a removed node's job is waited for, and a
        # wait that runs out says which job holds it and leaves the node drained (the operator's)
        big = int(
            slurm.run("sbatch", "--parsable", "-w", "big-1", "-o", "/dev/null", "--wrap", "sleep 300").stdout
        )
        _until(lambda: _job(slurm, big) == ("RUNNING", "big-1"))
        before = ClusterState.load(Path(state.dir)).procs
        workers.update(count=1, spares=0)
        doc["instance_groups"].pop()
        argv = ["cluster", "update", "-f", str(_write(d, doc)), "--home", str(home)]
        held = runner.invoke(app, [*argv, "--drain-timeout", "2"])
        assert held.exit_code != 0 and f"jobs still run after 2 s (big-1: job {big})" in held.output
        assert {n.name: n.reason for n in slurm.nodes()}["big-1"] == "Removed by cluster update"
        assert ClusterState.load(Path(state.dir)).status == "InService"
        slurm.run("scancel", str(big))
        shrunk = runner.invoke(app, argv)
        assert shrunk.exit_code == 0, shrunk.output
        assert [n.name for n in slurm.nodes()] == ["workers-1"]
        assert _job(slurm, job) == ("RUNNING", "workers-1")
        assert not any(alive(p) for p in before if p.role == "slurmd" and p.node != "workers-1")
        after = ClusterState.load(Path(state.dir))
        assert after.status == "InService" and [n.name for n in after.nodes] == ["controller-1", "workers-1"]
        assert any(p.role == "agent" and alive(p) for p in after.procs)  # started again

        # a change an update cannot make is refused, naming it
        workers["gpus_per_node"] = 2
        refused = runner.invoke(app, ["cluster", "update", "-f", str(_write(d, doc)), "--home", str(home)])
        assert refused.exit_code != 0 and "its role and gpus_per_node stay as created" in refused.output
        workers.pop("gpus_per_node")
        _write(d, doc)

        # software: the job's node waits for its job (cut short here), then is updated and resumed
        slurm.run("scancel", str(job))
        sw = runner.invoke(app, ["cluster", "update-software", "up", "--home", str(home)])
        assert sw.exit_code == 0, sw.output
        assert "updated 2 node(s) of up" in sw.output
        shared = tmp_path / "shared"
        assert sorted(p.name for p in shared.glob("updated-*")) == [
            "updated-controller-1-1",
            "updated-workers-1-1",
        ]
        _until(lambda: [(n.state, n.flags) for n in slurm.nodes()] == [("IDLE", ())])
    finally:
        runner.invoke(app, ["cluster", "delete", "up", "--home", str(home)])


def _job(slurm: Slurm, job: int) -> tuple[str, str] | None:
    j = {x.id: x for x in slurm.jobs()}.get(job)
    return None if j is None else (j.state, j.nodes)


def _until(ready: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := ready()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)
    return value


@pytest.mark.slurm
@pytest.mark.usefixtures("needs_slurm")
def test_a_node_that_dies_during_a_software_update_of_another_is_recovered_by_the_agent(
    tmp_path: Path,
) -> None:
    """The agent keeps running through an update: it leaves alone the node being updated (which
    the update publishes in the state) and recovers one that dies meanwhile; the update then
    takes the recovered node in its turn."""
    home, d, shared = tmp_path / "home", tmp_path / "spec", tmp_path / "shared"
    shutil.copytree(EXAMPLE_LIFECYCLE, d / "lifecycle")
    (d / "lifecycle" / "on_update.sh").write_text(
        "#!/bin/bash\n"
        'touch "$HYPERSCOPE_SHARED_DIR/updated-$HYPERSCOPE_NODE"\n'
        'if [ "$HYPERSCOPE_NODE" = workers-1 ]; then\n'
        '  for i in $(seq 600); do [ -e "$HYPERSCOPE_SHARED_DIR/go" ] && exit 0; sleep 0.2; done; exit 1\n'
        "fi\n"
    )
    doc: dict[str, Any] = {
        "name": "live", "provider": "local", "lifecycle_scripts": "lifecycle", "shared_dir": str(shared),
        "instance_groups": [
            {"name": "controller", "role": "controller", "count": 1},
            {"name": "workers", "role": "worker", "count": 2, "spares": 1},
        ],
    }  # fmt: skip
    spec = _write(d, doc)
    manage.create(spec, home, lambda node, step: None)
    cdir = home / "clusters" / "live"
    result: list[object] = []
    try:

        def run() -> None:
            try:
                result.append(manage.update_software("live", home, lambda n, s: None, batch=1,
                                                     drain_timeout_s=120))  # fmt: skip
            except Exception as exc:
                result.append(exc)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        _until(lambda: (shared / "updated-workers-1").is_file(), 120)
        during = ClusterState.load(cdir)
        assert during.status == "Updating" and during.updating == ["workers-1"]
        assert nodeops.signal_node(during, "workers-2", signal.SIGKILL)  # a crash elsewhere

        def recovered() -> dict[str, Any] | None:
            return next(
                (r for r in read_log(cdir) if r.get("nodes", [""])[:1] == ["workers-2"]
                 and r.get("phase") == "done" and r["kind"] in ("replace", "reboot")),
                None,
            )  # fmt: skip

        done = _until(recovered, 120)
        assert not worker.is_alive() or ClusterState.load(cdir).updating == ["workers-1"]
        (shared / "go").touch()
        worker.join(300)
        assert result and isinstance(result[0], list), result
        assert result[0] == ["controller-1", "workers-1", "workers-2", "workers-3"]
        assert not any("workers-1" in r.get("nodes", []) for r in read_log(cdir) if r["kind"] != "start")
        assert done["kind"] in ("replace", "reboot")
        slurm = Slurm(Path(ClusterState.load(cdir).slurm_conf))
        _until(lambda: all(n.state == "IDLE" and not n.flags and not n.reason for n in slurm.nodes()))
        after = ClusterState.load(cdir)
        assert after.status == "InService" and after.updating == [] and after.update_pid == 0
        assert sorted(p.name for p in shared.glob("updated-*")) == [
            "updated-controller-1", "updated-workers-1", "updated-workers-2", "updated-workers-3"
        ]  # fmt: skip
    finally:
        (shared / "go").touch()
        for log in [cdir / "log" / "slurmctld.log", cdir / "agent.log"]:
            print(log, log.read_text()[-3000:] if log.is_file() else "(none)")  # shown when it fails
        manage.delete("live", home)


def test_the_nodes_an_update_publishes_count_only_while_that_update_runs(tmp_path: Path) -> None:
    """What the agent skips (``updating_now``) is the published list of a live update only; a
    killed update's list is ignored, and the next update takes over its Updating status."""
    home = tmp_path / "home"
    d = home / "clusters" / "u"
    d.mkdir(parents=True)
    state = _state([("workers", "workers-1", False), ("workers", "workers-2", False)])
    state.dir = str(d)
    state.status, state.updating = "Updating", ["workers-1"]
    state.update_pid, state.update_start = os.getpid(), start_time(os.getpid()) or 0
    assert updating_now(state) == {"workers-1"}
    state.save()
    with pytest.raises(ClusterError, match="another update runs"):
        Updating(home, "u", None).__enter__()
    dead = subprocess.Popen(["true"])
    dead.wait()
    state.update_pid = dead.pid  # gone: its list no longer holds the agent back
    assert updating_now(state) == set()
    state.save()
    with Updating(home, "u", None) as up:
        assert up.state.update_pid == os.getpid() and up.state.updating == []
        up.act_on(["workers-2"])
        assert updating_now(ClusterState.load(d)) == {"workers-2"}
    after = ClusterState.load(d)
    assert (after.status, after.update_pid, after.updating) == ("InService", 0, [])
    after.node("workers-1").status = "Replacing"  # the agent at work: an update waits its turn
    after.save()
    with pytest.raises(ClusterError, match=r"is InService \(the agent is recovering workers-1\)"):
        Updating(home, "u", None).__enter__()
