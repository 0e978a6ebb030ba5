"""A small MLP in plain JAX, its update jitted, annotated for hyperscope.

    python examples/train_jax.py --cpu-ops                     # profiles itself into ~/.hyperscope
    hyperscope profile --cpu-ops -- python examples/train_jax.py --no-profile  # the launcher's way

Each step runs in a ``jax.profiler.StepTraceAnnotation``, JAX's own mark of a step: under the
launcher hyperscope takes its steps from it; profiling itself, the script calls ``hs.step()``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import jax
import jax.numpy as jnp

import hyperscope as hs

Params = list[tuple[jax.Array, jax.Array]]


def init(key: jax.Array, sizes: list[int]) -> Params:
    keys = jax.random.split(key, len(sizes) - 1)
    return [
        (jax.random.normal(k, (a, b)) / jnp.sqrt(a), jnp.zeros(b))
        for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=True)
    ]


def loss_fn(params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return jnp.mean((x @ w + b - y) ** 2)


@jax.jit
def update(params: Params, x: jax.Array, y: jax.Array) -> tuple[Params, jax.Array]:
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    new = jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, params, grads)
    return new, loss


@hs.annotate("data")
def batch(key: jax.Array, args: argparse.Namespace) -> tuple[jax.Array, jax.Array]:
    x = jax.random.normal(key, (args.batch, args.features))
    return x, jnp.sin(x.sum(axis=1, keepdims=True))


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--job", default=None)
    p.add_argument("--home", default=None)
    p.add_argument("--cpu-ops", action="store_true", help="also record XLA's host activity")
    p.add_argument("--no-profile", action="store_true", help="do not start hyperscope here")
    args = p.parse_args(argv)
    key = jax.random.PRNGKey(0)
    params = init(key, [args.features, 64, 64, 1])
    if not args.no_profile:
        hs.start_profiling(hs.ProfilerConfig(job=args.job, home=args.home, cpu_ops=args.cpu_ops))
    start = time.perf_counter()
    loss: Any = jnp.zeros(())
    for step in range(args.steps):
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            x, y = batch(jax.random.fold_in(key, step), args)
            with hs.annotate("update"):
                params, loss = update(params, x, y)
                loss.block_until_ready()
        if not args.no_profile:
            hs.step()
    elapsed = time.perf_counter() - start
    hs.stop_profiling()
    print(f"{args.steps} steps in {elapsed:.2f} s, final loss {float(loss):.4f}")
    return float(loss)


if __name__ == "__main__":
    main()
