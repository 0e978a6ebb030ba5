"""How long the agent takes to name a straggler, and the slow rank's speed before, during and after.

A local cluster (2 workers, the agent on, ``straggler_threshold_pct: 30``, ``straggler_steps:
--steps``) runs ``tests/data/ondemand/train_until.py`` under plain ``sbatch``: two ranks, one per
node, ``--step-time`` seconds a step, not in lockstep. After ``--warm`` seconds, ``--delay`` more
seconds a step are injected on ``workers-2`` for ``--slow`` seconds, then removed. Measured from
the heartbeats and agent.log, in the same run: the time from the injection to the agent's
``straggler`` line, from the removal to its ``recovered`` line, and each rank's steps per second
in the three phases. Issue 19 asks for the time to detect and the throughput before, during and
after; it sets no number.

``--replace``: ``straggler_action: replace`` with a spare, the ranks checkpointing every 10 steps;
the delay stays on ``workers-2``, the agent replaces it by the spare once the job has checkpointed,
and "after" is the requeued job on ``workers-1`` and the spare (times: named, replace decided, the
first beat of the new attempt on the spare).

Needs root with Debian's slurm-wlm and munge, and PyTorch; says so and exits 0 without.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _common import REPO_ROOT, print_table, write_results

from hyperscope.cluster import manage
from hyperscope.cluster.local import missing_requirements
from hyperscope.recovery import heartbeat
from hyperscope.recovery.agent import read_log

SCRIPT = REPO_ROOT / "tests" / "data" / "ondemand" / "train_until.py"


def _first(log_dir: Path, phase: str, after: float, timeout: float = 120.0, kind: str = "straggler") -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in read_log(log_dir):
            if r.get("kind") == kind and r.get("phase") == phase and r["time"] >= after:
                return float(r["time"])
        time.sleep(0.1)
    raise RuntimeError(f"no '{phase}' {kind} line within {timeout:.0f} s")


def _steps(beats_dir: Path, job: str) -> dict[int, tuple[int, int]]:
    return {b.rank: (b.step, b.ts_ns) for b in heartbeat.job_beats(beats_dir, job, 2)}


def _rate(a: dict[int, tuple[int, int]], b: dict[int, tuple[int, int]], rank: int) -> float:
    (s0, t0), (s1, t1) = a[rank], b[rank]
    return (s1 - s0) / ((t1 - t0) / 1e9) if t1 > t0 else 0.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--step-time", type=float, default=0.1)
    p.add_argument("--delay", type=float, default=0.2)
    p.add_argument("--steps", type=int, default=8, help="straggler_steps")
    p.add_argument("--warm", type=float, default=8.0)
    p.add_argument("--slow", type=float, default=15.0)
    p.add_argument("--replace", action="store_true", help="straggler_action: replace, with a spare")
    args = p.parse_args()
    why = missing_requirements()
    if why:
        print(f"skipped: real Slurm unavailable: {why}")
        return
    with tempfile.TemporaryDirectory(prefix="straggler-") as tmp:
        work, home = Path(tmp), Path(tmp) / "home"
        spec = work / "cluster.yaml"
        spec.write_text(yaml.safe_dump({
            "name": "strag", "provider": "local",
            "lifecycle_scripts": str(REPO_ROOT / "examples" / "lifecycle"),
            "shared_dir": str(work / "shared"),
            "instance_groups": [{"name": "controller", "role": "controller", "count": 1},
                                {"name": "workers", "role": "worker", "count": 2,
                                 "spares": 1 if args.replace else 0}],
            "recovery": {"straggler_threshold_pct": 30, "straggler_steps": args.steps,
                         "straggler_action": "replace" if args.replace else "notify"},
        }))  # fmt: skip
        state = manage.create(spec, home)
        try:
            stop, slow = work / "stop", work / "slow"
            batch = work / "job.sbatch"
            batch.write_text(
                "#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=1\n"
                f"srun {sys.executable} {SCRIPT} --stop {stop} --step-time {args.step_time} "
                f"--slow-file {slow} --max-s 600{' --checkpoint-every 10' if args.replace else ''}\n"
            )
            env = {k: v for k, v in os.environ.items() if not k.startswith(("HYPERSCOPE_", "SLURM_"))}
            env["SLURM_CONF"] = state.slurm_conf
            done = subprocess.run(["sbatch", "--parsable", "-o", str(work / "job.out"), str(batch)],
                                  env=env, capture_output=True, text=True, check=True)  # fmt: skip
            job = done.stdout.strip().split(";")[0]
            beats = Path(state.shared_dir) / "hyperscope" / "heartbeats"
            while len(heartbeat.job_beats(beats, job, 2)) < 2:
                time.sleep(0.2)
            nodes = {b.rank: b.node for b in heartbeat.job_beats(beats, job, 2)}
            slow_rank = next(r for r, n in nodes.items() if n == "workers-2")
            time.sleep(args.warm)
            before0 = _steps(beats, job)
            time.sleep(args.warm / 2)
            before1 = _steps(beats, job)
            injected = time.time()
            slow.write_text(f"workers-2 {args.delay}")
            named = _first(Path(state.dir), "decided", injected)
            during0 = _steps(beats, job)
            if args.replace:
                decided = _first(Path(state.dir), "decided", injected, timeout=180, kind="replace")
                during1 = _steps(beats, job)
                deadline = time.monotonic() + 180
                while {b.node for b in heartbeat.job_beats(beats, job, 2) if b.ts_ns / 1e9 > decided} != {
                    "workers-1",
                    "workers-3",
                }:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the requeued job never beat on workers-1 and workers-3")
                    time.sleep(0.1)
                resumed = min(b.ts_ns / 1e9 for b in heartbeat.job_beats(beats, job, 2))
                nodes_after = {b.rank: b.node for b in heartbeat.job_beats(beats, job, 2)}
                time.sleep(args.warm / 2)
                after0 = _steps(beats, job)
                time.sleep(args.warm / 2)
                after1 = _steps(beats, job)
                stop.touch()
                phases = ((before0, before1), (during0, during1), (after0, after1))
                rows = [
                    (
                        f"rank {r} ({nodes[r]} -> {nodes_after[r]})",
                        *[round(_rate(a, b, r), 2) for a, b in phases],
                    )
                    for r in sorted(nodes)
                ]
                print_table(("rank", "steps/s before", "during", "after (new attempt)"), rows)
                print(f"\nnamed {named - injected:.1f} s after the delay began; replace decided "
                      f"{decided - named:.1f} s after that (the next checkpoint); the new attempt's "
                      f"first beat {resumed - decided:.1f} s after the decision")  # fmt: skip
                write_results("straggler_replace", {"detect_s": named - injected, "named_to_replace_s":
                              decided - named, "replace_to_beat_s": resumed - decided, "rates": rows,
                              "args": vars(args)})  # fmt: skip
                return
            time.sleep(max(1.0, args.slow - (time.time() - injected)))
            during1 = _steps(beats, job)
            removed = time.time()
            slow.unlink()
            cleared = _first(Path(state.dir), "recovered", removed)
            time.sleep(args.warm / 2)
            after0 = _steps(beats, job)
            time.sleep(args.warm / 2)
            after1 = _steps(beats, job)
            stop.touch()
        finally:
            manage.delete(state.name, home)
    rows = []
    phases = ((before0, before1), (during0, during1), (after0, after1))
    for rank in sorted(nodes):
        rates = [round(_rate(a, b, rank), 2) for a, b in phases]
        rows.append((f"rank {rank} ({nodes[rank]})", *rates))
    print(f"steps of {args.step_time} s; +{args.delay} s injected on workers-2 (rank {slow_rank}); "
          f"threshold 30% for {args.steps} steps")  # fmt: skip
    print_table(("rank", "steps/s before", "during", "after"), rows)
    print(f"\nnamed {named - injected:.1f} s after the delay began; "
          f"cleared {cleared - removed:.1f} s after it ended")  # fmt: skip
    write_results("straggler_detect", {"detect_s": named - injected, "clear_s": cleared - removed,
                                       "rates": rows, "args": vars(args)})  # fmt: skip


if __name__ == "__main__":
    main()
