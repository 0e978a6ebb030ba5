"""Issue 14, "polite": on a real local cluster the agent leaves an operator's nodes alone, takes a
resume's not-responding flicker for what it is, replaces a marked node only after its jobs end (or
at once with --now), and brakes automatic replacements past the spec's rate limit."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hyperscope.cli.main import app
from hyperscope.cluster import hooks, nodeops
from hyperscope.cluster.slurm import Job, Node, Slurm
from hyperscope.cluster.state import ClusterState
from hyperscope.recovery.agent import read_log
from tests.recovery.conftest import wait_for

pytestmark = pytest.mark.slurm


def _node(state: ClusterState, name: str) -> Node:
    return {n.name: n for n in Slurm(Path(state.slurm_conf)).nodes()}[name]


def _job(state: ClusterState, job_id: int) -> Job:
    return {j.id: j for j in Slurm(Path(state.slurm_conf)).jobs()}[job_id]


def _log(state: ClusterState, kind: str, node: str | None = None) -> list[dict[str, Any]]:
    return [
        r for r in read_log(Path(state.dir)) if r["kind"] == kind and (node is None or r["nodes"][0] == node)
    ]


def _sbatch(state: ClusterState, *args: str) -> int:
    done = Slurm(Path(state.slurm_conf)).run("sbatch", "--parsable", "-o", "/dev/null", *args)
    return int(done.stdout.strip().split(";")[0])


def _cli(state: ClusterState, *args: str) -> str:
    done = CliRunner().invoke(app, ["cluster", *args, "--home", str(Path(state.dir).parents[1])])
    assert done.exit_code == 0, done.output
    return done.output


def test_operators_nodes_are_left_alone_a_flicker_is_no_failure_and_a_mark_waits_for_the_job(
    local_cluster: Callable[..., ClusterState],
) -> None:
    state = local_cluster(health_check_interval=2)
    slurm = Slurm(Path(state.slurm_conf))
    # an operator takes workers-2 out, then works on it: its slurmd stops, its GPU check fails
    reason = "maintenance: reseat NIC, do not use"
    slurm.run("scontrol", "update", "nodename=workers-2", "state=down", f"reason={reason}")
    (hooks.faults_dir(state) / "workers-2.json").write_text(json.dumps({"gpu_count": 1}))
    wait_for("the agent to note it", lambda: _log(state, "leave", "workers-2"), timeout=30)
    nodeops.signal_node(state, "workers-2", signal.SIGKILL)
    # drain and resume on workers-1, as an operator checking a node does: idle* for ~1.5 s each time
    for _ in range(6):
        slurm.run("scontrol", "update", "nodename=workers-1", "state=drain", "reason=checking cables")
        time.sleep(1.5)
        slurm.run("scontrol", "update", "nodename=workers-1", "state=resume")
        wait_for("workers-1 back", lambda: _node(state, "workers-1").available, timeout=30)
    time.sleep(3)  # health checks and agent passes on the dead, operator-owned workers-2
    w2 = _node(state, "workers-2")
    assert w2.state == "DOWN" and w2.reason == reason  # not resumed, not re-drained by its health check
    agent_log = (Path(state.dir) / "agent.log").read_text()
    assert not _log(state, "replace") and not _log(state, "reboot"), agent_log
    assert len(_log(state, "leave", "workers-2")) == 1  # logged once, not every pass
    assert _node(state, "workers-1").available

    # Action:Replace on a node running a job: the job finishes first, then the node is replaced
    job = _sbatch(state, "-w", "workers-1", "--wrap", "sleep 6")
    wait_for("the job to run", lambda: _job(state, job).state == "RUNNING", timeout=30)
    said = _cli(state, "replace-node", state.name, "workers-1")
    assert f"once its running job(s) {job} end" in said
    waited = wait_for("the wait", lambda: _log(state, "wait", "workers-1"), timeout=30)
    assert "waits for its jobs to end" in waited[0]["reason"]  # type: ignore[index]
    assert _job(state, job).state == "RUNNING" and not _log(state, "replace")

    def replaced() -> list[dict[str, Any]]:
        return [r for r in _log(state, "replace", "workers-1") if r["phase"] == "done"]

    wait_for("the replacement", replaced, timeout=60)
    finished = _job(state, job)
    assert finished.state == "COMPLETED" and finished.restarts == 0  # never killed nor requeued
    decided = next(r for r in _log(state, "replace", "workers-1") if r["phase"] == "decided")
    assert decided["time"] >= waited[0]["time"]  # type: ignore[index]


def test_the_brake_holds_automatic_replacements_but_not_an_operators_replace_now(
    local_cluster: Callable[..., ClusterState],
) -> None:
    state = local_cluster(max_replacements=1, replacement_window_s=600)
    nodeops.signal_node(state, "workers-1", signal.SIGKILL)
    wait_for("the first replacement", lambda: [r for r in _log(state, "replace") if r["phase"] == "done"])
    nodeops.signal_node(state, "workers-2", signal.SIGKILL)
    held = wait_for("the brake", lambda: _log(state, "hold", "workers-2"), timeout=30)
    assert held[0]["reason"].startswith("rate limit: 1 replacement(s) already in the last 600 s")  # type: ignore[index]
    time.sleep(3)
    assert not _log(state, "replace", "workers-2") and len(_log(state, "hold", "workers-2")) == 1
    agent_out = (Path(state.dir) / "agent.log").read_text()
    assert "rate limit" in agent_out

    # the spare workers-3 took workers-1's place; an operator's --now replaces it at once
    job = _sbatch(state, "-w", "workers-3", "--wrap", "sleep 60")
    wait_for("the job to run", lambda: _job(state, job).state == "RUNNING", timeout=30)
    said = _cli(state, "replace-node", state.name, "workers-3", "--now")
    assert f"now; its running job(s) {job} are requeued" in said
    done = wait_for(
        "the operator's replacement",
        lambda: [r for r in _log(state, "replace", "workers-3") if r["phase"] == "done"],
        timeout=60,
    )
    assert done[0]["nodes"][0] == "workers-3"  # type: ignore[index]
    assert _job(state, job).restarts == 1  # requeued by --now, as it said
