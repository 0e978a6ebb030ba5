"""Run every benchmark in turn with this interpreter, so one command refreshes all of bench/results/.

Each benchmark is a separate process, as if run by hand: a failure in one is reported and the
rest still run. ``--quick`` imports a 200 MB trace instead of 1 GB in the large-import benchmark.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="large_import at 200 MB instead of 1024 MB")
    args = parser.parse_args()
    runs = [
        ["storage.py"],
        ["import_vs_hta.py"],
        ["large_import.py", "--size-mb", "200" if args.quick else "1024"],
        ["capture_overhead.py", *(["--rounds", "1", "--steps", "20"] if args.quick else [])],
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
