"""A small Keras model trained on random data with ``model.fit``, annotated for hyperscope.

    python examples/train_tf.py --cpu-ops                      # profiles itself into ~/.hyperscope
    hyperscope profile --cpu-ops -- python examples/train_tf.py --no-profile   # the launcher's way

Under the launcher nothing here marks a step: hyperscope hooks ``model.fit`` and marks each batch
itself. The annotations show the three ways to mark code: a decorated function, a begin/end pair
(from a Keras callback) and a ``with`` block.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up banner, not errors

import numpy as np
import tensorflow as tf

import hyperscope as hs


@hs.annotate("data")
def make_data(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.steps * args.batch, args.features)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
    return x, y


class Marks(tf.keras.callbacks.Callback):
    """Each batch annotated; the steps marked here only when the script profiles itself."""

    def __init__(self, mark_steps: bool) -> None:
        super().__init__()
        self.mark_steps = mark_steps
        self.handle = 0

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.handle = hs.annotation_begin("train_batch")

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        hs.annotation_end(self.handle)
        if self.mark_steps:
            hs.step()


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=8, help="batches of the one epoch")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--job", default=None)
    p.add_argument("--home", default=None)
    p.add_argument("--cpu-ops", action="store_true", help="also record every TensorFlow op")
    p.add_argument("--no-profile", action="store_true", help="do not start hyperscope here")
    args = p.parse_args(argv)
    tf.random.set_seed(0)
    x, y = make_data(args)
    layers = tf.keras.layers
    model = tf.keras.Sequential(
        [tf.keras.Input((args.features,)), layers.Dense(64, activation="relu"), layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="binary_crossentropy")
    if not args.no_profile:
        hs.start_profiling(hs.ProfilerConfig(job=args.job, home=args.home, cpu_ops=args.cpu_ops))
    start = time.perf_counter()
    history = model.fit(
        x, y, batch_size=args.batch, epochs=1, verbose=0, shuffle=False,
        callbacks=[Marks(mark_steps=not args.no_profile)],
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    with hs.annotate("evaluate"):
        final = float(model.evaluate(x, y, batch_size=args.batch * 4, verbose=0))
    hs.stop_profiling()
    print(f"{args.steps} steps in {elapsed:.2f} s, loss {history.history['loss'][-1]:.3f}, eval {final:.3f}")
    return final


if __name__ == "__main__":
    main()
