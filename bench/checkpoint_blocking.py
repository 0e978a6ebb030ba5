"""Checkpoint blocking time: hyperscope's asynchronous save against a plain ``torch.save``.

The state is that of ``examples/train_transformer.py`` (model and AdamW state after one step), in
one process. Measured per save, interleaved over rounds, medians reported:

- ``torch.save``: the training thread writes the file (into the page cache, then returns);
- ``torch.save + fsync``: the same made durable, as an atomic checkpoint must be;
- hyperscope synchronous: temporary directory, checksum while writing, fsync, manifest, marker,
  rename (what ``Checkpointer(asynchronous=False).save`` blocks for);
- hyperscope asynchronous: the time ``save()`` blocks the training thread (the copy to host
  memory); the write itself happens on a background thread and is waited for outside the timing.

Target (resilience issue): asynchronous blocking <= 1/5 of a plain ``torch.save``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO_ROOT, print_table, write_results

sys.path.insert(0, str(REPO_ROOT / "examples"))


def build_state(model_args: list[str]) -> dict[str, Any]:
    import torch
    import train_transformer as ex

    args = ex.build_args([*model_args, "--no-profile", "--device", "cpu"])
    torch.manual_seed(0)
    model, optimizer, loss_fn = ex.build(args)
    ex.train_step(args, model, optimizer, loss_fn, torch.device("cpu"))  # AdamW state exists now
    return {"model": model.state_dict(), "optim": optimizer.state_dict()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--model",
        default="--d-model 512 --layers 8 --heads 8 --vocab 32000",
        help="train_transformer.py options for the model whose state is saved",
    )
    args = parser.parse_args()
    import torch

    from hyperscope.checkpoint import Checkpointer

    state = build_state(args.model.split())
    n_bytes = sum(t.numel() * t.element_size() for t in _tensors(state))
    times: dict[str, list[float]] = {k: [] for k in ("torch.save", "torch.save+fsync", "sync", "async")}
    with tempfile.TemporaryDirectory(prefix="hyperscope-bench-ckpt-", dir=os.environ.get("TMPDIR")) as tmp:
        sync_ckpt = Checkpointer(Path(tmp) / "sync", keep=1)
        async_ckpt = Checkpointer(Path(tmp) / "async", keep=1, asynchronous=True)
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            torch.save(state, Path(tmp) / "plain.pt")
            times["torch.save"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            with open(Path(tmp) / "plain-fsync.pt", "wb") as fh:
                torch.save(state, fh)
                fh.flush()
                os.fsync(fh.fileno())
            times["torch.save+fsync"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            sync_ckpt.save(state, r)
            times["sync"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            async_ckpt.save(state, r)
            times["async"].append(time.perf_counter() - t0)
            async_ckpt.wait()  # not timed: the training thread would be training meanwhile
        async_ckpt.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["torch.save"]
    print(f"\nstate: {n_bytes / 1e6:,.0f} MB ({args.model}); medians over {args.rounds} rounds")
    print_table(
        ["save", "blocks training (ms)", "vs torch.save"],
        [
            ["torch.save", med["torch.save"] * 1e3, "1.00x"],
            ["torch.save + fsync", med["torch.save+fsync"] * 1e3, f"{med['torch.save+fsync'] / base:.2f}x"],
            ["hyperscope sync (atomic, checksummed)", med["sync"] * 1e3, f"{med['sync'] / base:.2f}x"],
            ["hyperscope async", med["async"] * 1e3, f"1/{base / med['async']:.1f}"],
        ],
    )
    met = med["async"] * 5 <= base
    print_table(
        ["target", "measured", "status"],
        [["async blocking <= 1/5 of torch.save", f"1/{base / med['async']:.1f}", "MET" if met else "MISSED"]],
    )
    write_results(
        "checkpoint_blocking",
        {"state_bytes": n_bytes, "rounds": args.rounds, "model": args.model, "median_s": med, "met": met},
    )
    return 0


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    return []


if __name__ == "__main__":
    sys.exit(main())
