"""Timeline tiles: answer time and size for windows from the whole run down to 1 µs.

A profile of ``--events`` million events (``hyperscope.analysis.groundtruth``: 8 ranks on 2 nodes,
40 kernels per step, one host thread and three streams per rank) is written straight to Parquet
(timed, not counted). The timeline index is then built as the first request of a server would
(*index*: seconds, once per profile, kept beside it). Each tile asks for every event row of the
profile (8 host threads and 24 streams: everything expanded), ``--width`` pixels wide, for windows
of the whole run, then 1/10, 1/100, ... of it down to 1 µs, each at ``--positions`` random places;
a tile is ``timeline.tile`` + ``encode`` in-process: what the server's endpoint does besides HTTP.
*Targets*: ≤ 150 ms at 10M events, ≤ 500 ms at 100M, ≤ 2 MB per tile.

Beside these, the size the same profile would have as Kineto JSON: a small profile of the same
shape is exported with ``hyperscope export`` (Chrome-trace JSON, as Kineto writes it) and its bytes
per event are multiplied by the event count.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO_ROOT, print_table, write_results

sys.path.insert(0, str(REPO_ROOT / "src"))
from hyperscope import timeline as tl
from hyperscope.analysis.groundtruth import GroundTruthSpec, write_profile
from hyperscope.store.chrome import export_chrome

KERNELS = 40
RANKS = 8
TARGET_MS = {10: 150.0, 100: 500.0}
TARGET_BYTES = 2_000_000


def spec(steps: int) -> GroundTruthSpec:
    return GroundTruthSpec(ranks=RANKS, nodes=2, steps=steps, kernels_per_step=KERNELS)


def json_bytes_per_event(root: Path) -> float:
    profile = write_profile(root / "sample", spec(200))
    (root / "sample-json").mkdir()
    files = export_chrome(profile, root / "sample-json")
    return sum(f.stat().st_size for f in files) / profile.meta.events


def run(millions: float, width: int, positions: int, root: Path) -> dict[str, Any]:
    per_step = spec(1).events_per_rank * RANKS
    steps = max(1, round(millions * 1e6 / per_step))
    started = time.perf_counter()
    profile = write_profile(root / f"p{millions:g}", spec(steps))
    generate_s = time.perf_counter() - started
    events = profile.meta.events
    started = time.perf_counter()
    index = tl.load(profile)
    index_s = time.perf_counter() - started
    where = tl.index.index_dir(profile)
    index_bytes = sum(p.stat().st_size for p in where.iterdir())
    parquet_bytes = sum(p.stat().st_size for p in (profile.path / "events").iterdir())
    rows = [r.id for r in index.rows]
    lo = int(index.ts.min())
    hi = int((index.ts + index.dur).max())
    rnd = random.Random(6)
    out = []
    span = hi - lo
    spans = []
    while span > 1000:
        spans.append(span)
        span //= 10
    spans.append(1000)
    for s in spans:
        times, sizes, evs, bins = [], [], [], []
        places = [lo] if s == hi - lo else [rnd.randrange(lo, hi - s) for _ in range(positions)]
        for t0 in places:
            t_start = time.perf_counter()
            t = tl.tile(index, rows, t0, t0 + s, width)
            payload = tl.encode(t)
            times.append((time.perf_counter() - t_start) * 1e3)
            sizes.append(len(payload))
            evs.append(len(t.ts))
            bins.append(len(t.bin_col))
        out.append(
            {
                "window_ns": s,
                "median_ms": statistics.median(times),
                "max_ms": max(times),
                "max_bytes": max(sizes),
                "events": max(evs),
                "bins": max(bins),
            }
        )
    return {
        "millions": millions,
        "events": events,
        "rows": len(rows),
        "generate_s": generate_s,
        "index_s": index_s,
        "index_bytes": index_bytes,
        "parquet_bytes": parquet_bytes,
        "tiles": out,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=float, nargs="+", default=[10.0], help="millions of events")
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--positions", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hyperscope-bench-timeline-") as tmp:
        root = Path(tmp)
        bpe = json_bytes_per_event(root)
        results = []
        for m in args.events:
            r = run(m, args.width, args.positions, root)
            r["kineto_json_bytes_est"] = r["events"] * bpe
            results.append(r)
            print(
                f"\n{r['events']:,} events, {r['rows']} rows: generated in {r['generate_s']:.1f} s, index built in "
                f"{r['index_s']:.1f} s ({r['index_bytes'] / 1e6:.0f} MB beside {r['parquet_bytes'] / 1e6:.0f} MB "
                f"of Parquet); as Kineto JSON ≈ {r['kineto_json_bytes_est'] / 1e9:.2f} GB ({bpe:.0f} B/event)"
            )
            target = TARGET_MS.get(round(m), None)
            print_table(
                ["window", "median ms", "max ms", "max KB", "events", "bins", "target"],
                [
                    [
                        tl_fmt(t["window_ns"]),
                        round(t["median_ms"], 1),
                        round(t["max_ms"], 1),
                        round(t["max_bytes"] / 1e3),
                        t["events"],
                        t["bins"],
                        "met"
                        if target is not None and t["max_ms"] <= target and t["max_bytes"] <= TARGET_BYTES
                        else ("missed" if target is not None else "-"),
                    ]
                    for t in r["tiles"]
                ],
            )
    write_results("timeline_tiles", {"width": args.width, "json_bytes_per_event": bpe, "runs": results})


def tl_fmt(ns: int) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:g} {unit}"
    return f"{ns} ns"


if __name__ == "__main__":
    main()
