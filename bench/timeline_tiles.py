"""Timeline tiles: answer time and size for windows from the whole run down to 1 µs.

A profile of ``--events`` million events (``hyperscope.analysis.groundtruth``: 8 ranks on 2 nodes,
40 kernels per step, one host thread and three streams per rank) is written straight to Parquet
(timed, not counted; by ``groundtruth_np``, numpy and pyarrow: the same events as DuckDB writes,
in minutes less at 100M). The timeline index is then built as the first request of a server would
(*index*: seconds, once per profile, kept beside it). Each tile asks for every event row of the
profile (8 host threads and 24 streams: everything expanded), ``--width`` pixels wide, for windows
of the whole run, then 1/10, 1/100, ... of it down to 1 µs, each at ``--positions`` random places;
a tile is ``timeline.tile`` + ``encode`` in-process: what the server's endpoint does besides HTTP.
Each window is asked as the UI asks it (``snap=1``: ``timeline.snap`` widens it to the overview's
cells where the index keeps them, read with no event decoded; ``--exact``: as it is).
*Targets*: ≤ 150 ms at 10M events, ≤ 500 ms at 100M, ≤ 2 MB per tile. The index is stored as
compressed blocks (``timeline._blocks``), decoded into a cache bounded in bytes, which starts empty:
the first tile of each window pays its blocks' decoding. The same tiles are then asked of the earlier
layout (plain ``.npy`` columns, memory-mapped, built into a second directory) in the same run: *npy*
columns. A column that fits its share of the cache is decoded into one array, block by block as
tiles ask for them, so the last row, the whole run *again*, is what it costs once the first tiles
have been drawn. ``--keep DIR`` keeps the generated profiles (the Parquet alone) and reuses them.
*CPU ms*: the process's CPU time per tile, median (*CPU max*: the most), what load on the machine does not
inflate as much as wall time.

With ``--browser``, the first run's profile is also entered in a store's catalog and opened in
Debian's chromium (headless) through a fresh ``hyperscope ui``: *first paint* = navigation start
to the row tree and first tile drawn, with the index already built (as after a first look) and
cold (the server builds it), its dashboard kept beside it as ``hyperscope import`` leaves it;
*all rows* = opening every group to the first tile of all rows drawn;
*pan frames* = with every row open, for a window of the whole run, 1/10 and 1/100 of it (centred):
20 presses of D/A (each brings a new tile, whose layer is drawn: *draw*, or *slice* when spread over
frames) then a 40-move mouse drag (the layer copied: *copy*); for every frame, the canvas's script
time and the *visible events*: events overlapping the view plus the events counted in the merged
columns in view (what the frame shows, drawn one by one or merged per pixel column). *Zoom frames*:
the same three windows, 10 presses of W then 10 of S (each brings a new tile), then 40 wheel turns
at 60 Hz, 20 in and 20 out (each frame a new scale: the last layer shown stretched, *preview*, until
the scale has held 100 ms; then the layer of the new scale drawn, in slices when large). Each
gesture runs under Chromium's trace: *CPU* = the main thread's CPU time of every animation frame's
callbacks (``FireAnimationFrame``'s thread time), which load inflates far less than the wall time.

Beside these, the size the same profile would have as Kineto JSON: a small profile of the same
shape is exported with ``hyperscope export`` (Chrome-trace JSON, as Kineto writes it) and its bytes
per event are multiplied by the event count.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import REPO_ROOT, print_table, write_results

sys.path.insert(0, str(REPO_ROOT / "src"))
sys.path.insert(0, str(REPO_ROOT))

from hyperscope import timeline as tl
from hyperscope.analysis.groundtruth import GroundTruthSpec
from hyperscope.analysis.groundtruth_np import write_profile
from hyperscope.store.chrome import export_chrome
from hyperscope.store.profile import Profile
from hyperscope.timeline import _blocks

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


def run(
    millions: float,
    width: int,
    positions: int,
    root: Path,
    keep: Path | None = None,
    npy_compare: bool = True,
    snap: bool = True,
) -> dict[str, Any]:
    # stored whatever its size (below TIMELINE_STORE_MIN_EVENTS a server holds the index in memory): the
    # blocks are what is measured
    os.environ.setdefault("HYPERSCOPE_TIMELINE_STORE_MIN", "0")
    per_step = spec(1).events_per_rank * RANKS
    steps = max(1, round(millions * 1e6 / per_step))
    started = time.perf_counter()
    where = root / f"p{millions:g}"
    if keep is not None and (keep / where.name).is_dir():  # written by an earlier run: reused
        shutil.rmtree(where, ignore_errors=True)
        shutil.copytree(keep / where.name, where, ignore=shutil.ignore_patterns("derived"))
        profile = Profile.open(where)
    else:
        profile = write_profile(where, spec(steps))
        if keep is not None:
            shutil.copytree(where, keep / where.name)
    generate_s = time.perf_counter() - started
    rss_generate = _peak_rss()
    events = profile.meta.events
    started = time.perf_counter()
    index = tl.load(profile)
    index_s = time.perf_counter() - started
    rss_index = _peak_rss()
    where = tl.index.index_dir(profile)
    index_bytes = sum(p.stat().st_size for p in where.iterdir())
    overview_bytes = sum(p.stat().st_size for p in where.glob("ov_*.blk"))
    parquet_bytes = sum(p.stat().st_size for p in (profile.path / "events").iterdir())
    npy_s, npy_bytes, npy = 0.0, 0, None
    if npy_compare:
        started = time.perf_counter()
        npy_dir = root / f"npy{millions:g}"
        npy_dir.mkdir()
        tl.index.build(profile, npy_dir)
        npy_s = time.perf_counter() - started
        npy_bytes = sum(p.stat().st_size for p in npy_dir.iterdir())
        npy = tl.index._read(npy_dir)
        assert npy is not None
    rows = [r.id for r in index.rows]
    lo, hi = tl.index.span(index)  # from the rows' directory: no column decoded
    _blocks.CACHE.clear()
    rnd = random.Random(6)
    out = []
    span = hi - lo
    spans = []
    while span > 1000:
        spans.append(span)
        span //= 10
    spans.append(1000)
    # the whole run again at the end: with the columns decoded whole by then (what a view of the
    # whole run costs after the first, as when zooming back out)
    for s, again in [*((s, False) for s in spans), (spans[0], True)]:
        times, cpus, sizes, evs, bins, old, old_cpu = [], [], [], [], [], [], []
        places = [lo] if s == hi - lo else [rnd.randrange(lo, hi - s) for _ in range(positions)]
        for place in places:
            # as the UI asks (snap=1): the window on the overview's cells where it keeps them
            t0, t1, w = tl.snap(index, place, place + s, width) if snap else (place, place + s, width)
            t_start, c_start = time.perf_counter(), time.process_time()
            t = tl.tile(index, rows, t0, t1, w)
            payload = tl.encode(t)
            times.append((time.perf_counter() - t_start) * 1e3)
            cpus.append((time.process_time() - c_start) * 1e3)
            sizes.append(len(payload))
            evs.append(len(t.ts))
            bins.append(len(t.bin_col))
            if npy is None:
                continue
            t_start, c_start = time.perf_counter(), time.process_time()
            same = tl.encode(tl.tile(npy, rows, t0, t1, w))  # no overview: from the events
            old.append((time.perf_counter() - t_start) * 1e3)
            old_cpu.append((time.process_time() - c_start) * 1e3)
            assert same == payload, "the compressed and the plain index answer alike"
        out.append(
            {
                "window_ns": s,
                "again": again,
                "median_ms": statistics.median(times),
                "max_ms": max(times),
                "cpu_median_ms": statistics.median(cpus),
                "cpu_max_ms": max(cpus),
                "npy_median_ms": statistics.median(old) if old else None,
                "npy_max_ms": max(old) if old else None,
                "npy_cpu_median_ms": statistics.median(old_cpu) if old_cpu else None,
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
        "overview_bytes": overview_bytes,
        "npy_s": npy_s,
        "npy_bytes": npy_bytes,
        "parquet_bytes": parquet_bytes,
        "block_cache_bytes": _blocks.CACHE.nbytes,
        # the process's peak RSS (a high-water mark) after generating, after the index, at the end
        "peak_rss_mb": {"generate": rss_generate, "index": rss_index, "tiles": _peak_rss()},
        "tiles": out,
    }


BROWSER_FIGURES = """() => { const s = window.__hyperscope.timeline.state;
  return { now: performance.now(), tiles: s.tiles, loading: s.loading, span: s.span,
           frames: s.frameLog ? s.frameLog.length : 0 }; }"""

# where the first paint's time went: ms from navigation start to the page's first byte, its script
# loaded, and each first request's start and end (Chromium's navigation and resource timings)
PHASES = """() => { const n = performance.getEntriesByType('navigation')[0];
  const out = {page: Math.round(n.responseStart)};
  for (const e of performance.getEntriesByType('resource')) {
    const p = new URL(e.name).pathname, last = p.split('/').pop(), parent = p.split('/').slice(-2)[0];
    const k = p.endsWith('.js') ? 'script' : last === 'rows' ? 'rows' : last === 'tile' ? 'tile'
      : parent === 'profiles' ? 'profile' : null;
    if (k && !(k in out)) out[k] = [Math.round(e.startTime), Math.round(e.responseEnd)]; }
  return out; }"""

# a tile shown and none on its way (the hooks exist once the page's script has run)
READY = """() => { const tl = window.__hyperscope && window.__hyperscope.timeline;
  return !!tl && tl.state.tiles > 0 && !tl.state.loading; }"""

# the view's share of the run for each pan measured (centred on the run)
PAN_WINDOWS = (("whole run", 1.0), ("1/10 of the run", 0.1), ("1/100 of the run", 0.01))


def pan_frames(page: Any, share: float) -> dict[str, Any]:
    """Frames while panning a window of ``share`` of the run: 20 presses of D/A (a new tile after
    each: its layer drawn) then a drag of 40 moves (the layer copied), every frame logged."""
    return frame_figures(page, share, _pan)


def zoom_frames(page: Any, share: float) -> dict[str, Any]:
    """Frames while zooming around a window of ``share`` of the run: 10 presses of W then of S (a
    new tile after each), then 40 wheel turns, 20 in and 20 out, at 60 Hz (each frame a new scale:
    the layer redrawn in slices, the last one stretched meanwhile), every frame logged."""
    return frame_figures(page, share, _zoom)


def _pan(page: Any, x: float, y: float) -> None:
    for i in range(20):  # right and back, so the view stays over the run
        page.keyboard.press("d" if i % 4 < 2 else "a")
        page.wait_for_timeout(60)
    page.wait_for_function(READY, timeout=60_000)
    page.mouse.move(x, y)
    page.mouse.down()
    for i in range(40):
        page.mouse.move(x + 8 * (i + 1 if i < 20 else 39 - i), y)  # 160 px right, then back
        page.wait_for_timeout(16)
    page.mouse.up()


def _zoom(page: Any, x: float, y: float) -> None:
    for i in range(20):  # in, then back out to the same window
        page.keyboard.press("w" if i < 10 else "s")
        page.wait_for_timeout(60)
    page.wait_for_function(READY, timeout=60_000)
    page.mouse.move(x, y)
    for i in range(40):
        page.mouse.wheel(0, -60 if i < 20 else 60)
        page.wait_for_timeout(16)


def frame_figures(page: Any, share: float, gesture: Callable[[Any, float, float], None]) -> dict[str, Any]:
    tl_js = "window.__hyperscope.timeline"
    span = page.evaluate(BROWSER_FIGURES)["span"]
    mid, half = (span[0] + span[1]) / 2, (span[1] - span[0]) * share / 2
    page.evaluate(f"([a, b]) => {tl_js}.setView(a, b)", [mid - half, mid + half])
    page.wait_for_timeout(300)
    page.wait_for_function(READY, timeout=60_000)
    page.wait_for_timeout(200)
    page.evaluate(f"() => {{ {tl_js}.state.frameLog = []; }}")
    page.focus("#tl-canvas")
    box = page.locator("#tl-canvas").bounding_box()
    browser = page.context.browser
    browser.start_tracing(page=page, categories=["devtools.timeline"])
    try:
        gesture(page, box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.5)
        page.wait_for_timeout(300)
        page.wait_for_function(READY, timeout=60_000)
    finally:
        cpu = frame_cpu_ms(browser.stop_tracing())
    log = page.evaluate(
        f"() => {{ const l = {tl_js}.state.frameLog; {tl_js}.state.frameLog = null; return l; }}"
    )
    frames = [f for f in log if f["kind"] != "none"]
    ms = [f["ms"] for f in frames]
    visible = [f["events"] + f["merged"] for f in frames]
    worst = max(frames, key=lambda f: f["ms"])
    return {
        "frames": len(frames),
        "median_ms": statistics.median(ms),
        "max_ms": max(ms),
        "worst_kind": worst["kind"],
        "kinds": {k: sum(1 for f in frames if f["kind"] == k) for k in sorted({f["kind"] for f in frames})},
        "median_ms_by_kind": {
            k: statistics.median(f["ms"] for f in frames if f["kind"] == k)
            for k in {f["kind"] for f in frames}
        },
        "visible_min": min(visible),
        "visible_median": statistics.median(visible),
        "visible_max": max(visible),
        "events_max": max(f["events"] for f in frames),
        "cpu_frames": len(cpu),
        "cpu_median_ms": statistics.median(cpu) if cpu else None,
        "cpu_max_ms": max(cpu) if cpu else None,
        "per_frame": [
            {"ms": round(f["ms"], 2), "kind": f["kind"], "events": f["events"], "merged": f["merged"]}
            for f in frames
        ],
    }


def frame_cpu_ms(trace: bytes) -> list[float]:
    """The CPU time of every animation frame's callbacks on the page's main thread (Chromium's
    trace: ``FireAnimationFrame``, its thread time ``tdur``), in ms: what a frame's drawing costs,
    which load on the machine inflates far less than its wall time (the frame log's ``ms``)."""
    doc = json.loads(trace)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    main = {
        (e["pid"], e["tid"])
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"].get("name") == "CrRendererMain"
    }
    return [
        e["tdur"] / 1000
        for e in events
        if e.get("name") == "FireAnimationFrame" and "tdur" in e and (e["pid"], e["tid"]) in main
    ]


def browser_figures(home: Path, pid: str, cold: bool = True) -> dict[str, Any]:
    """First paint, all rows, and frame times while panning and zooming (see the module docstring)."""
    from playwright.sync_api import sync_playwright
    from tests.ui.harness import launch_chromium, missing, ui_server

    why = missing()
    if why:
        return {"skipped": why}
    out: dict[str, Any] = {}
    tl_js = "window.__hyperscope.timeline"
    with sync_playwright() as p:
        browser = launch_chromium(p)
        for label in ("cold", "warm") if cold else ("warm",):
            started = time.perf_counter()
            with ui_server(home) as url:
                out[f"server_up_{label}_s"] = time.perf_counter() - started
                page = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
                page.goto(f"{url}/#/timeline/{pid}")
                page.wait_for_function(READY, timeout=600_000)
                out[f"first_paint_{label}_ms"] = page.evaluate(BROWSER_FIGURES)["now"]
                out[f"phases_{label}"] = page.evaluate(PHASES)
                if label == "cold":
                    page.context.close()
                    continue
                before = page.evaluate(BROWSER_FIGURES)
                page.evaluate(f"() => {tl_js}.openAll()")
                page.wait_for_function(
                    f"(n) => {tl_js}.state.tiles > n && !{tl_js}.state.loading",
                    arg=before["tiles"],
                    timeout=60_000,
                )
                out["all_rows_ms"] = page.evaluate(BROWSER_FIGURES)["now"] - before["now"]
                for view, share in PAN_WINDOWS:
                    out[f"pan {view}"] = pan_frames(page, share)
                    out[f"zoom {view}"] = zoom_frames(page, share)
                page.context.close()
        browser.close()
    return out


def register(home: Path, profile_path: Path) -> str:
    """Enter a written profile in a store's catalog (moved under ``home``); its id."""
    from hyperscope import Store
    from hyperscope.schema.layout import profile_dir
    from hyperscope.store.catalog import JobStatus, ProfileRef
    from hyperscope.store.profile import Profile, new_profile_id

    with Store(home) as store:
        pid = new_profile_id()
        target = profile_dir(home, pid)
        target.parent.mkdir(parents=True, exist_ok=True)
        profile_path.rename(target)
        meta = Profile.open(target).meta
        ref = ProfileRef(id=pid, job_id=0, created_ns=meta.created_ns, source=meta.source, events=meta.events,
                         ranks=len(meta.ranks), bytes=0, origin="bench/timeline_tiles.py")  # fmt: skip
        store.catalog.add_profile(
            "bench-timeline", ref, status=JobStatus.COMPLETED, nodes=meta.nodes, created_ns=meta.created_ns
        )
    return pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=float, nargs="+", default=[10.0], help="millions of events")
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--positions", type=int, default=5)
    parser.add_argument("--browser", action="store_true", help="also first paint and frame times (chromium)")
    parser.add_argument(
        "--warm-only", action="store_true", help="with --browser: only the first paint with the index stored"
    )
    parser.add_argument(
        "--keep", type=Path, help="keep the generated profiles in this folder and reuse them in later runs"
    )
    parser.add_argument(
        "--exact", action="store_true",
        help="ask every tile's window as it is (not snapped to the overview's cells, as the UI asks)",
    )  # fmt: skip
    parser.add_argument(
        "--npy-max", type=float, default=10.0,
        help="millions of events up to which the plain .npy layout is built and asked the same tiles",
    )  # fmt: skip
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hyperscope-bench-timeline-") as tmp:
        root = Path(tmp)
        bpe = json_bytes_per_event(root)
        results = []
        for m in args.events:
            r = run(m, args.width, args.positions, root, args.keep, m <= args.npy_max, not args.exact)
            r["kineto_json_bytes_est"] = r["events"] * bpe
            results.append(r)
            print(
                f"\n{r['events']:,} events, {r['rows']} rows: generated in {r['generate_s']:.1f} s, "
                f"index built in {r['index_s']:.1f} s ({r['index_bytes'] / 1e6:.1f} MB in blocks, "
                f"{r['overview_bytes'] / 1e6:.2f} MB of them the overview, beside "
                f"{r['parquet_bytes'] / 1e6:.0f} MB "
                f"of Parquet; as .npy {r['npy_bytes'] / 1e6:.0f} MB in {r['npy_s']:.1f} s); as Kineto JSON ≈ "
                f"{r['kineto_json_bytes_est'] / 1e9:.2f} GB ({bpe:.0f} B/event); "
                f"peak RSS {r['peak_rss_mb']['generate']:.0f} MiB after generating, "
                f"{r['peak_rss_mb']['index']:.0f} after the index, "
                f"{r['peak_rss_mb']['tiles']:.0f} at the end; "
                f"decoded blocks kept at the end: "
                f"{r['block_cache_bytes'] / 2**20:.0f} MiB (bound {_blocks.cache_bytes() / 2**20:.0f} MiB); "
                f"windows {'as asked' if args.exact else 'snapped to the overview (as the UI asks)'}; "
                f"load average {Path('/proc/loadavg').read_text().split()[0]}"
            )
            target = TARGET_MS.get(round(m))
            print_table(
                [
                    "window",
                    "median ms",
                    "max ms",
                    "CPU ms",
                    "CPU max",
                    "npy median",
                    "npy max",
                    "npy CPU",
                    "max KB",
                    "events",
                    "bins",
                    "target",
                ],
                [
                    [
                        tl_fmt(t["window_ns"]) + (" again" if t.get("again") else ""),
                        round(t["median_ms"], 1),
                        round(t["max_ms"], 1),
                        round(t["cpu_median_ms"], 1),
                        round(t["cpu_max_ms"], 1),
                        _ms(t["npy_median_ms"]),
                        _ms(t["npy_max_ms"]),
                        _ms(t["npy_cpu_median_ms"]),
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
            print_targets(r, target)
        browser: dict[str, Any] | None = None
        if args.browser:
            import shutil

            first = root / f"p{args.events[0]:g}"
            home = root / "home"
            if not args.warm_only:
                for old in (first / "derived").glob("timeline-*"):  # cold: the server builds it
                    shutil.rmtree(old)
            pid = register(home, first)
            keep_dashboard(home, pid)
            browser = browser_figures(home, pid, cold=not args.warm_only)
            print_browser(browser)
    write_results(
        "timeline_tiles",
        {"width": args.width, "json_bytes_per_event": bpe, "runs": results, "browser": browser},
    )


def keep_dashboard(home: Path, pid: str) -> None:
    """The profile's whole-run dashboard kept beside it, as ``hyperscope import`` leaves it: else a
    fresh server's prewarm computes it (seconds of DuckDB on every core at 10M events) during the
    first paint being measured."""
    from hyperscope.analysis.stored import precompute_dashboard
    from hyperscope.schema.layout import profile_dir

    precompute_dashboard(Profile.open(profile_dir(home, pid)))


def print_targets(r: dict[str, Any], target: float | None) -> None:
    """The targets of this size: every tile's time (and, as load inflates it less, its CPU) and
    size."""
    if target is None:
        return
    slow = max(r["tiles"], key=lambda t: t["max_ms"])
    cpu = max(r["tiles"], key=lambda t: t["cpu_median_ms"])
    big = max(t["max_bytes"] for t in r["tiles"])
    window = tl_fmt(slow["window_ns"]) + (" again" if slow.get("again") else "")
    print_table(
        ["target", "measured", ""],
        [
            [f"every tile ≤ {target:g} ms", f"slowest {slow['max_ms']:.1f} ms ({window})",
             "met" if slow["max_ms"] <= target else "missed"],
            [f"every tile's CPU ≤ {target:g} ms (median per window)",
             f"highest {cpu['cpu_median_ms']:.1f} ms ({tl_fmt(cpu['window_ns'])})",
             "met" if cpu["cpu_median_ms"] <= target else "missed"],
            ["every tile ≤ 2 MB", f"largest {big / 1e6:.2f} MB", "met" if big <= TARGET_BYTES else "missed"],
        ],
    )  # fmt: skip


def print_browser(b: dict[str, Any]) -> None:
    if "skipped" in b:
        print(f"\nbrowser: skipped ({b['skipped']})")
        return
    cold = b.get("first_paint_cold_ms")
    print(
        f"\nbrowser: first paint {'-' if cold is None else f'{cold:.0f}'} ms (index cold), "
        f"{b['first_paint_warm_ms']:.0f} ms (warm; {_phases(b.get('phases_warm'))}, the server up in "
        f"{b['server_up_warm_s']:.1f} s); all rows {b['all_rows_ms']:.0f} ms; "
        f"target first paint ≤ 1 s (warm, 10M): {'met' if b['first_paint_warm_ms'] <= 1000 else 'missed'}"
    )
    rows = []
    for gesture in ("pan", "zoom"):
        for view, _ in PAN_WINDOWS:
            f = b[f"{gesture} {view}"]
            rows.append(
                [
                    f"{gesture} {view}",
                    f["frames"],
                    " ".join(f"{k} {n}" for k, n in f["kinds"].items()),
                    f"{f['visible_min']:,}-{f['visible_max']:,}",
                    f"{f['events_max']:,}",
                    round(f["median_ms"], 1),
                    round(f["max_ms"], 1),
                    f["worst_kind"],
                    "met" if f["max_ms"] <= 16 else "missed",
                    _ms(f.get("cpu_median_ms")),
                    _ms(f.get("cpu_max_ms")),
                    "-" if f.get("cpu_max_ms") is None else "met" if f["cpu_max_ms"] <= 16 else "missed",
                ]
            )
    print_table(
        ["gesture, window", "frames", "kinds", "visible events/frame", "drawn events", "median ms", "max ms",
         "worst", "≤ 16 ms", "CPU median", "CPU max", "CPU ≤ 16 ms"],
        rows,
    )  # fmt: skip
    worst = max((b[f"{g} {v}"] for g in ("pan", "zoom") for v, _ in PAN_WINDOWS), key=lambda f: f["max_ms"])
    cpu = [b[f"{g} {v}"].get("cpu_max_ms") for g in ("pan", "zoom") for v, _ in PAN_WINDOWS]
    print_table(
        ["target", "measured", ""],
        [
            ["every pan and zoom frame ≤ 16 ms (script time of the frame, wall)",
             f"slowest {worst['max_ms']:.1f} ms", "met" if worst["max_ms"] <= 16 else "missed"],
            ["every pan and zoom frame's CPU ≤ 16 ms (main thread, Chromium's trace)",
             "-" if None in cpu else f"highest {max(c for c in cpu if c is not None):.1f} ms",
             "-" if None in cpu else "met" if max(c for c in cpu if c is not None) <= 16 else "missed"],
        ],
    )  # fmt: skip


def _peak_rss() -> float:
    """This process's peak resident memory so far, in MiB (DuckDB's memory included)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _phases(p: dict[str, Any] | None) -> str:
    """The first paint's phases as one line (see ``PHASES``)."""
    if not p:
        return "no timings"
    spans = ", ".join(f"{k} {p[k][0]}-{p[k][1]}" for k in ("script", "profile", "rows", "tile") if k in p)
    return f"ms from navigation: page's first byte {p.get('page')}, {spans}"


def _ms(v: float | None) -> float | str:
    return "-" if v is None else round(v, 1)


def tl_fmt(ns: int) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:g} {unit}"
    return f"{ns} ns"


if __name__ == "__main__":
    main()
