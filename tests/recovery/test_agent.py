"""The agent on a real local cluster, without training: operators' marks through the CLI, a frozen
node, a fresh node when there is no spare, and nothing left running after delete."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hyperscope.cli.main import app
from hyperscope.cluster import manage, nodeops
from hyperscope.cluster.slurm import Slurm
from hyperscope.cluster.state import ClusterState, alive
from hyperscope.recovery.agent import read_log
from tests.recovery.conftest import wait_for

pytestmark = pytest.mark.slurm


def _done(state: ClusterState, kind: str, node: str) -> dict[str, object] | None:
    for r in read_log(Path(state.dir)):
        if r["kind"] == kind and r["nodes"][0] == node and r["phase"] in ("done", "failed"):
            return r
    return None


def _home(state: ClusterState) -> Path:
    return Path(state.dir).parents[1]


def test_operators_mark_nodes_through_the_cli_and_the_agent_acts(
    local_cluster: Callable[..., ClusterState],
) -> None:
    state = local_cluster()
    runner = CliRunner()
    done = runner.invoke(
        app, ["cluster", "reboot-node", state.name, "workers-2", "--home", str(_home(state))]
    )
    assert done.exit_code == 0, done.output
    assert "reason=Action:Reboot" in done.output
    rebooted = wait_for("the reboot", lambda: _done(state, "reboot", "workers-2"), timeout=60)
    assert isinstance(rebooted, dict) and rebooted["phase"] == "done"

    done = runner.invoke(
        app, ["cluster", "replace-node", state.name, "workers-1", "--home", str(_home(state))]
    )
    assert done.exit_code == 0, done.output
    replaced = wait_for("the replacement", lambda: _done(state, "replace", "workers-1"), timeout=60)
    assert (
        isinstance(replaced, dict)
        and replaced["phase"] == "done"
        and replaced["nodes"] == ["workers-1", "workers-3"]
    )
    decided = [r for r in read_log(Path(state.dir)) if r["phase"] == "decided"]
    assert [r["reason"] for r in decided] == [
        "operator marked it: Action:Reboot",
        "operator marked it: Action:Replace",
    ]

    def settled() -> bool:
        live = {n.name: n for n in Slurm(Path(state.slurm_conf)).nodes()}
        return all(live[n].available and not live[n].reason for n in ("workers-1", "workers-2", "workers-3"))

    wait_for("every node back in service", settled, timeout=30)
    time.sleep(3)  # a few more passes: a node just back (idle* for a second) is not replaced again
    assert len([r for r in read_log(Path(state.dir)) if r["phase"] == "decided"]) == 2
    rows = {r.node: r for r in manage.list_nodes(state.name, _home(state))}
    assert (rows["workers-1"].replacements, rows["workers-2"].replacements) == (1, 0)
    assert "Action:Replace" in rows["workers-1"].last_action and rows["workers-1"].spare
    assert manage.describe(state.name, _home(state)).state.status == "InService"
    listed = runner.invoke(app, ["cluster", "list-nodes", state.name, "--home", str(_home(state))])
    assert "operator marked it" in listed.output

    bad = runner.invoke(
        app, ["cluster", "replace-node", state.name, "controller-1", "--home", str(_home(state))]
    )
    assert bad.exit_code == 1 and "runs no slurmd" in bad.output


def test_a_frozen_node_without_a_spare_is_re_created_under_its_name(
    local_cluster: Callable[..., ClusterState],
) -> None:
    state = local_cluster(spares=0)
    frozen = nodeops.signal_node(state, "workers-2", signal.SIGSTOP)  # a hang, not a crash
    assert frozen
    replaced = wait_for("the replacement", lambda: _done(state, "replace", "workers-2"), timeout=60)
    assert isinstance(replaced, dict) and replaced["phase"] == "done"
    decided = next(
        r for r in read_log(Path(state.dir)) if r["kind"] == "replace" and r["nodes"][0] == "workers-2"
    )
    assert decided["nodes"] == ["workers-2"] and decided["reason"].startswith("not responding (Slurm: ")
    after = ClusterState.load(Path(state.dir))
    old = [p for p in after.procs if p.pid in frozen]
    assert old == [] and nodeops.slurmd_alive(after, "workers-2")
    out = Slurm(Path(state.slurm_conf)).run("srun", "-N2", "bash", "-c", "echo $SLURMD_NODENAME").stdout
    assert sorted(out.split()) == ["workers-1", "workers-2"]


def test_a_dead_spare_is_re_created_and_delete_stops_everything(
    local_cluster: Callable[..., ClusterState],
) -> None:
    state = local_cluster()
    nodeops.signal_node(state, "workers-3", signal.SIGKILL)
    done = wait_for("the spare re-created", lambda: _done(state, "replace", "workers-3"), timeout=60)
    assert isinstance(done, dict) and done["phase"] == "done" and done["nodes"] == ["workers-3"]
    assert ClusterState.load(Path(state.dir)).node("workers-3").spare
    procs = ClusterState.load(Path(state.dir)).procs
    assert any(p.role == "agent" for p in procs)
    assert manage.delete(state.name, _home(state))
    assert not any(alive(p) for p in procs)
    assert nodeops.node_pids(state, "workers-1") == []
