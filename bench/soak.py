"""Soak: 20 clients for 10 minutes against the real ``hyperscope ui`` on a 1M-event profile.

Each client, one request at a time, picks at random: a dashboard with random filters (a rank or
two, a step range, or none; drawn from a pool of 20 scopes that a warm-up asks for once before
the clock starts, as a team looks at the same jobs, plus one request in 50 for a scope never
asked before, computed then), a timeline tile
(1 to 8 rows, a window at a random zoom from the whole profile down to 1/4096 of it, 1,000 to
2,000 px), or a page of the jobs list (search, sort, offset among 2,000 jobs). The server is a
separate process (``hyperscope ui``, bound to 127.0.0.1 only), so its memory is measured alone.

Targets (issue 17): 0 errors but the documented 504 (time limit) and 413 (row cap); p99 of cached
dashboards (a scope answered before the request was sent) and of tiles ≤ 500 ms on 2 cores; RSS
flat, no growth beyond 10% after warm-up (the pool's scopes and the first fifth of the run). No
incumbent: this holds the server to its own limits.

    python bench/soak.py                 # 10 minutes, 20 clients, 1M events
    python bench/soak.py --minutes 2     # shorter, on a shared machine
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from _common import print_table, write_results
from ui_api import add_jobs, generate

from hyperscope.analysis import stored
from hyperscope.schema.layout import profile_dir
from hyperscope.store.profile import Profile
from hyperscope.timeline import index as timeline_index

P99_TARGET_MS = 500.0
RSS_GROWTH_TARGET = 0.10
DOCUMENTED = {504, 413}


@dataclass
class Tally:
    """What the clients saw, by kind of request (guarded by ``lock``)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    errors: list[str] = field(default_factory=list)
    #: dashboard scopes answered so far: a later request for one is answered from the cache
    answered: set[str] = field(default_factory=set)

    def add(self, kind: str, ms: float, status: int, what: str) -> None:
        with self.lock:
            self.statuses[status] += 1
            if status == 200:
                self.latencies[kind].append(ms)
            elif status not in DOCUMENTED:
                self.errors.append(f"{status} {what[:160]}")


def start_server(
    home: Path, logs: Path, server_src: Path | None = None, extra: list[str] | None = None
) -> tuple[subprocess.Popen[str], str, int]:
    err = open(logs / "server-err.txt", "w")  # noqa: SIM115 - for the server's whole life
    env = {**os.environ, "COLUMNS": "200"}
    if server_src is not None:  # another commit's server (``git archive``'s src/), for A/B runs
        env["PYTHONPATH"] = os.pathsep.join([str(server_src), env.get("PYTHONPATH", "")]).strip(os.pathsep)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hyperscope", "ui", "--host", "127.0.0.1", "--port", "0", "--no-browser",
         "--home", str(home), *(extra or [])],
        stdout=subprocess.PIPE, stderr=err, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if found:
            return proc, "127.0.0.1", int(found.group(1))
    raise SystemExit(f"the server did not start: {(logs / 'server-err.txt').read_text()[-2000:]}")


def rss_parts(pid: int) -> tuple[int, int]:
    """The process's resident bytes, anonymous and file-backed (``/proc/PID/status``; zeros where
    there is none): a peak of library pages is not one of the heap."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0, 0
    kb = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in status.splitlines())
          if k in ("RssAnon", "RssFile", "RssShmem")}  # fmt: skip
    return kb.get("RssAnon", 0) << 10, (kb.get("RssFile", 0) + kb.get("RssShmem", 0)) << 10


def get(con: http.client.HTTPConnection, path: str) -> tuple[int, bytes]:
    con.request("GET", path, headers={"Accept-Encoding": "gzip"})
    answer = con.getresponse()
    body = answer.read()
    if answer.getheader("Content-Encoding") == "gzip":  # as a browser, the client pays for it
        body = gzip.decompress(body)
    return answer.status, body


def row_ids(node: dict[str, Any]) -> list[str]:
    found = [str(node["id"])] if str(node.get("id", "")).startswith(("host/", "stream/")) else []
    for child in node.get("children") or []:
        found += row_ids(child)
    return found


def client(
    host: str, port: int, pid: str, plan: dict[str, Any], deadline: float, tally: Tally, seed: int
) -> None:
    rng = random.Random(seed)
    con = http.client.HTTPConnection(host, port, timeout=120)
    t_min, t_max = plan["span"]
    while time.monotonic() < deadline:
        pick = rng.random()
        if pick < 0.4:
            scope = rng.choice(plan["scopes"]) if rng.random() > 0.02 else fresh_scope(rng, plan)
            kind, path = "dashboard", f"/api/profiles/{pid}/dashboard{scope}"
            with tally.lock:
                if scope in tally.answered:
                    kind = "dashboard (cached)"
        elif pick < 0.85:
            rows = ",".join(rng.sample(plan["rows"], rng.randint(1, min(8, len(plan["rows"])))))
            width_ns = max(1000, (t_max - t_min) >> rng.randint(0, 12))
            t0 = rng.randint(t_min, max(t_min, t_max - width_ns))
            px = rng.randint(1000, 2000)
            kind = "tile"
            path = (
                f"/api/profiles/{pid}/timeline/tile?rows={rows}&t0_ns={t0}&t1_ns={t0 + width_ns}&width={px}"
            )
        else:
            search = rng.choice(["", "resnet", "run-1", "llama", "x"])
            sort = rng.choice(["created", "name", "status", "ranks"])
            kind, path = (
                "jobs",
                f"/api/jobs?search={search}&sort={sort}&offset={rng.randint(0, 1900)}&limit=100",
            )
        started = time.perf_counter()
        try:
            status, body = get(con, path)
        except (OSError, http.client.HTTPException) as exc:
            tally.add(kind, 0.0, -1, f"{path}: {exc!r}")
            con.close()
            con = http.client.HTTPConnection(host, port, timeout=120)
            continue
        ms = (time.perf_counter() - started) * 1e3
        if kind == "dashboard" and status == 200:
            with tally.lock:
                tally.answered.add(scope)
        tally.add(kind, ms, status, f"{path}: {body[:200]!r}")
    con.close()


def fresh_scope(rng: random.Random, plan: dict[str, Any]) -> str:
    """A scope of the pool's kind, but steps drawn anew: almost surely never asked before."""
    lo, hi = plan["steps"]
    a = rng.randint(lo, hi)
    return f"?rank={rng.choice(plan['ranks'])}&steps={a}:{rng.randint(a, hi)}"


def warm_up(host: str, port: int, pid: str, scopes: list[str], tally: Tally) -> float:
    """Every scope of the pool once, two at a time (the server's analysis slots): seconds taken."""
    started = time.perf_counter()
    todo = list(scopes)
    lock = threading.Lock()

    def work() -> None:
        con = http.client.HTTPConnection(host, port, timeout=600)
        while True:
            with lock:
                if not todo:
                    return
                scope = todo.pop()
            status, _ = get(con, f"/api/profiles/{pid}/dashboard{scope}")
            if status == 200:
                tally.answered.add(scope)

    workers = [threading.Thread(target=work) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - started


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the clients run")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--events", type=float, default=1.0, help="millions of events in the profile")
    parser.add_argument("--keep", action="store_true", help="keep the generated store")
    parser.add_argument(
        "--store", type=Path, help="generate the store here once and reuse it in later runs (kept)"
    )
    parser.add_argument(
        "--server-src", type=Path, help="run the server from this src/ folder (another commit's, A/B)"
    )
    parser.add_argument(
        "--server-arg", action="append", default=[], help="one more argument of `hyperscope ui`"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hyperscope-soak-"))
    home = (args.store / "home") if args.store else work / "home"
    proc: subprocess.Popen[str] | None = None
    try:
        made = args.store / "soak.json" if args.store else None
        if made is not None and made.is_file():
            pid, events = json.loads(made.read_text())
            print(f"profile: {events:,} events, reused from {args.store}", flush=True)
        else:
            pid, events, gen_s = generate(home, args.events)
            add_jobs(home, 2000)
            profile = Profile.open(profile_dir(home, pid))
            stored.precompute_dashboard(profile)  # as `hyperscope import` leaves a profile
            timeline_index.store(profile)
            print(f"profile: {events:,} events (generated in {gen_s:.1f} s); 2,000 more jobs", flush=True)
            if made is not None:
                made.write_text(json.dumps([pid, events]))
        proc, host, port = start_server(home, work, args.server_src, args.server_arg)
        con = http.client.HTTPConnection(host, port, timeout=300)
        _, body = get(con, f"/api/profiles/{pid}/filters")
        filters = json.loads(body)
        while (answer := get(con, f"/api/profiles/{pid}/timeline/rows"))[0] in (202, 503):
            time.sleep(0.5)
        rows = json.loads(answer[1])
        con.close()
        ranks, steps = filters["ranks"], filters["steps"]
        scopes = [""]
        rng = random.Random(17)
        for _ in range(19):
            parts = [f"rank={r}" for r in rng.sample(ranks, rng.randint(1, 2))] if rng.random() < 0.6 else []
            if steps and rng.random() < 0.6:
                a = rng.randint(steps["min"], steps["max"])
                parts.append(f"steps={a}:{rng.randint(a, steps['max'])}")
            scopes.append("?" + "&".join(parts) if parts else "")
        plan = {
            "scopes": sorted(set(scopes)),
            "rows": row_ids(rows["root"]),
            "span": (int(rows["start_ns"]), int(rows["end_ns"])),
            "ranks": ranks,
            "steps": (steps["min"], steps["max"]) if steps else (0, 0),
        }
        server = psutil.Process(proc.pid)
        tally = Tally()
        warm_s = warm_up(host, port, pid, plan["scopes"], tally)
        print(f"warm-up: {len(plan['scopes'])} dashboard scopes in {warm_s:.0f} s", flush=True)
        duration = args.minutes * 60
        deadline = time.monotonic() + duration
        threads = [
            threading.Thread(target=client, args=(host, port, pid, plan, deadline, tally, n), daemon=True)
            for n in range(args.clients)
        ]
        started = time.monotonic()
        load0 = os.getloadavg()[0]
        server_cpu0, client_cpu0 = sum(server.cpu_times()[:2]), sum(os.times()[:2])
        for t in threads:
            t.start()
        rss: list[tuple[float, int]] = []
        parts: list[tuple[int, int]] = []  # (anonymous, file-backed) bytes at each sample
        while any(t.is_alive() for t in threads):
            rss.append((time.monotonic() - started, server.memory_info().rss))
            parts.append(rss_parts(proc.pid))
            time.sleep(2.0)
        for t in threads:
            t.join()
        wall_s = time.monotonic() - started
        alive = proc.poll() is None
        server_cpu = sum(server.cpu_times()[:2]) - server_cpu0 if alive else float("nan")
        client_cpu = sum(os.times()[:2]) - client_cpu0
        warm = [m for s, m in rss if s >= duration / 5]
        warm_rss, end_rss, peak_rss = warm[0], warm[-1], max(warm)
        # where the peak is: anonymous memory (heap, arenas, DuckDB, arrays) or mapped files
        # (libraries' code, read as it runs), at the baseline's sample and the peak's
        first = len(rss) - len(warm)
        at_peak = parts[first + warm.index(peak_rss)]
        growth = (peak_rss - warm_rss) / warm_rss
        # beside the target's peak (which a dashboard computing at that moment makes): the trend,
        # the median of the second fifth of the run against that of the last
        fifth = [
            statistics.median(m for s, m in rss if lo <= s < hi)
            for lo, hi in ((duration / 5, 2 * duration / 5), (4 * duration / 5, float("inf")))
        ]
        lines = []
        for kind in sorted(tally.latencies):
            lat = tally.latencies[kind]
            lines.append(
                (kind, len(lat), round(statistics.median(lat), 1), round(pct(lat, 0.95), 1),
                 round(pct(lat, 0.99), 1), round(max(lat), 1))
            )  # fmt: skip
        print_table(("request", "answered 200", "p50 ms", "p95 ms", "p99 ms", "max ms"), lines)
        cached = tally.latencies.get("dashboard (cached)", []) + tally.latencies.get("tile", [])
        p99 = pct(cached, 0.99)
        total = sum(tally.statuses.values())
        print(
            f"\n{total:,} requests from {args.clients} clients in {args.minutes:g} min; statuses "
            f"{dict(sorted(tally.statuses.items()))}; errors (not 504/413): {len(tally.errors)}"
        )
        for e in tally.errors[:10]:
            print("  ", e)
        # The clients share the 2 cores with the server: what they cost is part of every latency.
        print(
            f"CPU: server {server_cpu:.0f} s ({server_cpu / max(total, 1) * 1e3:.1f} ms per request), "
            f"clients {client_cpu:.0f} s, of {2 * wall_s:.0f} core-seconds"
        )
        print(
            f"server RSS median: second fifth of the run {fifth[0] / 2**20:.0f} MB, last fifth "
            f"{fifth[1] / 2**20:.0f} MB ({(fifth[1] - fifth[0]) / fifth[0]:+.1%}); after warm-up "
            f"{min(warm) / 2**20:.0f} to {peak_rss / 2**20:.0f} MB "
            f"(median {statistics.median(warm) / 2**20:.0f})"
        )
        print(
            f"server RSS at the baseline and at the peak: anonymous {parts[first][0] / 2**20:.0f} → "
            f"{at_peak[0] / 2**20:.0f} MB, file-backed {parts[first][1] / 2**20:.0f} → "
            f"{at_peak[1] / 2**20:.0f} MB"
        )
        print(
            f"p99 of cached dashboards and tiles: {p99:.1f} ms (target ≤ {P99_TARGET_MS:g}); server RSS "
            f"after warm-up {warm_rss / 2**20:.0f} MB, at the end {end_rss / 2**20:.0f} MB, peak "
            f"{peak_rss / 2**20:.0f} MB: growth {growth:+.1%} (target ≤ {RSS_GROWTH_TARGET:.0%}); "
            f"server {'up' if alive else 'DEAD'}"
        )
        targets = [
            ("0 errors other than 504/413", f"{len(tally.errors)}", not tally.errors),
            (
                f"p99 of cached dashboards and tiles ≤ {P99_TARGET_MS:g} ms",
                f"{p99:.0f} ms (cached dashboards {pct(tally.latencies['dashboard (cached)'], 0.99):.0f}, "
                f"tiles {pct(tally.latencies['tile'], 0.99):.0f})",
                p99 <= P99_TARGET_MS,
            ),
            (
                f"RSS growth after warm-up ≤ {RSS_GROWTH_TARGET:.0%}",
                f"{growth:+.1%} ({warm_rss / 2**20:.0f} → peak {peak_rss / 2**20:.0f} MB)",
                growth <= RSS_GROWTH_TARGET,
            ),
            ("the server stays up", "up" if alive else "DEAD", alive),
        ]
        print()
        print_table(
            ("target (issue 17)", "measured", "result"),
            [(t, m, "achieved" if a else "MISSED") for t, m, a in targets],
        )
        # on a shared machine the figures say as much about the others' load as about the server
        print(f"load average at the start {load0:.1f}, at the end {os.getloadavg()[0]:.1f}")
        write_results(
            "soak",
            {
                "minutes": args.minutes,
                "warm_up_s": warm_s,
                "clients": args.clients,
                "events": events,
                "requests": total,
                "statuses": {str(k): v for k, v in sorted(tally.statuses.items())},
                "errors": tally.errors[:50],
                "latency_ms": {
                    r[0]: dict(zip(("n", "p50", "p95", "p99", "max"), r[1:], strict=True)) for r in lines
                },
                "p99_cached_dashboards_and_tiles_ms": p99,
                "rss_mb": {"warm": warm_rss / 2**20, "end": end_rss / 2**20, "peak": peak_rss / 2**20},
                "rss_growth": growth,
                "rss_median_mb": {"second_fifth": fifth[0] / 2**20, "last_fifth": fifth[1] / 2**20},
                "rss_after_warm_up_mb": {
                    "min": min(warm) / 2**20,
                    "median": statistics.median(warm) / 2**20,
                    "max": peak_rss / 2**20,
                },
                "rss_series_mb": [[round(s, 1), round(m / 2**20, 1)] for s, m in rss],
                "rss_anon_file_series_mb": [[round(a / 2**20, 1), round(f / 2**20, 1)] for a, f in parts],
                "server_alive": alive,
                "server_cpu_s": server_cpu,
                "client_cpu_s": client_cpu,
                "load_average": [load0, os.getloadavg()[0]],
                "targets": {t: {"measured": m, "achieved": a} for t, m, a in targets},
            },
        )
        ok = all(a for _, _, a in targets)
        print("PASS" if ok else "FAIL")
        sys.exit(0 if ok else 1)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
