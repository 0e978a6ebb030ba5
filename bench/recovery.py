"""From the moment a node dies to training again: hyperscope's agent against plain Slurm ``--requeue``.

The same 2-rank DDP training (examples/resilient_ddp.py: gloo, a checkpoint every ``--every``
steps) runs on a local cluster; at step ``--kill-at`` the first node of the job is killed (its
slurmd, slurmstepds and tasks: notes/local-slurm.md's crash). Measured from the kill, in the same
run, for both modes:

* **detection**: agent mode — the agent's ``decided`` line in agent.log; plain — the first time
  ``scontrol show node`` says NOT_RESPONDING or DOWN (polled every 0.1 s);
* **running again**: the first time ``scontrol show job`` says RUNNING with Restarts ≥ 1;
* **first new step**: the timestamp rank 0 prints with its first step of the new attempt;
* **steps lost**: steps done before the kill that the new attempt had to do again.

Agent mode: 2 workers + 1 spare, the agent on, ``srun --auto-resume=1``. Plain mode: 3 workers (so a
third node can take the job), no agent, ``sbatch --requeue`` and ``srun`` without auto-resume —
Slurm's own detection (SlurmdTimeout/MessageTimeout) and post-requeue hold (cred_expire); both use
the fast-recovery Slurm settings measured in notes/local-slurm.md. Targets (issue 8): detection
≤ 5 s, training again ≤ 15 s, lost work ≤ one checkpoint interval, ≥ 2× faster than plain.

Needs root with Debian's slurm-wlm, munge, libslurm-dev and gcc, and PyTorch; says so and exits 0
without.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from _common import REPO_ROOT, print_table, write_results

from hyperscope.cluster import manage, nodeops
from hyperscope.cluster.local import missing_requirements
from hyperscope.cluster.slurm import Slurm, SlurmError
from hyperscope.cluster.state import ClusterState
from hyperscope.recovery.agent import read_log

EXAMPLE = REPO_ROOT / "examples" / "resilient_ddp.py"
SBATCH = REPO_ROOT / "examples" / "resilient_ddp.sbatch"


def _spec(work: Path, agent: bool) -> Path:
    workers = {"name": "workers", "role": "worker", "count": 2, "spares": 1}
    if not agent:
        workers = {"name": "workers", "role": "worker", "count": 3}
    doc = {
        "name": "agent" if agent else "plain",
        "provider": "local",
        "lifecycle_scripts": str(REPO_ROOT / "examples" / "lifecycle"),
        "shared_dir": str(work / "shared"),
        "instance_groups": [{"name": "controller", "role": "controller", "count": 1}, workers],
        "recovery": {"agent": agent},
    }
    path = work / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _steps(out: Path) -> list[tuple[int, int, float]]:
    """(attempt number, step, time) of rank 0's steps, in order."""
    attempt, rows = 0, []
    for line in out.read_text().splitlines() if out.exists() else []:
        if re.match(r"rank 0/\d+ ", line):
            attempt += 1
        elif m := re.match(r"rank 0 step (\d+) ([\d.]+)$", line):
            rows.append((attempt, int(m.group(1)), float(m.group(2))))
    return rows


def one_run(work: Path, agent: bool, args: argparse.Namespace) -> dict[str, Any]:
    home = work / "home"
    state: ClusterState = manage.create(_spec(work, agent), home)
    slurm = Slurm(Path(state.slurm_conf))
    out = work / "job.out"
    os.environ.update(PYTHON=sys.executable, EXAMPLE=str(EXAMPLE), AUTO_RESUME="1" if agent else "0")
    train = ["--steps", str(args.steps), "--every", str(args.every), "--step-time", str(args.step_time)]
    sbatch = ["-o", str(out), "--open-mode=append", *([] if agent else ["--requeue"])]
    try:
        job_id = manage.submit(
            state.name, home, [*sbatch, str(SBATCH), *train, "--out", str(work / "w.pt")]
        ).job_id
        deadline = time.monotonic() + 120
        while not any(s >= args.kill_at for _, s, _ in _steps(out)):
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"{state.name}: the job never reached step {args.kill_at}:\n{out.read_text()}"
                )
            time.sleep(0.05)
        job = {j.id: j for j in slurm.jobs()}[job_id]
        victim = job.nodes.replace("[", "").split("-")[0] + "-" + re.findall(r"\d+", job.nodes)[0]
        t0 = time.time()
        nodeops.signal_node(state, victim, signal.SIGKILL)
        detected = running = None
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            now = time.time()
            try:
                if detected is None and not agent:
                    node = {n.name: n for n in slurm.nodes()}[victim]
                    if node.state == "DOWN" or "NOT_RESPONDING" in node.flags:
                        detected = now - t0
                j = {j.id: j for j in slurm.jobs()}[job_id]
            except SlurmError:
                continue
            if running is None and j.state == "RUNNING" and j.restarts >= 1:
                running = now - t0
            if j.state in ("COMPLETED", "FAILED", "CANCELLED"):
                break
            time.sleep(0.1)
        if agent:
            decided = [
                r for r in read_log(Path(state.dir)) if r["kind"] == "replace" and r["phase"] == "decided"
            ]
            detected = decided[0]["time"] - t0 if decided else None
        steps = _steps(out)
        before = max((s for a, s, t in steps if a == 1 and t < t0), default=-1)
        later = [(s, t) for a, s, t in steps if a > 1]
        first_new = later[0][1] - t0 if later else None
        lost = before + 1 - later[0][0] if later else None
        return {
            "mode": "agent" if agent else "plain --requeue",
            "final_state": j.state,
            "detection_s": detected,
            "running_again_s": running,
            "first_new_step_s": first_new,
            "steps_lost": lost,
            "killed": victim,
            "killed_after_step": before,
        }
    finally:
        manage.delete(state.name, home)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1, help="runs of each mode (medians reported)")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--every", type=int, default=5, help="checkpoint interval, steps")
    p.add_argument("--step-time", type=float, default=0.2)
    p.add_argument("--kill-at", type=int, default=12, help="kill the node once rank 0 reached this step")
    p.add_argument("--timeout", type=float, default=180.0)
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
    for _ in range(args.runs):
        for agent in (True, False):
            with tempfile.TemporaryDirectory(prefix="hs-recovery-") as tmp:
                results.append(one_run(Path(tmp), agent, args))
    keys = ("detection_s", "running_again_s", "first_new_step_s", "steps_lost")
    rows: list[list[object]] = []
    medians: dict[str, dict[str, float | None]] = {}
    for mode in ("agent", "plain --requeue"):
        mine = [r for r in results if r["mode"] == mode]
        med: dict[str, float | None] = {
            k: statistics.median(v for r in mine if (v := r[k]) is not None)
            if any(r[k] is not None for r in mine)
            else None
            for k in keys
        }
        medians[mode] = med
        rows.append(
            [mode, *(None if (m := med[k]) is None else round(m, 2) for k in keys), mine[0]["final_state"]]
        )
    print_table(["mode", "detected s", "running again s", "first new step s", "steps lost", "job"], rows)
    a, b = medians["agent"], medians["plain --requeue"]
    if a["first_new_step_s"] and b["first_new_step_s"]:
        print(f"training again: {b['first_new_step_s'] / a['first_new_step_s']:.1f}x faster with the agent")
    checks = {
        "detection <= 5 s": a["detection_s"] is not None and a["detection_s"] <= 5,
        "training again <= 15 s": a["first_new_step_s"] is not None and a["first_new_step_s"] <= 15,
        f"lost <= one checkpoint interval ({args.every})": a["steps_lost"] is not None
        and a["steps_lost"] <= args.every,
        ">= 2x faster than plain requeue": bool(
            a["first_new_step_s"]
            and b["first_new_step_s"]
            and b["first_new_step_s"] >= 2 * a["first_new_step_s"]
        ),
    }
    for name, ok in checks.items():
        print(f"{'met' if ok else 'MISSED'}: {name}")
    write_results("recovery", {"args": vars(args), "runs": results, "medians": medians, "targets": checks})


if __name__ == "__main__":
    main()
