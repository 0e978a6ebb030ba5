"""Run every benchmark in turn with this interpreter, so one command refreshes all of bench/results/.

Each benchmark is a separate process, as if run by hand: a failure in one is reported and the
rest still run. ``--quick`` shrinks the long ones (a 200 MB import instead of 1 GB, one capture
round, 1M-event analysis and UI profiles instead of 10M). The cluster and recovery benchmarks need
root with slurm-wlm and munge (they say so and exit 0 otherwise); the browser one needs chromium.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs for the long benchmarks")
    args = parser.parse_args()
    runs = [
        ["storage.py"],
        ["import_vs_hta.py"],
        ["large_import.py", "--size-mb", "200" if args.quick else "1024"],
        ["capture_overhead.py", *(["--rounds", "1", "--steps", "20"] if args.quick else [])],
        ["analysis_vs_hta.py", "--sizes", "1" if args.quick else "1,10"],
        ["ui_api.py", "--millions", "1" if args.quick else "10"],
        ["ui_render.py", "--events", "1" if args.quick else "10", "--precomputed"],
        ["timeline_tiles.py", "--events", "1" if args.quick else "10"],
        ["checkpoint_blocking.py", *(["--rounds", "3"] if args.quick else [])],
        ["cluster_lifecycle.py", *(["--rounds", "1"] if args.quick else [])],
        ["recovery.py", "--runs", "1" if args.quick else "3"],
        ["agent_scale.py", *(["--passes", "10"] if args.quick else [])],
    ]
    failed = []
    for script, *rest in runs:
        print(f"\n=== {script} {' '.join(rest)}".rstrip(), flush=True)
        if subprocess.run([sys.executable, str(BENCH_DIR / script), *rest]).returncode != 0:
            failed.append(script)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
