"""A timeline tile's wall time while other threads hold the GIL, at Python's switch interval
(5 ms) and at the server's (``hyperscope.server.serve.SWITCH_INTERVAL_S``).

The server runs many requests on threads of one process. A tile costs a few milliseconds of CPU
but lets go of the GIL around each of its numpy operations; each time a busy thread takes it
then, the tile waits for that thread's turn to end. This measures that wait in one process, on
the soak's 1M-event profile: tiles drawn as bench/soak.py draws them, one after the other, while
``--busy`` threads run pure-Python work (as other requests' JSON, pydantic and Starlette do).

    python bench/gil_turns.py              # 4 busy threads, 150 tiles per interval
"""

from __future__ import annotations

import argparse
import gzip
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import orjson
from _common import print_table
from ui_api import generate

from hyperscope import timeline as tl
from hyperscope.schema.layout import profile_dir
from hyperscope.server.serve import SWITCH_INTERVAL_S
from hyperscope.store.profile import Profile

PYTHON_DEFAULT_S = 0.005


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--busy", type=int, default=4, help="threads holding the GIL meanwhile")
    parser.add_argument("--tiles", type=int, default=150)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hyperscope-gil-"))
    try:
        pid, events, _ = generate(work, 1.0)
        index = tl.load(Profile.open(profile_dir(work, pid)))
        rows = [r for r in index.by_id if r.startswith(("host/", "stream/"))]
        ts = np.asarray(index.ts[:], dtype=np.int64)
        t_min, t_max = int(ts.min()), int(ts.max())
        big = {"rows": [{"name": f"kernel_{i}", "a": i * 1.5, "b": [i, "x" * 20]} for i in range(3000)]}
        stop = threading.Event()
        done = [0]

        def busy() -> None:
            while not stop.is_set():
                orjson.dumps(big)
                x = 0
                for i in range(20_000):
                    x += i
                done[0] += 1

        def one_tile(rng: random.Random) -> None:
            picked = rng.sample(rows, rng.randint(1, min(8, len(rows))))
            width = max(1000, (t_max - t_min) >> rng.randint(0, 12))
            t0 = rng.randint(t_min, max(t_min, t_max - width))
            payload = tl.encode(tl.tile(index, picked, t0, t0 + width, rng.randint(1000, 2000)))
            gzip.compress(payload, compresslevel=3, mtime=0)

        lines = []
        for busy_threads, interval in (
            (0, PYTHON_DEFAULT_S),
            (args.busy, PYTHON_DEFAULT_S),
            (args.busy, SWITCH_INTERVAL_S),
        ):
            sys.setswitchinterval(interval)
            stop.clear()
            done[0] = 0
            threads = [threading.Thread(target=busy, daemon=True) for _ in range(busy_threads)]
            for t in threads:
                t.start()
            rng = random.Random(3)
            walls, cpus = [], []
            started = time.perf_counter()
            for _ in range(args.tiles):
                w0, c0 = time.perf_counter(), time.thread_time()
                one_tile(rng)
                walls.append((time.perf_counter() - w0) * 1e3)
                cpus.append((time.thread_time() - c0) * 1e3)
            elapsed = time.perf_counter() - started
            stop.set()
            for t in threads:
                t.join()
            walls.sort()
            lines.append(
                (busy_threads, f"{interval * 1e3:g}", round(statistics.median(walls), 1),
                 round(walls[int(0.9 * len(walls))], 1), round(statistics.mean(cpus), 2),
                 round(done[0] / elapsed))
            )  # fmt: skip
        print(f"profile: {events:,} events; {args.tiles} tiles per row")
        print_table(
            (
                "busy threads",
                "switch interval ms",
                "tile p50 ms",
                "tile p90 ms",
                "tile CPU ms",
                "busy work/s",
            ),
            lines,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
