"""Issue 14, "plain Slurm works": examples/resilient_ddp.sbatch submitted with plain ``sbatch``
(no ``hyperscope submit``, no PYTHON/EXAMPLE variables) on a real local cluster checkpoints,
gets hang detection through the cluster's TaskProlog, keeps every attempt's output; a usage
error is not requeued; ``srun --auto-resume`` outside a batch job says it cannot requeue."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hyperscope.cluster import hooks
from hyperscope.cluster.slurm import Job, Slurm
from hyperscope.cluster.state import ClusterState, processes_with_env
from hyperscope.recovery.agent import read_log
from tests.recovery.conftest import ROOT, SBATCH, TRAIN, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.capture]

torch = pytest.importorskip("torch", reason="the recovery tests train with PyTorch (./dev test installs it)")


def _plain_env(state: ClusterState) -> dict[str, str]:
    """A user's shell: SLURM_CONF and this Python first on PATH; nothing of hyperscope's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYPERSCOPE_", "SLURM_"))}
    env.pop("PYTHON", None)
    env.pop("EXAMPLE", None)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    env["SLURM_CONF"] = state.slurm_conf
    return env


def _sbatch(state: ClusterState, *args: str) -> int:
    done = subprocess.run(
        ["sbatch", "--parsable", *args], cwd=ROOT, env=_plain_env(state), capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    return int(done.stdout.strip().split(";")[0])


def _job(state: ClusterState, job_id: int) -> Job:
    return {j.id: j for j in Slurm(Path(state.slurm_conf)).jobs()}[job_id]


def _finished(state: ClusterState, job_id: int) -> Job | None:
    job = _job(state, job_id)
    return job if job.state in ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT") else None


def _last_step(out: Path) -> int:
    steps = re.findall(r"^rank 0 step (\d+) ", out.read_text() if out.exists() else "", re.M)
    return int(steps[-1]) if steps else -1


def test_the_example_runs_under_plain_sbatch_with_hang_detection_and_every_attempts_output(
    local_cluster: Callable[..., ClusterState], reference_weights: Path, tmp_path: Path
) -> None:
    state = local_cluster(hang_timeout_s=4)
    out, final = tmp_path / "job.out", tmp_path / "final.pt"
    job_id = _sbatch(state, "-o", str(out), str(SBATCH.relative_to(ROOT)), *TRAIN, "--out", str(final))
    wait_for("step 10", lambda: _last_step(out) >= 10)
    ckpts = Path(state.shared_dir) / "checkpoints" / f"{state.name}-{int(state.created)}-job{job_id}"
    assert ckpts.is_dir() and any(ckpts.iterdir())  # the TaskProlog's default, on the shared dir
    beats = Path(state.shared_dir) / "hyperscope" / "heartbeats"
    assert {p.name for p in beats.iterdir()} >= {f"{job_id}.0", f"{job_id}.1"}
    tasks = [
        pid for pid in processes_with_env([f"SLURM_JOB_ID={job_id}"], require="SLURM_PROCID")
        if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(sys.executable.encode())
    ]  # fmt: skip
    assert len(tasks) == 2
    for pid in tasks:
        os.kill(pid, signal.SIGSTOP)  # a hang: only the heartbeats can tell

    job = wait_for("the job to end", lambda: _finished(state, job_id))
    assert isinstance(job, Job) and job.state == "COMPLETED", out.read_text()[-2000:]
    requeued = [r for r in read_log(Path(state.dir)) if r["kind"] == "requeue"]
    assert requeued and requeued[0]["job"] == str(job_id) and "no progress for" in requeued[0]["reason"]
    text = out.read_text()
    starts = re.findall(r"^rank 0/2 .* attempt=(\d+) start=(\d+)", text, re.M)
    assert starts[0] == ("1", "0") and len(starts) >= 2  # --open-mode=append: both attempts kept
    assert int(starts[-1][1]) > 0  # resumed from its checkpoint
    x, y = torch.load(final), torch.load(reference_weights)
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def test_a_usage_error_is_not_requeued_and_srun_outside_a_batch_job_says_it_cannot_requeue(
    local_cluster: Callable[..., ClusterState], tmp_path: Path
) -> None:
    state = local_cluster()
    out = tmp_path / "usage.out"
    job_id = _sbatch(
        state, "-o", str(out), str(SBATCH.relative_to(ROOT)), "--out", "x.pt", "--no-such-option"
    )
    job = wait_for("the job to end", lambda: _finished(state, job_id))
    assert isinstance(job, Job) and job.state == "FAILED" and job.restarts == 0, out.read_text()
    assert "unrecognized arguments: --no-such-option" in out.read_text()
    log = hooks.auto_resume_log(state).read_text()
    assert re.search(rf"job={job_id} step=0 task=\d status=2 attempt=1 of=2 action=usage-error", log), log

    done = subprocess.run(
        ["srun", "--auto-resume=1", "-N1", "bash", "-c", "exit 3"], env=_plain_env(state),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "not inside a batch job (sbatch), and only a batch job can be requeued" in done.stderr
    line = wait_for(
        "the plugin's decision",
        lambda: [ln for ln in hooks.auto_resume_log(state).read_text().splitlines() if "status=3" in ln],
        timeout=30,
    )
    assert isinstance(line, list) and line[0].endswith("action=cannot-requeue")
