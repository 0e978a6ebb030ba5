"""Answer times of the web UI's API: the dashboard of a large profile, cold and warm, and the jobs
list searched among 10,000 jobs.

The server runs as ``hyperscope ui`` runs it (uvicorn, in a thread of this process) and is asked
over HTTP, so each figure includes routing, the catalog look-up, JSON encoding and the transfer.
*Cold* is the first request for a scope on a fresh server (the profile is opened and every table
computed); *warm* is the same request again (the answer comes from the server's cache, as it does
for any finished job); *recomputed* is the same work again, on files the OS has cached and an open
profile, but not from the answer cache (a different ``top_k``): what a job still InProgress, or
a scope not asked for before, costs. The profile is generated straight to Parquet by
``hyperscope.analysis.groundtruth`` (8 ranks; not timed) and registered in a fresh store's catalog.

Targets (issue 5): warm dashboard ≤ 1 s; jobs search ≤ 100 ms with 10,000 jobs. No incumbent.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import uvicorn
from _common import RESULTS_DIR, print_table, write_results

from hyperscope import Store
from hyperscope.analysis.groundtruth import GroundTruthSpec, write_profile
from hyperscope.schema.layout import profile_dir
from hyperscope.server import create_app
from hyperscope.server.serve import bind
from hyperscope.store.catalog import JobStatus, ProfileRef
from hyperscope.store.profile import new_profile_id

SEARCH_TARGET_S = 0.100
EVENTS_PER_STEP = 808  # 8 ranks x 101 events per step at kernels_per_step=30


def generate(home: Path, millions: float) -> tuple[str, int, float]:
    """A ground-truth profile of ``millions`` M events as job "large"; (id, events, seconds)."""
    spec = GroundTruthSpec(ranks=8, steps=max(1, int(millions * 1e6) // EVENTS_PER_STEP), kernels_per_step=30)
    pid = new_profile_id()
    t0 = time.perf_counter()
    profile = write_profile(profile_dir(home, pid), spec)
    took = time.perf_counter() - t0
    ref = ProfileRef(
        pid, 0, profile.meta.created_ns, "import", profile.meta.events, 8, profile.disk_bytes(), ""
    )
    with Store(home) as store:
        store.catalog.add_profile(
            "large",
            ref,
            status=JobStatus.COMPLETED,
            nodes=profile.meta.nodes,
            created_ns=profile.meta.created_ns,
        )
    return pid, profile.meta.events, took


def add_jobs(home: Path, count: int) -> float:
    """``count`` one-profile jobs through the catalog's own API (one transaction each)."""
    t0 = time.perf_counter()
    with Store(home) as store:
        for n in range(count):
            name = f"{('resnet', 'llama', 'bert', 'gpt')[n % 4]}-run-{n}"
            ref = ProfileRef(f"{n:016x}", 0, 10**18 + n, "import", 1000 + n, 8, 10_000, "bench")
            status = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.IN_PROGRESS)[n % 3]
            store.catalog.add_profile(
                name, ref, status=status, nodes=[f"node-{n % 16}"], created_ns=10**18 + n
            )
    return time.perf_counter() - t0


class Server:
    """``create_app`` under uvicorn on a free port, in a daemon thread, as ``hyperscope ui`` runs it."""

    def __init__(self, home: Path) -> None:
        self.sock = bind("127.0.0.1", 0)
        self.base = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(create_app(home), log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)

    def get(self, path: str) -> tuple[float, int]:
        """Seconds to the whole answer, and its size in bytes."""
        t0 = time.perf_counter()
        with urllib.request.urlopen(self.base + path, timeout=600) as answer:
            body = answer.read()
        return time.perf_counter() - t0, len(body)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--millions", type=float, default=10.0, help="events of the profile, millions")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs in the catalog for the search")
    parser.add_argument("--repeats", type=int, default=5, help="warm requests and searches (median)")
    args = parser.parse_args()
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ui-api-", dir=RESULTS_DIR))
    try:
        home = work / "home"
        print(f"generating an 8-rank profile of {args.millions:g}M events ...", flush=True)
        pid, events, gen_s = generate(home, args.millions)
        print(f"  {events:,} events in {gen_s:.1f} s", flush=True)
        dash = measure_dashboard(home, pid, args.repeats)
        kept = measure_stored(home, pid)
        print(f"adding {args.jobs:,} jobs to the catalog ...", flush=True)
        add_s = add_jobs(home, args.jobs)
        print(f"  {add_s:.1f} s", flush=True)
        search = measure_jobs(home, args.repeats * 4)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ndashboard of {events:,} events (8 ranks); warm: median of {args.repeats}")
    print_table(
        ["scope", "cold s", "recomputed s", "warm ms", "answer KB", "warm ≤ 1 s"],
        [
            [
                d["scope"],
                d["cold_s"],
                d["recomputed_s"],
                d["warm_s"] * 1e3,
                d["bytes"] / 1e3,
                d["warm_s"] <= 1,
            ]
            for d in dash
        ],
    )
    print(
        f"\nwhole-profile dashboard kept beside the profile (what `hyperscope import`/`profile` do): "
        f"computed and stored in {kept['precompute_s']:.2f} s; then the first request on a fresh "
        f"server: {kept['first_s'] * 1e3:.0f} ms (≤ 1 s: {kept['first_s'] <= 1})"
    )
    print(f"\njobs list with {args.jobs + 1:,} jobs; median of {args.repeats * 4}")
    print_table(
        ["request", "ms", "answer KB", f"≤ {SEARCH_TARGET_S * 1e3:g} ms"],
        [[s["request"], s["s"] * 1e3, s["bytes"] / 1e3, s["s"] <= SEARCH_TARGET_S] for s in search],
    )
    write_results(
        "ui_api",
        {
            "events": events,
            "generate_s": gen_s,
            "jobs": args.jobs + 1,
            "dashboard": dash,
            "stored_dashboard": kept,
            "jobs_list": search,
        },
    )
    return 0


def measure_stored(home: Path, pid: str) -> dict[str, float]:
    """The precomputation `hyperscope import` and `hyperscope profile` end with, then a fresh
    server's first request for the whole profile (it reads the stored answer)."""
    from hyperscope.analysis.stored import precompute_dashboard
    from hyperscope.schema.layout import profile_dir
    from hyperscope.store.profile import Profile

    t0 = time.perf_counter()
    precompute_dashboard(Profile.open(profile_dir(home, pid)))
    precompute_s = time.perf_counter() - t0
    server = Server(home)
    try:
        first, _ = server.get(f"/api/profiles/{pid}/dashboard")
    finally:
        server.stop()
    print(f"  stored: precomputed in {precompute_s:.2f} s, first request {first * 1e3:.0f} ms", flush=True)
    return {"precompute_s": precompute_s, "first_s": first}


def measure_dashboard(home: Path, pid: str, repeats: int) -> list[dict[str, Any]]:
    results = []
    server = Server(home)
    try:
        for label, query in (
            ("whole profile", ""),
            ("rank 3", "?rank=3"),
            ("steps 100:199", "?steps=100:199"),
        ):
            path = f"/api/profiles/{pid}/dashboard{query}"
            cold, size = server.get(path)
            warm = statistics.median(server.get(path)[0] for _ in range(repeats))
            # the same work on warm files and an open profile, but not from the cache (top_k differs)
            fresh = statistics.median(
                server.get(f"{path}{'&' if query else '?'}top_k={14 - n}")[0] for n in range(2)
            )
            print(
                f"  {label}: cold {cold:.2f} s, recomputed {fresh:.2f} s, warm {warm * 1e3:.1f} ms",
                flush=True,
            )
            results.append(
                {"scope": label, "cold_s": cold, "recomputed_s": fresh, "warm_s": warm, "bytes": size}
            )
    finally:
        server.stop()
    return results


def measure_jobs(home: Path, repeats: int) -> list[dict[str, Any]]:
    results = []
    server = Server(home)
    try:
        for label, query in (
            ("first page (100, newest)", ""),
            ("search 'run-12'", "?search=run-12"),
            ("search 'llama', Failed", "?search=llama&status=Failed"),
            ("by name, offset 5000", "?sort=name&order=asc&offset=5000"),
            ("no match", "?search=no-such-job"),
        ):
            server.get("/api/jobs" + query)  # connection set-up, first-use imports
            times = [server.get("/api/jobs" + query) for _ in range(repeats)]
            took = statistics.median(t for t, _ in times)
            results.append({"request": label, "s": took, "bytes": times[0][1]})
    finally:
        server.stop()
    return results


if __name__ == "__main__":
    sys.exit(main())
