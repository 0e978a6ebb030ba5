"""``straggler_action: replace`` on a real local Slurm cluster (2 workers and a spare): a plain
sbatch job of two ranks that train apart and checkpoint every few steps; the rank on workers-2
slowed by an injected delay. The agent names it, waits for the job's next checkpoint, replaces
workers-2 by the spare (logged with its reason), and the requeued job resumes from its checkpoint
on workers-1 and the spare, where its steps are as fast as the other rank's again."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hyperscope.cluster.slurm import Slurm
from hyperscope.cluster.state import ClusterState
from hyperscope.recovery import heartbeat
from hyperscope.recovery.agent import read_log
from tests.recovery.conftest import wait_for
from tests.recovery.test_stragglers_slurm import _finished, submit_two_rank_job

pytestmark = [pytest.mark.slurm]
pytest.importorskip("torch", reason="the job trains with PyTorch (./dev test installs it)")


def _records(state: ClusterState, kind: str, phase: str) -> list[dict[str, Any]]:
    return [r for r in read_log(Path(state.dir)) if r.get("kind") == kind and r.get("phase") == phase]


def test_a_slow_node_is_replaced_after_the_next_checkpoint_and_the_job_resumes_at_speed(
    local_cluster: Callable[..., ClusterState], tmp_path: Path
) -> None:
    state = local_cluster(spares=1, straggler_threshold_pct=30, straggler_steps=8, straggler_action="replace")
    submitted = submit_two_rank_job(state, tmp_path, "--checkpoint-every 10")
    job, stop, slow, out = submitted.id, submitted.stop, submitted.slow, submitted.out
    beats_dir = Path(state.shared_dir) / "hyperscope" / "heartbeats"
    slurm = Slurm(Path(state.slurm_conf))
    try:
        beats = wait_for(
            "both ranks' step times",
            lambda: len(b := [x for x in heartbeat.job_beats(beats_dir, job, 2) if x.step_ns]) == 2 and b,
        )
        assert isinstance(beats, list)
        assert sorted(b.node for b in beats) == ["workers-1", "workers-2"]
        slow.write_text("workers-2 0.2")  # 0.3 s a step there against 0.1 s

        replaced = wait_for("the replacement", lambda: _records(state, "replace", "decided"), timeout=120)
        assert isinstance(replaced, list) and len(replaced) == 1
        (r,) = replaced
        assert r["nodes"] == ["workers-2", "workers-3"]  # the slow node, and the spare in its place
        assert r["reason"].startswith("straggler: rank ") and "on workers-2 of job " + job in r["reason"]
        assert "checkpointed since (rank" in r["reason"] and "resumes from it" in r["reason"]
        waited = _records(state, "wait", "decided")  # it waited for a checkpoint first (or one came)
        named = _records(state, "straggler", "decided")
        assert named and named[0]["time"] <= r["time"]
        assert all("next checkpoint" in w["reason"] for w in waited)
        ck = re.search(r"checkpointed since \((rank\d+/step-(\d+))", r["reason"])
        assert ck is not None

        # requeued by the replacement, the job runs again on workers-1 and the spare
        wait_for("the replacement done", lambda: _records(state, "replace", "done"), timeout=180)
        again = wait_for(
            "the second attempt running",
            lambda: (
                (j := {j.id: j for j in slurm.jobs()}[int(job)]).state == "RUNNING" and j.restarts >= 1 and j
            ),
            timeout=120,
        )
        assert getattr(again, "nodes", "") == "workers-[1,3]"
        resumed = wait_for(
            "both ranks resumed from their checkpoints",
            lambda: len(m := re.findall(r"resumed from step (\d+)", out.read_text())) >= 2 and m,
            timeout=120,
        )
        assert isinstance(resumed, list) and all(int(s) >= 10 for s in resumed)
        fast = wait_for(
            "step times of the new attempt alike",
            lambda: (
                len(b := [x for x in heartbeat.job_beats(beats_dir, job, 2) if x.step_ns]) == 2
                and {x.node for x in b} == {"workers-1", "workers-3"}
                and max(x.step_ns for x in b) < 1.3 * min(x.step_ns for x in b)
                and b
            ),
            timeout=120,
        )
        assert isinstance(fast, list)
        cleared = wait_for(
            "the straggler cleared", lambda: _records(state, "straggler", "recovered"), timeout=120
        )
        assert cleared
        assert len(_records(state, "replace", "decided")) == 1  # replaced once, not again
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\nagent.log:\n"
            + "\n".join(map(str, read_log(Path(state.dir))))
            + "\njob output:\n"
            + (out.read_text()[-3000:] if out.exists() else "")
        ) from None
    finally:
        stop.touch()
    ended = wait_for("the job to end", lambda: _finished(state, int(job)), timeout=120)
    assert ended == "COMPLETED", out.read_text()[-2000:]
