"""Restart in place on a real local cluster: the 2-rank DDP example (examples/resilient_ddp.sbatch
with ``IN_PLACE=1``: ``hyperscope restart-in-place -- srun --kill-on-bad-exit=1 python -m
hyperscope.recovery.warm -- resilient_ddp.py ...``), rank 0 crashing once at step 10. Both ranks
start again inside the same allocation (forked warm by their launchers), reload the last
checkpoint, the job completes with Slurm's restart count still 0 (no requeue) and the same final
weights as a run that never failed. bench/restart_in_place.py times it against a requeue."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from hyperscope.cluster import manage
from hyperscope.cluster.slurm import Job, Slurm
from hyperscope.cluster.state import ClusterState
from tests.recovery.conftest import SBATCH, TRAIN, train_env, wait_for

pytestmark = [pytest.mark.slurm]
torch = pytest.importorskip("torch", reason="the recovery tests train with PyTorch (./dev test installs it)")


def _job(state: ClusterState, job_id: int) -> Job:
    return {j.id: j for j in Slurm(Path(state.slurm_conf)).jobs()}[job_id]


def test_a_crashed_rank_restarts_in_the_same_allocation_from_its_checkpoint(
    local_cluster: Callable[..., ClusterState], reference_weights: Path, tmp_path: Path
) -> None:
    state = local_cluster(spares=0)
    home = Path(state.dir).parents[1]
    out, final = tmp_path / "job.out", tmp_path / "final.pt"
    old = dict(os.environ)
    os.environ.update({**train_env(), "IN_PLACE": "1"})
    try:
        args = [*TRAIN, "--fail-at", "10", "--fail-once", "--out", str(final)]
        job_id = manage.submit(
            state.name, home, ["-o", str(out), "--open-mode=append", str(SBATCH), *args]
        ).job_id
    finally:
        os.environ.clear()
        os.environ.update(old)
    job = wait_for(
        "the job to end",
        lambda: (j := _job(state, job_id)).state in ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL") and j,
        timeout=240,
    )
    text = out.read_text()
    assert isinstance(job, Job) and job.state == "COMPLETED", text[-3000:]
    assert job.restarts == 0, text[-3000:]  # not requeued
    # each task's launcher forks its rank again, warm: rank 0 after its crash, rank 1 after the
    # collective its dead peer left raised; the step itself never ended
    assert "hyperscope warm: rank 0 failed (3): warm restart 1 of 3" in text, text[-3000:]
    assert "hyperscope warm: rank 1 failed (1): warm restart 1 of 3" in text, text[-3000:]
    assert "restart-in-place: the step completed" in text
    starts = re.findall(r"^rank (\d)/2 node=(\S+) attempt=(\d+) start=(\d+) restart=(\d+)", text, re.M)
    assert sorted(starts) == [
        ("0", "workers-1", "1", "0", "0"), ("0", "workers-1", "1", "8", "1"),
        ("1", "workers-2", "1", "0", "0"), ("1", "workers-2", "1", "8", "1"),
    ]  # fmt: skip
    # started from the checkpoint of step 7 (every 4 steps), the last before the crash at step 10
    x, y = torch.load(final), torch.load(reference_weights)
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
