"""A small transformer trained on random tokens, annotated for hyperscope.

    python examples/train_transformer.py                      # profile 20 steps into ~/.hyperscope
    python examples/train_transformer.py --device cuda --cpu-ops
    hyperscope profile -- python examples/train_transformer.py --no-profile   # the launcher's way

The annotations show the three ways to mark code: a ``with`` block, a decorated function, and a
begin/end pair for code that is not one block.
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch
from torch import nn

import hyperscope as hs


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d_model: int, layers: int, heads: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))


@hs.annotate("data")
def batch(args: argparse.Namespace, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1))
    tokens = tokens.to(device, non_blocking=False)  # a host-to-device copy on a GPU
    return tokens[:, :-1], tokens[:, 1:]


def build_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--tiny", action="store_true", help="tiny tensors: per-operator cost dominates")
    p.add_argument("--job", default=None, help="hyperscope job name")
    p.add_argument("--home", default=None, help="hyperscope store directory")
    p.add_argument("--cpu-ops", action="store_true", help="also record every PyTorch operator")
    p.add_argument("--no-profile", action="store_true", help="do not start hyperscope here")
    p.add_argument("--fail-at", type=int, default=None, help="raise at this step (tests)")
    args = p.parse_args(argv)
    if args.tiny:
        args.d_model, args.layers, args.heads, args.batch, args.seq, args.vocab = 16, 2, 2, 2, 8, 50
    return args


def build(args: argparse.Namespace) -> tuple[nn.Module, torch.optim.Optimizer, nn.Module]:
    model = TinyLM(args.vocab, args.d_model, args.layers, args.heads).to(torch.device(args.device))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), nn.CrossEntropyLoss()


def train_step(
    args: argparse.Namespace,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: nn.Module,
    device: torch.device,
) -> torch.Tensor:
    """One step, annotated three ways (the benchmark times this same function)."""
    inputs, targets = batch(args, device)
    with hs.annotate("forward"):
        logits = model(inputs)
        loss: torch.Tensor = loss_fn(logits.reshape(-1, args.vocab), targets.reshape(-1))
    with hs.annotate("backward"):
        loss.backward()
    handle = hs.annotation_begin("optimizer")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    hs.annotation_end(handle)
    return loss


def main(argv: list[str] | None = None) -> float:
    args = build_args(argv)
    torch.manual_seed(0)
    device = torch.device(args.device)
    model, optimizer, loss_fn = build(args)

    if not args.no_profile:
        hs.start_profiling(hs.ProfilerConfig(job=args.job, home=args.home, cpu_ops=args.cpu_ops))
    start = time.perf_counter()
    ends = [start]  # each step's end, read where hs.step() marks it
    loss = torch.zeros(())
    for step in range(args.steps):
        if step == args.fail_at:
            raise RuntimeError(f"failing on purpose at step {step}")
        loss = train_step(args, model, optimizer, loss_fn, device)
        ends.append(time.perf_counter())
        hs.step()
    final = float(loss.item())  # a device-to-host copy and a sync on a GPU
    elapsed = time.perf_counter() - start
    hs.stop_profiling()
    print(f"{args.steps} steps in {elapsed:.2f} s, final loss {final:.3f}")
    print("step times (ms):", " ".join(f"{(b - a) * 1e3:.2f}" for a, b in itertools.pairwise(ends)))
    return final


if __name__ == "__main__":
    main()
