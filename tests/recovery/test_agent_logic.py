"""The agent's own rules, without a cluster: which jobs it watches for hangs, and when it lifts a
requeued job's hold (a fake clock and a fake Slurm runner)."""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Sequence
from pathlib import Path

from hyperscope.cluster.slurm import Job, Slurm
from hyperscope.cluster.state import ClusterState
from hyperscope.recovery import heartbeat
from hyperscope.recovery.agent import Agent, heartbeat_dir
from hyperscope.recovery.decide import Policy
from hyperscope.recovery.observe import UNSEEN_RECHECK_S


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _state(tmp_path: Path) -> ClusterState:
    (tmp_path / "home" / "clusters" / "c").mkdir(parents=True)
    return ClusterState(
        name="c", provider="local", status="InService", dir=str(tmp_path / "home" / "clusters" / "c"),
        spec_path="", spec_digest="", slurm_conf="/nonexistent/slurm.conf",
        shared_dir=str(tmp_path / "shared"), controller="controller-1", partition="dev", ctld_port=1,
    )  # fmt: skip


def _job(state: str, restarts: int = 0, reason: str = "") -> Job:
    return Job(7, "train", state, reason, "0:0", "workers-[1-2]", 2, restarts, {})


def _beat(state: ClusterState, at: float) -> None:
    hb = heartbeat.Heartbeat(heartbeat_dir(state), "7", 0)
    hb.path.write_text(f"5 {int(at * 1e9)}\n")


def test_a_job_is_watched_from_its_first_beat_of_the_attempt(tmp_path: Path) -> None:
    state = _state(tmp_path)
    clock = Clock(1000.0)
    agent = Agent(tmp_path / "home", "c", clock=clock)
    _beat(state, 900.0)  # a beat of the attempt before
    assert agent.job_views(state, [_job("RUNNING", restarts=1)]) == []  # still starting
    clock.now = 1400.0
    assert agent.job_views(state, [_job("RUNNING", restarts=1)]) == []  # never beat: not watched
    _beat(state, 1001.0)
    clock.now += UNSEEN_RECHECK_S  # a job not beating yet is looked at again this often
    (view,) = agent.job_views(state, [_job("RUNNING", restarts=1)])
    assert view.silent_s is not None and round(view.silent_s) == 404
    assert (view.job, view.attempts) == ("7", 1)
    assert view.nodes == ("workers-[1-2]",)
    assert agent.job_views(state, [_job("PENDING", restarts=1)]) == []


def test_a_job_that_hung_before_the_agent_first_saw_it_is_watched_from_its_start(tmp_path: Path) -> None:
    """Slurm's StartTime of the attempt, not the agent's first look, starts the watch: a plain-sbatch
    job is first seen up to a calm pass late (a restarted agent, its downtime late), and one that
    beat and froze meanwhile would never be watched."""
    state = _state(tmp_path)
    start = dt.datetime(2026, 12, 1, 23, 50, 0)
    clock = Clock(start.timestamp() + 30.0)  # first seen 30 s after it started
    agent = Agent(tmp_path / "home", "c", policy=Policy(hang_timeout_s=10.0), clock=clock)
    _beat(state, start.timestamp() + 2.0)  # it beat 28 s ago, then froze
    job = Job(7, "train", "RUNNING", "", "0:0", "workers-1", 1, 0, {"StartTime": start.isoformat()})
    (view,) = agent.job_views(state, [job])
    assert view.silent_s == 28.0
    # without a StartTime (or a later one): watched from its first beat after the first look
    other = tmp_path / "other"
    other.mkdir()
    fresh = Agent(other / "home", "c", policy=Policy(hang_timeout_s=10.0), clock=clock)
    assert fresh.job_views(state, [_job("RUNNING")]) == []


def test_the_hold_is_lifted_only_in_a_later_second_than_the_requeue(tmp_path: Path) -> None:
    state = _state(tmp_path)
    calls: list[list[str]] = []

    def runner(argv: Sequence[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        return subprocess.CompletedProcess(list(argv), 0, "", "")

    slurm = Slurm(Path(state.slurm_conf), runner=runner)
    clock = Clock(2000.4)
    agent = Agent(tmp_path / "home", "c", clock=clock)
    held = [_job("PENDING", restarts=1, reason="BeginTime")]
    agent.release_requeued(slurm, held)
    clock.now = 2000.9
    agent.release_requeued(slurm, held)
    assert calls == []  # the requeue's second (2000) is not over for Slurm's credentials
    clock.now = 2001.1
    agent.release_requeued(slurm, held)
    agent.release_requeued(slurm, held)  # once per attempt
    assert calls == [["scontrol", "update", "jobid=7", "StartTime=now"]]
    agent.release_requeued(slurm, [_job("PENDING", restarts=0, reason="BeginTime")])  # never requeued
    agent.release_requeued(slurm, [_job("PENDING", restarts=2, reason="Resources")])
    assert len(calls) == 1
    log = (Path(state.dir) / "agent.log").read_text()
    assert '"kind": "release"' in log and "post-requeue hold lifted" in log


def test_a_beating_job_costs_no_file_read_until_its_hang_timeout_could_have_passed(tmp_path: Path) -> None:
    state = _state(tmp_path)
    clock = Clock(1000.0)
    agent = Agent(tmp_path / "home", "c", policy=Policy(hang_timeout_s=60.0), clock=clock)
    running = [_job("RUNNING")]
    _beat(state, 1000.0)
    (view,) = agent.job_views(state, running)
    assert view.silent_s == 0.0
    beats = list(heartbeat_dir(state).iterdir())
    for f in beats:  # unreadable from now on: a read would lose the beat and show it as unseen
        f.write_text("garbage")
    for now in (1010.0, 1030.0, 1060.0):
        clock.now = now
        (view,) = agent.job_views(state, running)
        assert view.silent_s == now - 1000.0  # from the beat remembered, no file read
    _beat(state, 1050.0)
    clock.now = 1061.0  # past the timeout since the remembered beat: read again, a newer one found
    (view,) = agent.job_views(state, running)
    assert view.silent_s == 11.0
    # a new attempt: the beats of the one before do not count
    assert agent.job_views(state, [_job("RUNNING", restarts=1)]) == []
    assert agent.job_views(state, []) == [] and agent.beat_at == {}  # gone jobs are forgotten
