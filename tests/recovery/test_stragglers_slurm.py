"""Stragglers on a real local Slurm cluster: a job submitted with plain sbatch (two ranks, one per
node, calling only ``hyperscope.step()``), one node's rank slowed by an injected delay while it
trains; the agent finds it, names it in agent.log and list-nodes, captures it beside the other rank
(``straggler_action: profile``, through ``hyperscope capture``'s shared-directory channel), and
clears it once the delay is gone."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hyperscope import Store
from hyperscope.cli.main import app
from hyperscope.cluster import jobs, manage
from hyperscope.cluster.slurm import Slurm
from hyperscope.cluster.state import ClusterState
from hyperscope.recovery import heartbeat
from hyperscope.recovery.agent import read_log
from tests.recovery.conftest import ROOT, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.capture]
pytest.importorskip("torch", reason="the straggler test trains with PyTorch (./dev test installs it)")

SCRIPT = ROOT / "tests" / "data" / "ondemand" / "train_until.py"


@dataclass(frozen=True)
class TwoRankJob:
    """A plain sbatch job of two ranks (one per node) running ``SCRIPT`` until ``stop`` exists;
    a line ``NODE SECONDS`` written to ``slow`` slows the rank on that node."""

    id: str
    stop: Path
    slow: Path
    out: Path


def submit_two_rank_job(state: ClusterState, tmp_path: Path, extra: str = "") -> TwoRankJob:
    stop, slow, out = tmp_path / "stop", tmp_path / "slow", tmp_path / "job.out"
    batch = tmp_path / "job.sbatch"
    batch.write_text(
        "#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=1\n"
        f"srun {sys.executable} {SCRIPT} --stop {stop} --step-time 0.1 --slow-file {slow} --max-s 240"
        f"{' ' + extra if extra else ''}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYPERSCOPE_", "SLURM_"))}
    env["SLURM_CONF"] = state.slurm_conf
    submitted = subprocess.run(
        ["sbatch", "--parsable", "-o", str(out), str(batch)], env=env, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    return TwoRankJob(submitted.stdout.strip().split(";")[0], stop, slow, out)


def _records(state: ClusterState, kind: str, phase: str) -> list[dict[str, Any]]:
    return [r for r in read_log(Path(state.dir)) if r.get("kind") == kind and r.get("phase") == phase]


def test_a_slowed_node_is_found_named_profiled_and_cleared(
    local_cluster: Callable[..., ClusterState], tmp_path: Path
) -> None:
    state = local_cluster(
        spares=0, straggler_threshold_pct=30, straggler_steps=8, straggler_action="profile",
        straggler_profile_steps=3,
    )  # fmt: skip
    home = Path(state.dir).parents[1]
    submitted = submit_two_rank_job(state, tmp_path)
    job_id, stop, slow, out = submitted.id, submitted.stop, submitted.slow, submitted.out
    beats_dir = Path(state.shared_dir) / "hyperscope" / "heartbeats"
    try:
        beats = wait_for(
            "both ranks' step times",
            lambda: len(b := [x for x in heartbeat.job_beats(beats_dir, job_id, 2) if x.step_ns]) == 2 and b,
        )
        assert isinstance(beats, list)
        node_of = {b.rank: b.node for b in beats}
        assert sorted(node_of.values()) == ["workers-1", "workers-2"]
        assert _records(state, "straggler", "decided") == []  # same speed: nobody named
        slow.write_text("workers-2 0.2")  # the rank on workers-2: 0.2 s more per step, 3x slower

        named = wait_for("the straggler named", lambda: _records(state, "straggler", "decided"), timeout=90)
        assert isinstance(named, list) and len(named) == 1
        (r,) = named
        rank = next(k for k, v in node_of.items() if v == "workers-2")
        assert (r["job"], r["rank"], r["nodes"]) == (job_id, rank, ["workers-2"])
        assert f"rank {rank} on workers-2 of job {job_id} is a straggler" in r["reason"]
        assert "over the median of the other ranks" in r["reason"]
        rows = {n.node: n for n in manage.list_nodes(state.name, home)}
        assert "is a straggler" in rows["workers-2"].straggler and rows["workers-1"].straggler == ""
        listed = CliRunner().invoke(app, ["cluster", "list-nodes", state.name, "--home", str(home)])
        assert listed.exit_code == 0 and "straggler" in listed.output

        done = wait_for("the straggler's capture", lambda: _records(state, "profile", "done")
                        or _records(state, "profile", "failed"), timeout=90)  # fmt: skip
        assert isinstance(done, list) and done[0]["phase"] == "done", done
        with Store(jobs.store_home(state)) as store:
            con = store.profile(done[0]["catalog_job"], done[0]["profile"]).connect()
            try:
                steps = con.sql("SELECT rank, list(name ORDER BY ts_ns) FROM events WHERE kind = 'step' "
                                "GROUP BY rank ORDER BY rank").fetchall()  # fmt: skip
            finally:
                con.close()
        # the slow rank and the median one, side by side: the ranks do not step together (the fast
        # one is far ahead), so each records the same number of steps from its own step
        starts, n = done[0]["starts"], done[0]["steps"]
        assert n == 3 and sorted(starts) == ["0", "1"]
        assert steps == [
            (r, [f"ProfilerStep#{k}" for k in range(starts[str(r)], starts[str(r)] + n)]) for r in (0, 1)
        ]

        slow.unlink()
        wait_for("the straggler cleared", lambda: _records(state, "straggler", "recovered"), timeout=90)
        rows = {n.node: n for n in manage.list_nodes(state.name, home)}
        assert rows["workers-2"].straggler == ""
    except AssertionError as exc:  # what the agent decided, to tell a slow machine from a bug
        raise AssertionError(
            f"{exc}\nagent.log:\n" + "\n".join(map(str, read_log(Path(state.dir))))
        ) from None
    finally:
        stop.touch()
    job = wait_for("the job to end", lambda: _finished(state, int(job_id)), timeout=120)
    assert job == "COMPLETED", out.read_text()[-2000:]


def _finished(state: ClusterState, job_id: int) -> str:
    live = {j.id: j for j in Slurm(Path(state.slurm_conf)).jobs()}
    state_now = live[job_id].state if job_id in live else "COMPLETED"
    return state_now if state_now not in ("RUNNING", "PENDING", "COMPLETING") else ""
