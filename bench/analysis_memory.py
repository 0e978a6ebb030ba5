"""What new-scope dashboards add to a process's RSS while they run: a DuckDB database per
analysis (the library's ``connection(profile)``) against the server's one shared database
(``server/analysis_db.py``), two at a time as the server's two analysis slots run them.

In process, over bench/soak.py's store (``--store``, made by a soak run first), with the server's
allocator settings (``serve.bound_malloc``). RSS is read from /proc every 2 ms (DuckDB's memory is
invisible to tracemalloc); each round prints the RSS before the two dashboards, the highest while
they ran, and after. Each way runs in a process of its own, one after the other.

    python bench/analysis_memory.py --store /tmp/soak2store [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import duckdb
from _common import print_table, write_results

WAYS = ("a database per analysis", "one shared database")


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def run_one_way(store: Path, way: str, rounds: int) -> list[tuple[float, float, float, float]]:
    """``rounds`` × (before, peak, after MB, seconds) of two new-scope dashboards at once."""
    from hyperscope.analysis import dashboard
    from hyperscope.analysis._common import Scope, connection
    from hyperscope.schema.layout import profile_dir
    from hyperscope.server.analysis_db import AnalysisDatabase
    from hyperscope.server.serve import bound_malloc
    from hyperscope.store.profile import Profile

    bound_malloc()
    pid, _ = json.loads((store / "soak.json").read_text())
    profile = Profile.open(profile_dir(store / "home", pid))
    shared = AnalysisDatabase()
    peak = [0.0]

    def sample() -> None:
        while True:
            peak[0] = max(peak[0], _rss_mb())
            time.sleep(0.002)

    threading.Thread(target=sample, daemon=True).start()
    rng = random.Random(5)
    ranks = [r.rank for r in profile.meta.ranks]

    def one(scope: Scope) -> None:
        opened: AbstractContextManager[duckdb.DuckDBPyConnection] = (
            shared.connection(profile) if way == WAYS[1] else connection(profile)
        )
        with opened as con:
            {k: t.to_dict() for k, t in dashboard(con, scope).items()}

    out = []
    for _ in range(rounds + 1):  # the first round loads code and DuckDB's extensions: not counted
        scopes = []
        for _ in range(2):
            first = rng.randint(1, 150)
            scopes.append(Scope(ranks=(rng.choice(ranks),), steps=(first, rng.randint(first, 200))))
        before = _rss_mb()
        peak[0] = before
        started = time.perf_counter()
        threads = [threading.Thread(target=one, args=(s,)) for s in scopes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out.append((before, peak[0], _rss_mb(), time.perf_counter() - started))
    return out[1:]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", type=Path, required=True, help="bench/soak.py's --store")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)  # one way, in a child process
    args = parser.parse_args()
    if args.way:
        print(json.dumps(run_one_way(args.store, args.way, args.rounds)))
        return
    results: dict[str, Any] = {}
    lines = []
    for way in WAYS:
        done = subprocess.run(
            [sys.executable, __file__, "--store", str(args.store), "--rounds", str(args.rounds),
             "--way", way],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        rounds = json.loads(done.stdout.strip().splitlines()[-1])
        results[way] = rounds
        extra = [peak - before for before, peak, _, _ in rounds]
        lines.append(
            (way, round(statistics.median(r[0] for r in rounds)), round(statistics.median(extra), 1),
             round(max(extra), 1), round(statistics.median(r[2] - r[0] for r in rounds), 1),
             round(statistics.median(r[3] for r in rounds) * 1e3))
        )  # fmt: skip
    print_table(
        ("two new-scope dashboards at once", "RSS before MB", "peak + MB (median)", "peak + MB (max)",
         "after − before MB", "wall ms (median)"),
        lines,
    )  # fmt: skip
    write_results("analysis_memory", {"rounds": args.rounds, "results": results})


if __name__ == "__main__":
    main()
