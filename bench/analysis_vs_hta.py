"""Analysis: hyperscope's import + every dashboard analysis against HTA 0.5.0's load + temporal
breakdown + kernel breakdown + comm/comp overlap, and the dashboard's growth with profile size.

Part 1, real traces (df_index_resolver, the 8-rank dlrm_kineto set): each side runs in a fresh
child process, alternating, ``--repeats`` times (medians shown). Wall time is timed inside the
child from before the load/import to after the last analysis (interpreter start and library
imports excluded on both sides); peak memory covers the child's process tree (see ``_common``).
hyperscope does more work than HTA here: it imports every event into the store and computes the
whole dashboard (19 tables) plus HTA's own three tables in HTA-compatible mode.
*Targets* (issue 4): ≥ 5× faster end to end, ≤ 1/2 of HTA's peak memory.

Part 2, generated profiles (``hyperscope.analysis.groundtruth``, 8 ranks) of 1M, 10M and 100M
events, written straight to Parquet (not timed): the full dashboard in a fresh process.
*Targets*: 10M events in ≤ 3 s and ≤ 2 GB peak on 2 cores; growth linear or better, 100M ≤ 30 s.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import (
    MAIN_PYTHON,
    MIB,
    RESULT_MARK,
    RESULTS_DIR,
    TRACES_DIR,
    ChildRun,
    median_run,
    print_table,
    run_child,
    write_results,
)
from import_vs_hta import HTA_PYTHON, HTA_VERSION, ensure_hta_venv, inputs

SPEED_TARGET = 5.0
RSS_TARGET = 0.5
GB = 10**9

HTA_CHILD = f"""
import json, logging, resource, sys, time
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t0 = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
temporal = analyzer.get_temporal_breakdown(visualize=False)
kernel_types, kernels = analyzer.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
overlap = analyzer.get_comm_comp_overlap(visualize=False)
t2 = time.perf_counter()
out = dict(wall_s=t2 - t0, load_s=t1 - t0, analysis_s=t2 - t1,
           rows=len(temporal) + len(kernels) + len(overlap), rss_after_imports=base)
print({RESULT_MARK!r} + json.dumps(out))
"""

HYPERSCOPE_CHILD = f"""
import json, resource, sys, time
from hyperscope import Store
from hyperscope.analysis import dashboard, hta
paths = json.loads(sys.argv[2])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t0 = time.perf_counter()
with Store(sys.argv[1]) as store:
    report = store.import_traces(paths, "bench")
    t1 = time.perf_counter()
    profile = store.profile("bench")
    tables = dashboard(profile)
    extra = list(hta.breakdowns(profile).values())
t2 = time.perf_counter()
out = dict(wall_s=t2 - t0, load_s=t1 - t0, analysis_s=t2 - t1, events=report.profile.events,
           rows=sum(len(t) for t in tables.values()) + sum(len(t) for t in extra), rss_after_imports=base)
print({RESULT_MARK!r} + json.dumps(out))
"""

DASHBOARD_CHILD = f"""
import json, resource, sys, time
from pathlib import Path
from hyperscope.analysis import dashboard
from hyperscope.store.profile import Profile
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t0 = time.perf_counter()
profile = Profile.open(Path(sys.argv[1]))
tables = dashboard(profile)
wall = time.perf_counter() - t0
out = dict(wall_s=wall, events=profile.meta.events, rows=sum(len(t) for t in tables.values()),
           rss_after_imports=base)
print({RESULT_MARK!r} + json.dumps(out))
"""


def real_traces(work: Path, repeats: int) -> list[dict[str, Any]]:
    results = []
    for name, hta_dir, paths in inputs(work):
        hta_runs: list[ChildRun] = []
        hs_runs: list[ChildRun] = []
        for i in range(repeats):
            hta_runs.append(run_child([str(HTA_PYTHON), "-c", HTA_CHILD, str(hta_dir)]))
            home = Path(tempfile.mkdtemp(prefix="store-", dir=work))
            hs_runs.append(run_child([str(MAIN_PYTHON), "-c", HYPERSCOPE_CHILD, str(home), _json(paths)]))
            h, s = hta_runs[-1], hs_runs[-1]
            print(
                f"  {name} run {i + 1}: HTA {h.wall_s:.2f} s (load {h.payload['load_s']:.2f}) "
                f"{h.peak_rss / MIB:.0f} MiB; hyperscope {s.wall_s:.2f} s (import {s.payload['load_s']:.2f}) "
                f"{s.peak_rss / MIB:.0f} MiB",
                flush=True,
            )
        hta_wall, hta_rss = median_run(hta_runs)
        hs_wall, hs_rss = median_run(hs_runs)
        results.append(
            {
                "trace": name,
                "hta_wall_s": hta_wall,
                "hta_analysis_s": sorted(r.payload["analysis_s"] for r in hta_runs)[len(hta_runs) // 2],
                "hyperscope_wall_s": hs_wall,
                "hyperscope_analysis_s": sorted(r.payload["analysis_s"] for r in hs_runs)[len(hs_runs) // 2],
                "speedup": hta_wall / hs_wall,
                "speed_met": hta_wall / hs_wall >= SPEED_TARGET,
                "hta_peak_rss": hta_rss,
                "hyperscope_peak_rss": hs_rss,
                "rss_ratio": hs_rss / hta_rss,
                "rss_met": hs_rss / hta_rss <= RSS_TARGET,
                "hyperscope_rows": hs_runs[0].payload["rows"],
                "hta_rows": hta_runs[0].payload["rows"],
            }
        )
    return results


def _json(paths: list[Path]) -> str:
    import json

    return json.dumps([str(p) for p in paths])


GENERATE_CHILD = """
import sys
from pathlib import Path
from hyperscope.analysis.groundtruth import GroundTruthSpec, write_profile
millions = int(sys.argv[2])
spec = GroundTruthSpec(ranks=8, steps=max(1, millions * 1_000_000 // 808), kernels_per_step=30)
write_profile(Path(sys.argv[1]), spec)
"""


def generated(work: Path, sizes_m: list[int]) -> list[dict[str, Any]]:
    results = []
    for millions in sizes_m:
        path = work / f"gen-{millions}m"
        # In a child of its own: Linux hands a forked child the parent's peak RSS as its starting
        # ru_maxrss, so generating here would inflate the dashboard's figure.
        subprocess.run([str(MAIN_PYTHON), "-c", GENERATE_CHILD, str(path), str(millions)], check=True)
        # One process (no worker pool): the kernel's ru_maxrss is its peak, so PSS is sampled only
        # every 250 ms; reading smaps of a 1 GB process every 20 ms takes CPU from the 2 cores.
        run = run_child([str(MAIN_PYTHON), "-c", DASHBOARD_CHILD, str(path)], poll_s=0.25)
        shutil.rmtree(path, ignore_errors=True)
        events = int(run.payload["events"])
        print(
            f"  {events:,} events: dashboard {run.wall_s:.2f} s, peak {run.peak_rss / MIB:.0f} MiB",
            flush=True,
        )
        results.append({"events": events, "wall_s": run.wall_s, "peak_rss": run.peak_rss})
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", default="1,10,100", help="generated profile sizes, millions of events")
    parser.add_argument("--skip-real", action="store_true", help="only the generated profiles")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="analysis-", dir=RESULTS_DIR))
    real: list[dict[str, Any]] = []
    try:
        if not args.skip_real and TRACES_DIR.is_dir():
            ensure_hta_venv()
            real = real_traces(work, args.repeats)
        elif not args.skip_real:
            print(f"{TRACES_DIR} is absent: no real-trace comparison")
        gen = generated(work, sizes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if real:
        print(f"\nreal traces: median of {args.repeats} runs, each in a fresh process")
        print_table(
            ["trace", "HTA s", "hs s", "speedup", "≥5x", "HTA MiB", "hs MiB", "hs/HTA mem", "≤1/2"],
            [
                [
                    r["trace"],
                    r["hta_wall_s"],
                    r["hyperscope_wall_s"],
                    f"{r['speedup']:.2f}x",
                    r["speed_met"],
                    round(r["hta_peak_rss"] / MIB),
                    round(r["hyperscope_peak_rss"] / MIB),
                    f"{r['rss_ratio']:.2f}",
                    r["rss_met"],
                ]
                for r in real
            ],
        )
    print("\ngenerated 8-rank profiles: full dashboard in a fresh process")
    base = gen[0] if gen else None
    print_table(
        ["events", "dashboard s", "peak MiB", "s per M events", "time vs smallest", "events vs smallest"],
        [
            [
                g["events"],
                g["wall_s"],
                round(g["peak_rss"] / MIB),
                g["wall_s"] / (g["events"] / 1e6),
                f"{g['wall_s'] / base['wall_s']:.1f}x" if base else "",
                f"{g['events'] / base['events']:.0f}x" if base else "",
            ]
            for g in gen
        ],
    )
    ten = [g for g in gen if 9e6 <= g["events"] <= 11e6]
    if ten:
        g = ten[0]
        print(
            f"\n10M events: {g['wall_s']:.2f} s (≤ 3 s: {'MET' if g['wall_s'] <= 3 else 'MISSED'}), "
            f"{g['peak_rss'] / GB:.2f} GB (≤ 2 GB: {'MET' if g['peak_rss'] <= 2 * GB else 'MISSED'})"
        )
    write_results("analysis_vs_hta", {"hta_version": HTA_VERSION, "real": real, "generated": gen})
    return 0


if __name__ == "__main__":
    sys.exit(main())
