"""Throughput and peak memory of importing one large (default ~1 GB) Kineto JSON trace.

A trace of a long run easily reaches a gigabyte; the importer must stream it, not hold it, and be
fast enough that importing is never the reason to skip profiling. The trace is generated here with
the deterministic synthetic writer (same size, same bytes every run), written under
``bench/results/tmp`` and deleted afterwards. It is imported in a fresh child process; note that the
file was just written, so it is read from the page cache, not from disk.

Targets (issue 15): ≥ 100 MB/s of JSON (MB = 10^6 bytes) on 2 cores, in ≤ 1 GB (10^9 bytes) of
peak memory. The child is pinned to ``--cores`` CPUs (default 2), so that a bigger machine measures
the same thing; the load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import MB, RESULTS_DIR, hyperscope_import, print_table, write_results

from hyperscope.store.synth import SynthSpec, write_rank

OPS_PER_STEP = 400
RSS_LIMIT = 1_000 * MB
SPEED_TARGET = 100.0  # MB/s


def steps_for(size_bytes: int, work: Path) -> int:
    """Steps that make a trace of about ``size_bytes``, from two small deterministic calibration traces.

    Size grows linearly with steps, so two points give the per-step bytes and the fixed header.
    """
    sizes = []
    for steps in (10, 20):
        probe = work / f"calibrate-{steps}.json"
        write_rank(probe, SynthSpec(ranks=1, steps=steps, ops_per_step=OPS_PER_STEP), 0)
        sizes.append(probe.stat().st_size)
        probe.unlink()
    per_step = (sizes[1] - sizes[0]) / 10
    fixed = sizes[0] - 10 * per_step
    return max(1, round((size_bytes - fixed) / per_step))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size-mb", type=int, default=1024, help="trace size in MB (10^6 bytes); default 1024"
    )
    parser.add_argument("--cores", type=int, default=2, help="CPUs the import may use (default 2)")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))[: args.cores]
    os.sched_setaffinity(0, cpus)  # the child inherits it
    tmp_root = RESULTS_DIR / "tmp"
    tmp_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="large-", dir=tmp_root))
    try:
        steps = steps_for(args.size_mb * MB, work)
        trace = work / "rank0.pt.trace.json"
        print(
            f"writing {trace.relative_to(RESULTS_DIR.parent.parent)}: steps={steps}, "
            f"ops_per_step={OPS_PER_STEP} ...",
            flush=True,
        )
        t0 = time.perf_counter()
        written_events = write_rank(trace, SynthSpec(ranks=1, steps=steps, ops_per_step=OPS_PER_STEP), 0)
        gen_s = time.perf_counter() - t0
        size = trace.stat().st_size
        print(f"  {size / MB:,.0f} MB, {written_events:,} events in {gen_s:.1f} s; importing ...", flush=True)
        run = hyperscope_import([trace], work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    speed = size / MB / run.wall_s
    result = {
        "size_mb_requested": args.size_mb,
        "steps": steps,
        "ops_per_step": OPS_PER_STEP,
        "json_bytes": size,
        "events_written": written_events,
        "events_stored": run.payload["events"],
        "stored_bytes": run.payload["stored_bytes"],
        "import_wall_s": run.wall_s,
        "mb_per_s": speed,
        "peak_rss": run.peak_rss,
        "rss_after_imports": run.payload["rss_after_imports"],
        "speed_met": speed >= SPEED_TARGET,
        "rss_met": run.peak_rss <= RSS_LIMIT,
        "cores": len(cpus),
        "load_average": os.getloadavg(),
    }
    print("\nimport in a fresh process; memory = peak of its process tree; MB = 10^6 bytes")
    print_table(
        [
            "JSON MB",
            "events",
            "import s",
            "MB/s",
            "≥100 MB/s",
            "peak MB",
            "≤1000 MB",
            "stored MB",
            "raw/stored",
        ],
        [
            [
                size / MB,
                run.payload["events"],
                run.wall_s,
                speed,
                result["speed_met"],
                run.peak_rss / MB,
                result["rss_met"],
                run.payload["stored_bytes"] / MB,
                f"{size / run.payload['stored_bytes']:.1f}x",
            ]
        ],
    )
    load = " ".join(f"{x:.1f}" for x in result["load_average"])
    print(f"\ntargets (issue 15), on {len(cpus)} cores, load average {load}:")
    print_table(
        ["target", "needed", "achieved", "result"],
        [
            ["import speed", f"≥ {SPEED_TARGET:g} MB/s", f"{speed:.1f} MB/s", result["speed_met"]],
            ["peak memory", f"≤ {RSS_LIMIT / MB:,.0f} MB", f"{run.peak_rss / MB:,.0f} MB", result["rss_met"]],
        ],
    )
    write_results(f"large_import_{args.size_mb}mb", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
