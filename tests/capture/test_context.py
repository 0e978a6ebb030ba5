"""Rank, world and run come from the launcher's environment, so every rank agrees without talking."""

from __future__ import annotations

import pytest

from hyperscope.capture.context import DistContext


def test_torchrun_environment() -> None:
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "TORCHELASTIC_RUN_ID": "abc"}
    ctx = DistContext.detect(env)
    assert (ctx.rank, ctx.local_rank, ctx.world_size) == (3, 1, 8)
    assert ctx.run_id == "torchelastic-abc"


def test_slurm_environment_names_the_node_and_the_run() -> None:
    env = {
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS": "6",
        "SLURM_JOB_ID": "77",
        "SLURM_STEP_ID": "2",
        "SLURMD_NODENAME": "gpu-node-3",
    }
    ctx = DistContext.detect(env)
    assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.node) == (5, 1, 6, "gpu-node-3")
    assert ctx.run_id == "slurm-77.2"


def test_hyperscope_run_id_wins_and_names_one_profile_for_all_ranks() -> None:
    a = DistContext.detect({"RANK": "0", "WORLD_SIZE": "2", "HYPERSCOPE_RUN_ID": "r1", "SLURM_JOB_ID": "9"})
    b = DistContext.detect({"RANK": "1", "WORLD_SIZE": "2", "HYPERSCOPE_RUN_ID": "r1"})
    assert a.run_id == b.run_id == "r1"
    assert a.profile_id("job") == b.profile_id("job") != a.profile_id("other-job")


def test_torchrun_default_rendezvous_id_is_not_trusted() -> None:
    """torchrun's default id is "none" for every run: ranks share their agent's pid instead."""
    ctx = DistContext.detect({"RANK": "0", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "none"})
    assert ctx.run_id != "torchelastic-none" and "-" in ctx.run_id


def test_single_process() -> None:
    ctx = DistContext.detect({})
    assert (ctx.rank, ctx.local_rank, ctx.world_size) == (0, 0, 1)
    assert ctx.node and ctx.run_id
    assert DistContext.detect({}).run_id == ctx.run_id  # stable within the process


def test_world_size_covers_the_rank() -> None:
    assert DistContext.detect({"RANK": "4"}).world_size == 5


def test_an_initialised_process_group_names_the_rank() -> None:
    """Ranks started by mp.spawn have no RANK variable; their process group knows better."""
    dist = pytest.importorskip("torch.distributed")
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this test process")
    guessed = DistContext(rank=2, local_rank=0, world_size=3, node="n", run_id="r")
    assert guessed.refined() == guessed  # no process group: nothing to correct
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        fixed = guessed.refined()
    finally:
        dist.destroy_process_group()
    assert (fixed.rank, fixed.world_size, fixed.run_id) == (0, 1, "r")
