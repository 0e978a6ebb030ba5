"""A 2-rank DDP training (gloo, CPU) that survives node failures: deterministic, checkpointed with
``hyperscope.checkpoint`` every few steps, resumed from the last valid checkpoint.

    sbatch examples/resilient_ddp.sbatch --steps 40 --every 5 --out /shared/final.pt

(plain sbatch, from the repository's root, or ``hyperscope submit CLUSTER -- ...``.)

Under ``srun`` every task is one rank (SLURM_PROCID, SLURM_NTASKS; MASTER_ADDR/MASTER_PORT come
from the batch script); run directly it is one rank. The data of step ``s`` on rank ``r`` is drawn
from a generator seeded with ``(s, r)`` and the model from seed 0, so a run interrupted and resumed
ends with exactly the weights of a run that never failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import hyperscope as hs
from hyperscope.checkpoint import Checkpointer
from hyperscope.errors import UsageError


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--every", type=int, default=5, help="checkpoint every N steps")
    p.add_argument("--step-time", type=float, default=0.0, help="extra seconds per step (a bigger model)")
    p.add_argument("--checkpoints", default=None, help="default: $HYPERSCOPE_CHECKPOINT_DIR")
    p.add_argument("--out", required=True, help="rank 0 writes the final weights here")
    p.add_argument("--fail-at", type=int, default=-1, help="rank 0 exits 3 at this step (every attempt)")
    p.add_argument("--fail-once", action="store_true", help="... only once (a marker beside the checkpoints)")
    args = p.parse_args()

    rank = int(os.environ.get("SLURM_PROCID", os.environ.get("RANK", "0")))
    world = int(os.environ.get("SLURM_NTASKS", os.environ.get("WORLD_SIZE", "1")))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    net = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 8))
    model = DistributedDataParallel(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    try:
        ckpt = Checkpointer(args.checkpoints, keep=3)
    except UsageError as exc:  # exit 2, a usage error: --auto-resume does not requeue it
        p.error(str(exc))
    start = 0
    state = {"model": net.state_dict()}
    latest = ckpt.load_latest(state)  # several ranks: filled in place; one rank: returned
    if latest is not None:
        net.load_state_dict(latest.state["model"])
        start = latest.step + 1
    attempt = os.environ.get("HYPERSCOPE_ATTEMPT", "1")
    restart = os.environ.get("HYPERSCOPE_RESTART", "0")  # restarts in place (hyperscope restart-in-place)
    print(f"rank {rank}/{world} node={os.environ.get('SLURMD_NODENAME', '-')} attempt={attempt} "
          f"start={start} restart={restart}", flush=True)  # fmt: skip
    for step in range(start, args.steps):
        g = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(16, 64, generator=g)
        y = torch.randn(16, 8, generator=g)
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        hs.step()  # a heartbeat for the agent's hang detection
        print(f"rank {rank} step {step} {time.time():.3f}", flush=True)
        marker = ckpt.directory / f".failed-at-{step}"
        if step == args.fail_at and rank == 0 and not (args.fail_once and marker.exists()):
            if args.fail_once:
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.touch()
            # a crash, as abrupt as a real one: no clean-up, so gloo's threads cannot abort the
            # exit (SystemExit ran its destructors, and one run died of SIGABRT instead of 3)
            sys.stdout.flush()
            os._exit(3)
        if (step + 1) % args.every == 0:
            ckpt.save({"model": net.state_dict()}, step)
        time.sleep(args.step_time)
    ckpt.close()
    if rank == 0:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        torch.save(net.state_dict(), args.out)
        print(f"done: {args.steps} steps, weights in {args.out}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
