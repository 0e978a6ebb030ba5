"""A training job that runs until told to stop: what the on-demand capture and straggler tests
attach to while it trains. Each rank calls ``hyperscope.step()`` once per step and nothing else of
hyperscope's.

    python train_until.py --stop FILE [--ddp] [--step-time S] [--slow-file FILE] [--checkpoint-every N]

``--ddp``: the ranks train one model with DistributedDataParallel on gloo (lockstep, as real
data-parallel training); without it each rank trains on its own. ``--slow-file``: while FILE holds
``NODE SECONDS``, the rank on node NODE ($SLURMD_NODENAME) sleeps that much more per step (an
injected straggler). ``--checkpoint-every N`` (ranks training on their own): each rank saves its
model and step count every N steps with hyperscope's Checkpointer, in a folder of its own under
$HYPERSCOPE_CHECKPOINT_DIR, and starts from its newest one (a requeued job resumes).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
from torch import nn

import hyperscope as hs


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--stop", required=True)
    p.add_argument("--ddp", action="store_true")
    p.add_argument("--step-time", type=float, default=0.01)
    p.add_argument("--slow-file", default=None)
    p.add_argument("--max-s", type=float, default=300.0, help="stop anyway after this long")
    p.add_argument("--checkpoint-every", type=int, default=0)
    args = p.parse_args()
    model: nn.Module = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))
    if args.ddp:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    rank = int(os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or 0)
    node = os.environ.get("SLURMD_NODENAME", "")
    stop, slow = Path(args.stop), Path(args.slow_file) if args.slow_file else None
    steps, t0 = 0, time.monotonic()
    ckpt = None
    if args.checkpoint_every:
        from hyperscope.checkpoint import Checkpointer

        ckpt = Checkpointer(Path(os.environ["HYPERSCOPE_CHECKPOINT_DIR"]) / f"rank{rank}", keep=2)
        loaded = ckpt.load_latest()
        if loaded is not None:
            model.load_state_dict(loaded.state["model"])
            steps = int(loaded.state["steps"])
            print(f"rank {rank} on {node or 'local'}: resumed from step {steps}", flush=True)
    while not _told_to_stop(stop, args.ddp) and time.monotonic() - t0 < args.max_s:
        loss = model(torch.randn(16, 64)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        extra = 0.0
        if slow is not None and slow.exists():
            target, _, seconds = slow.read_text().partition(" ")
            extra = float(seconds) if target.strip() == node else 0.0
        time.sleep(args.step_time + extra)
        hs.step()
        steps += 1
        if ckpt is not None and steps % args.checkpoint_every == 0:
            ckpt.save({"model": model.state_dict(), "steps": steps}, steps)
    print(f"rank {rank} on {node or 'local'}: {steps} steps", flush=True)
    if args.ddp:
        torch.distributed.destroy_process_group()


def _told_to_stop(stop: Path, ddp: bool) -> bool:
    """Every rank stops on the same step (a lockstep rank left alone would wait forever)."""
    flag = torch.tensor([1.0 if stop.exists() else 0.0])
    if ddp:
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
    return bool(flag.item())


if __name__ == "__main__":
    main()
