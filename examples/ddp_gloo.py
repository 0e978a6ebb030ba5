"""Two ranks training one model with DistributedDataParallel on gloo (CPU), profiled by hyperscope.

    python examples/ddp_gloo.py                         # starts its own 2 ranks
    torchrun --nproc-per-node 2 examples/ddp_gloo.py    # or let torchrun start them
    hyperscope profile -- torchrun --nproc-per-node 2 examples/ddp_gloo.py --no-profile

Every rank writes its own files; the job in ``hyperscope jobs`` collects both. The gradient
all-reduce of each step shows as ``gloo:all_reduce`` operators with the collective's size.
"""

from __future__ import annotations

import argparse
import os
import socket
import uuid

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import hyperscope as hs


def train(args: argparse.Namespace) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 128)), bucket_cap_mb=1
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if not args.no_profile:
        # Operators are recorded so that the all-reduce calls show (on a CPU-only machine there is
        # no device activity to record).
        hs.start_profiling(hs.ProfilerConfig(job=args.job, home=args.home, cpu_ops=True))
    for _ in range(args.steps):
        x = torch.randn(32, 128)
        with hs.annotate("forward"):
            loss = model(x).pow(2).mean()
        with hs.annotate("backward+allreduce"):
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        hs.step()
    hs.stop_profiling()
    dist.barrier()
    if rank == 0:
        print(f"rank 0 of {dist.get_world_size()}: {args.steps} steps, loss {loss.item():.4f}")
    dist.destroy_process_group()


def _spawned(local_rank: int, args: argparse.Namespace, world: int) -> None:
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world))
    train(args)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--ranks", type=int, default=2, help="ranks to start when not under torchrun")
    p.add_argument("--job", default=None)
    p.add_argument("--home", default=None)
    p.add_argument("--no-profile", action="store_true")
    args = p.parse_args()
    if "RANK" in os.environ:  # torchrun (or srun with the variables set) started us
        train(args)
        return
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # One id for the whole run, so both ranks write into one profile.
    os.environ.setdefault("HYPERSCOPE_RUN_ID", uuid.uuid4().hex)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    mp.spawn(_spawned, args=(args, args.ranks), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
