"""From a crashed rank to training again: restart in place against today's requeue.

The same 2-rank DDP training (examples/resilient_ddp.py: gloo, a checkpoint every ``--every``
steps) runs on a local cluster (2 workers, the agent on); rank 0 crashes once at ``--fail-at``
(exit 3, ``--fail-once``). Two modes, in the same run, one after the other on the same cluster:

* **requeue** (today's): ``srun --auto-resume=1`` — the failed task ends the job, which Slurm
  requeues; the agent lifts the post-requeue hold; the batch script starts again.
* **in place**: ``IN_PLACE=1`` — ``hyperscope restart-in-place -- srun --kill-on-bad-exit=1 ...``
  starts the step again inside the same allocation.

Measured from the crash (the time rank 0 printed with the step it crashed on, just before its
exit) to the first step rank 0 prints after starting again (both reload the same checkpoint):
**fault to first new step**. Target (issue 19): in place ≥ 2× faster than the requeue.

Needs root with Debian's slurm-wlm, munge, libslurm-dev and gcc, and PyTorch; says so and exits 0
without.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from _common import REPO_ROOT, print_table, write_results

from hyperscope.cluster import manage
from hyperscope.cluster.local import missing_requirements
from hyperscope.cluster.slurm import Slurm, SlurmError
from hyperscope.cluster.state import ClusterState

EXAMPLE = REPO_ROOT / "examples" / "resilient_ddp.py"
SBATCH = REPO_ROOT / "examples" / "resilient_ddp.sbatch"
MODES = ("requeue", "in place")


def _spec(work: Path) -> Path:
    doc = {
        "name": "inplace",
        "provider": "local",
        "lifecycle_scripts": str(REPO_ROOT / "examples" / "lifecycle"),
        "shared_dir": str(work / "shared"),
        "instance_groups": [
            {"name": "controller", "role": "controller", "count": 1},
            {"name": "workers", "role": "worker", "count": 2, "spares": 0},
        ],
        "recovery": {"agent": True},
    }
    path = work / "inplace.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def fault_to_first_new_step(text: str, fail_at: int) -> tuple[float, int] | None:
    """(seconds from the crash to rank 0's first step after starting again, that step)."""
    runs, crash = 0, None
    for line in text.splitlines():
        if re.match(r"rank 0/\d+ ", line):
            runs += 1
        elif m := re.match(r"rank 0 step (\d+) ([\d.]+)$", line):
            step, at = int(m.group(1)), float(m.group(2))
            if runs == 1 and step == fail_at and crash is None:
                crash = at
            elif runs >= 2 and crash is not None:
                return at - crash, step
    return None


def one_run(
    state: ClusterState, home: Path, work: Path, mode: str, args: argparse.Namespace
) -> dict[str, Any]:
    out = work / f"{mode.replace(' ', '-')}.out"
    os.environ.update(PYTHON=sys.executable, EXAMPLE=str(EXAMPLE), AUTO_RESUME="1",
                      IN_PLACE="1" if mode == "in place" else "0")  # fmt: skip
    train = ["--steps", str(args.steps), "--every", str(args.every), "--step-time", str(args.step_time),
             "--fail-at", str(args.fail_at), "--fail-once"]  # fmt: skip
    job_id = manage.submit(
        state.name,
        home,
        ["-o", str(out), "--open-mode=append", str(SBATCH), *train, "--out", str(work / "w.pt")],
    ).job_id
    slurm = Slurm(Path(state.slurm_conf))
    deadline = time.monotonic() + args.timeout
    job = None
    while time.monotonic() < deadline:
        try:
            job = {j.id: j for j in slurm.jobs()}.get(job_id)
        except SlurmError:
            continue
        if job is not None and job.state in ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT"):
            break
        time.sleep(0.2)
    text = out.read_text() if out.exists() else ""
    got = fault_to_first_new_step(text, args.fail_at)
    return {
        "mode": mode,
        "final_state": job.state if job else "unknown",
        "slurm_restarts": job.restarts if job else None,
        "fault_to_first_new_step_s": got[0] if got else None,
        "resumed_at_step": got[1] if got else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1, help="runs of each mode (medians reported)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--every", type=int, default=4, help="checkpoint interval, steps")
    p.add_argument("--step-time", type=float, default=0.1)
    p.add_argument("--fail-at", type=int, default=10, help="rank 0 crashes once at this step")
    p.add_argument("--timeout", type=float, default=240.0)
    args = p.parse_args()
    why = missing_requirements()
    if why:
        print(f"skipped: {why}")
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skipped: PyTorch is not installed")
        return
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hs-inplace-") as tmp:
        work = Path(tmp)
        home = work / "home"
        state: ClusterState = manage.create(_spec(work), home)
        try:
            for n in range(args.runs):
                for mode in MODES if n % 2 == 0 else MODES[::-1]:  # alternate which goes first
                    run_dir = work / f"run{n}-{mode.replace(' ', '-')}"
                    run_dir.mkdir()
                    results.append(one_run(state, home, run_dir, mode, args))
        finally:
            manage.delete(state.name, home)
    rows: list[list[object]] = []
    medians: dict[str, float | None] = {}
    for mode in MODES:
        mine = [r for r in results if r["mode"] == mode]
        values = [v for r in mine if (v := r["fault_to_first_new_step_s"]) is not None]
        medians[mode] = statistics.median(values) if values else None
        med = medians[mode]
        restarts = ",".join(str(r["slurm_restarts"]) for r in mine)
        rows.append(
            [mode, None if med is None else round(med, 2), restarts, ",".join(r["final_state"] for r in mine)]
        )
    print_table(["mode", "fault to first new step s (median)", "Slurm restarts", "job"], rows)
    a, b = medians["in place"], medians["requeue"]
    met = bool(a and b and b >= 2 * a)
    if a and b:
        print(f"training again: {b / a:.1f}x faster in place than with a requeue")
    print(f"{'met' if met else 'MISSED'}: in place >= 2x faster than a requeue")
    write_results(
        "restart_in_place", {"args": vars(args), "runs": results, "medians": medians, "target_met": met}
    )


if __name__ == "__main__":
    main()
