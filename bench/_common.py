"""Helpers shared by the benchmark scripts: locating inputs, measuring children, printing tables.

Each measurement runs in a fresh child process so that one side's imports, caches and heap never
inflate the other's figures. The child times its own load and prints one JSON line. Peak memory is
the larger of two views: the sum of PSS over the child's whole process tree, sampled every 20 ms
(so forked worker pools count, their shared copy-on-write pages once), and the kernel's
``ru_maxrss`` from ``wait4`` (the largest single process, so a peak shorter than the sampling
interval is not missed). Both sides of a comparison are measured this way.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
TRACES_DIR = REPO_ROOT.parent / "shared" / "traces"
MAIN_PYTHON = Path(sys.executable)
MB = 1_000_000
MIB = 1 << 20

# Children print their figures after this marker: other output (DuckDB's progress bar, library
# logging) may share stdout and need not end with a newline.
RESULT_MARK = "@@bench-result "

# The child side of a hyperscope import: argv[1] = store home, argv[2] = JSON list of paths. Timed:
# what `hyperscope import` does, the import and then the dashboard and timeline index it keeps
# beside the profile (the dashboard computed while the events are written, where they are held in
# memory: "import s" then includes it); stored bytes: every file of the profile's directory
# (events, samples, metadata, dashboard, timeline index), the catalog aside.
HYPERSCOPE_CHILD = f"""
import json, resource, sys, time
from pathlib import Path
from hyperscope import Store
from hyperscope.analysis.stored import precompute_beside, precompute_job
paths = json.loads(sys.argv[2])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t0 = time.perf_counter()
with Store(sys.argv[1]) as store:
    report = store.import_traces(paths, "bench", beside=precompute_beside)
imported = time.perf_counter() - t0
precompute_job(Path(sys.argv[1]), "bench", report.profile.id)
wall = time.perf_counter() - t0
with Store(sys.argv[1]) as store:
    profile = store.profile("bench", report.profile.id)
    stored = profile.disk_bytes()
    events = sum(p.stat().st_size for p in (profile.path / "events").glob("*.parquet"))
out = dict(wall_s=wall, import_s=imported, events=report.profile.events, stored_bytes=stored,
           events_bytes=events, source_bytes=report.source_bytes, rss_after_imports=base)
print({RESULT_MARK!r} + json.dumps(out))
"""


@dataclass(frozen=True, slots=True)
class ChildRun:
    """One child's figures: what it printed, plus its peak RSS as seen from outside."""

    payload: dict[str, Any]
    peak_rss: int  # bytes: max of sampled tree PSS and the kernel's ru_maxrss

    @property
    def wall_s(self) -> float:
        return float(self.payload["wall_s"])


def _tree_pss(proc: psutil.Process) -> int:
    """PSS of a process and all its descendants (shared pages split between sharers), 0 once gone.

    0 while the process has no children: a lone process's PSS never exceeds its RSS high-water,
    which ``run_child`` takes from the kernel at its exit, so its sample would change no figure,
    and the walk of its page tables every 20 ms slowed the process it measures (df_index_resolver's
    hyperscope import: +0.1-0.2 s on ~0.9 s, the same child with and without the sampler)."""
    total = 0
    try:
        children = proc.children(recursive=True)
        if not children:
            return 0
        for p in [proc, *children]:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                total += p.memory_full_info().pss
    except psutil.NoSuchProcess:
        pass
    return total


def run_child(
    argv: Sequence[str], *, env: dict[str, str] | None = None, poll_s: float = 0.02, sample: bool = True
) -> ChildRun:
    """Run ``argv``, sample its tree's PSS until it exits, and parse the JSON after its result mark.

    ``sample=False``: no sampler, for a run whose time is what counts; its peak is the kernel's
    RSS high-water of the child (or of its largest descendant) alone, not the tree's sum."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        popen = subprocess.Popen(list(argv), stdout=out, stderr=err, env=env)
        ps = psutil.Process(popen.pid)
        peak = 0
        done = threading.Event()

        def sampling() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, _tree_pss(ps))
                time.sleep(poll_s)

        sampler = threading.Thread(target=sampling, daemon=True)
        if sample:
            sampler.start()
        _, status, usage = os.wait4(popen.pid, 0)
        done.set()
        if sample:
            sampler.join()
        popen.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if popen.returncode != 0:
        raise RuntimeError(f"child {argv[:3]} failed ({popen.returncode}):\n{stderr[-3000:]}")
    at = stdout.rfind(RESULT_MARK)
    if at < 0:
        raise RuntimeError(f"child printed no result:\n{stdout[-2000:]}\n{stderr[-2000:]}")
    payload = json.loads(stdout[at + len(RESULT_MARK) :].splitlines()[0])
    return ChildRun(payload, max(peak, usage.ru_maxrss * 1024))


def hyperscope_import(paths: Sequence[Path], work: Path, *, sample: bool = True) -> ChildRun:
    """Import ``paths`` into a fresh store under ``work`` in a child process (``run_child``)."""
    home = Path(tempfile.mkdtemp(prefix="store-", dir=work))
    argv = [str(MAIN_PYTHON), "-c", HYPERSCOPE_CHILD, str(home), json.dumps([str(p) for p in paths])]
    return run_child(argv, sample=sample)


def median_run(runs: Sequence[ChildRun]) -> tuple[float, int]:
    """Median wall time and median peak RSS over repeated runs (each median taken separately)."""
    return statistics.median(r.wall_s for r in runs), int(statistics.median(r.peak_rss for r in runs))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print a plain aligned table; numbers right-aligned, text left-aligned."""
    cells = [[str(h) for h in headers], *[[_fmt(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        parts = [c.rjust(w) if _numeric(c) else c.ljust(w) for c, w in zip(row, widths, strict=True)]
        print("  ".join(parts).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, bool):
        return "MET" if value else "MISSED"
    return "" if value is None else str(value)


def _numeric(text: str) -> bool:
    return text.replace(",", "").replace(".", "").replace("x", "").replace("-", "").isdigit()


def git_state() -> str:
    """HEAD plus "+dirty" when src/ has uncommitted edits: figures move with the code, so record which."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--", "src") else "")


def write_results(name: str, data: dict[str, Any]) -> Path:
    """Write ``data`` (plus when and where it ran) to ``bench/results/<name>.json``."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    data = {
        "benchmark": name,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        **data,
    }
    path = RESULTS_DIR / f"{name}.json"
    data["git"] = git_state()
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"\nresults written to {path.relative_to(REPO_ROOT)} (code at {data['git']})")
    return path
