"""A training script that knows nothing of hyperscope (the launcher must find its steps)."""

import argparse
import os
import signal
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--raise-at", type=int, default=None)
p.add_argument("--kill-at", type=int, default=None)
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--term-at", type=int, default=None, help="SIGTERM itself at this step (scancel)")
p.add_argument("--fill", default=None, help="at the end, fill the disk of this file...")
p.add_argument("--leave", type=int, default=0, help="...but for this many bytes")
args = p.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
extra = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)  # a second optimizer: not a step
for step in range(args.steps):
    if step == args.raise_at:
        raise RuntimeError(f"diverged at step {step}")
    if step == args.kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    if step == args.term_at:
        os.kill(os.getpid(), signal.SIGTERM)
    loss = model(torch.randn(4, 32)).pow(2).mean()
    loss.backward()
    opt.step()
    extra.step()
    opt.zero_grad()
    time.sleep(args.sleep)
print(f"trained {args.steps} steps")
if args.fill:  # the disk fills up as the training ends (another job's output, a checkpoint)
    with open(args.fill, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    size = os.path.getsize(args.fill)
    os.truncate(args.fill, max(0, size - args.leave))
