"""The timeline's rows in Debian's chromium against the real ``hyperscope ui``, on a small Kineto-like
trace written here: a host thread nested 32 levels deep (every level shown, the deepest one
clickable at its own lane), a launch → kernel arrow that goes to a closed GPU group's line when its
rows are hidden, and instants drawn as marks (hover and click show them), global ones on a row that
says so."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hyperscope import Store
from tests.ui.conftest import screenshot
from tests.ui.pages import TIMEOUT_MS
from tests.ui.test_timeline import TL, Served, _serve, child_ids, click_row, open_timeline, state, wait_tile

pytestmark = pytest.mark.browser

NEST = 30  # python functions nested under the step: levels 1..30; the launch is at 31
HOST = 1000  # pid = tid of the host thread
STREAM = 7


def _trace(path: Path) -> None:
    """One rank: a step, 30 nested python functions, a launch in the deepest and its kernel, and
    instants on the host thread (``marker_b`` three times within a microsecond)."""

    def x(cat: str, name: str, ts: float, dur: float, pid: int, tid: int, **args: Any) -> dict[str, Any]:
        return {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": pid,
            "tid": tid,
            "ts": ts,
            "dur": dur,
            "args": args,
        }

    def instant(name: str, ts: float) -> dict[str, Any]:
        return {
            "ph": "i",
            "s": "t",
            "cat": "cpu_instant_event",
            "name": name,
            "pid": HOST,
            "tid": HOST,
            "ts": ts,
        }

    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": HOST, "tid": 0, "args": {"name": "python"}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": HOST, "tid": HOST, "args": {"name": "thread 0"}},
        {"name": "process_labels", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        x("user_annotation", "ProfilerStep#0", 1000, 5000, HOST, HOST),
    ]
    for k in range(NEST):
        events.append(x("python_function", f"py_level_{k + 1}", 1100 + 10 * k, 4000 - 20 * k, HOST, HOST))
    events += [
        x("cuda_runtime", "cudaLaunchKernel", 2000, 40, HOST, HOST, correlation=1),
        {"ph": "s", "id": 1, "pid": HOST, "tid": HOST, "ts": 2000, "cat": "ac2g", "name": "ac2g"},
        x("kernel", "deep_kernel", 2100, 600, 0, STREAM, device=0, stream=STREAM, correlation=1),
        {"ph": "f", "id": 1, "pid": 0, "tid": STREAM, "ts": 2100, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        instant("marker_a", 1500),
        instant("marker_b", 3000),
        instant("marker_b", 3000.2),
        instant("marker_b", 3000.4),
        instant("marker_a", 4500),
    ]
    for k, total in enumerate([4096, 1_500_000, 6_000_000, 2_000_000]):  # the CUDA allocator's totals
        events.append({
            "ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": HOST, "tid": HOST,
            "ts": 1200 + 900 * k, "args": {"Total Allocated": total, "Total Reserved": 8_000_000,
                                           "Bytes": 1, "Addr": k, "Device Id": 0, "Device Type": 1},
        })  # fmt: skip
    header = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_045_870_592}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "host_name": "node-a",
        "traceEvents": events,
    }
    path.write_text(json.dumps(header))


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("tl-ui-deep")
    trace = root / "rank0.pt.trace.json"
    _trace(trace)
    with Store(root / "home") as store:
        store.import_traces([trace], "deep-nesting")
    yield from _serve(root / "home", "deep-nesting")


def geometry(pg: Any, row: str, depth: int) -> dict[str, float]:
    """Where the page draws nesting level ``depth`` of ``row``: canvas y of the lane's top, height."""
    return dict(
        pg.evaluate(
            f"([r, d]) => ({{ top: {TL}.rowY(r) + {TL}.laneTop(d), h: {TL}.laneHeight(d) }})", [row, depth]
        )
    )


def find(pg: Any, name: str) -> dict[str, Any]:
    """The first event of the shown tile called ``name``: id, depth, row, x of its middle."""
    got = pg.evaluate(
        f"""(n) => {{ const t = {TL}.state.tile, k = t.names.indexOf(n);
            for (let i = 0; i < t.ts.length; i++) if (t.name[i] === k)
              return {{ id: t.id[i], depth: t.depth[i], row: t.rows[t.row[i]],
                        x: {TL}.xOf(t.ts[i] + Math.min(t.dur[i] / 2, 300)) }};
            return null; }}""",
        name,
    )
    assert got is not None, f"{name} is not in the tile"
    return dict(got)


def pixel(pg: Any, x: float, y: float) -> list[int]:
    """The canvas's colour at css px (x, y)."""
    return list(
        pg.evaluate(
            """([x, y]) => { const c = document.getElementById('tl-canvas'), d = window.devicePixelRatio || 1;
               const px = c.getContext('2d').getImageData(Math.round(x * d), Math.round(y * d), 1, 1);
               return Array.from(px.data); }""",
            [x, y],
        )
    )


def open_gpu(pg: Any) -> tuple[str, str, str]:
    node = child_ids(pg, "job")[0]
    click_row(pg, node)
    gpu = next(i for i in child_ids(pg, node) if i.startswith("gpu/"))
    click_row(pg, gpu)
    kids = child_ids(pg, gpu)
    host = next(i for i in kids if i.startswith("host/"))
    stream = next(i for i in kids if i.startswith("stream/"))
    # a tile asked before the GPU opened may land after the click: wait for one with its rows
    pg.wait_for_function(
        f"""(ids) => {{ const s = {TL}.state;
              return !s.loading && s.tile && ids.every(id => s.tile.rows.includes(id)); }}""",
        arg=[host, stream],
        timeout=TIMEOUT_MS,
    )
    return gpu, host, stream


def click_event(pg: Any, ev: dict[str, Any]) -> None:
    g = geometry(pg, ev["row"], ev["depth"])
    box = pg.locator("#tl-canvas").bounding_box()
    assert pixel(pg, ev["x"], g["top"] + g["h"] / 2)[:3] not in ([255, 255, 255], [238, 241, 246])  # drawn
    pg.mouse.click(box["x"] + ev["x"], box["y"] + g["top"] + g["h"] / 2)
    pg.wait_for_function(f"(id) => {TL}.state.selected && {TL}.state.selected.id === id", arg=ev["id"])


def test_every_level_shown_and_clickable(page: Any, deep: Served) -> None:
    open_timeline(page, deep)
    _, host, _ = open_gpu(page)
    row = state(page, f"s.layout.find(r => r.id === {json.dumps(host)})")
    assert row["lanes"] == NEST + 2  # the step, 30 functions, the launch: none folded into another
    deepest = find(page, f"py_level_{NEST}")
    assert deepest["depth"] == NEST
    launch = find(page, "cudaLaunchKernel")
    assert launch["depth"] == NEST + 1
    # deeper lanes are thinner, and the row holds them all
    assert geometry(page, host, NEST)["h"] < geometry(page, host, 0)["h"]
    bottom = geometry(page, host, NEST + 1)
    assert bottom["top"] + bottom["h"] <= state(page, f"{TL}.rowY({json.dumps(host)}) + {row['h']}")
    screenshot(page, "timeline-deep-rows")
    for ev in (deepest, launch, find(page, f"py_level_{NEST - 1}")):
        click_event(page, ev)
        assert state(page, "s.selected.fields.name") in page.inner_text("#tl-details")
    assert state(page, "s.selected.fields.name") == f"py_level_{NEST - 1}"


def test_arrow_into_closed_group(page: Any, deep: Served) -> None:
    open_timeline(page, deep)
    gpu, host, stream = open_gpu(page)
    kernel = find(page, "deep_kernel")
    click_event(page, kernel)
    page.wait_for_function(f"() => {TL}.state.arrows.length === 1")
    a = state(page, "s.arrows[0]")
    launch = geometry(page, host, NEST + 1)
    k = geometry(page, stream, kernel["depth"])
    assert not a["dashed"]
    assert a["y0"] == pytest.approx(launch["top"] + launch["h"]) and a["y1"] == pytest.approx(k["top"])
    # close the GPU: both ends hidden, the arrow goes to the group's line at the events' times, dashed
    before = state(page, "s.tiles")
    page.evaluate(f"(id) => {TL}.toggle(id, false)", gpu)
    wait_tile(page, before)
    page.wait_for_timeout(100)
    a = state(page, "s.arrows[0]")
    line = state(page, f"{TL}.rowY({json.dumps(gpu)}) + 11")
    assert a["dashed"] and a["y0"] == pytest.approx(line) and a["y1"] == pytest.approx(line)
    assert a["x1"] == pytest.approx(
        page.evaluate(f"(t) => {TL}.xOf(t)", state(page, f"s.tile.ts[s.tile.id.indexOf({kernel['id']})]"))
    )
    screenshot(page, "timeline-arrow-closed-group")
    # all arrows, nothing selected, the node closed too: the pair is drawn to the node's line
    page.evaluate(f"() => {{ {TL}.state.selected = null; }}")
    before = state(page, "s.tiles")
    page.check("#tl-all-arrows")
    wait_tile(page, before)
    page.wait_for_function(f"() => {TL}.state.flows.length === 1", timeout=TIMEOUT_MS)
    node = child_ids(page, "job")[0]
    before = state(page, "s.tiles")
    page.evaluate(f"(id) => {TL}.toggle(id, false)", node)
    wait_tile(page, before)
    page.wait_for_function(
        f"() => {TL}.state.flows.length === 1 && {TL}.state.arrows.length === 1", timeout=TIMEOUT_MS
    )
    a = state(page, "s.arrows[0]")
    line = state(page, f"{TL}.rowY({json.dumps(node)}) + 11")
    assert a["dashed"] and a["y0"] == pytest.approx(line) and a["y1"] == pytest.approx(line)
    screenshot(page, "timeline-arrows-closed-node")


def test_instant_marks(page: Any, deep: Served) -> None:
    open_timeline(page, deep)
    _, host, _ = open_gpu(page)
    marks = page.evaluate(
        f"""() => {{ const t = {TL}.state.tile; return Array.from(t.mTs, (ts, i) => ({{
              ts, count: t.mCount[i], name: t.names[t.mName[i]], id: t.mId[i], row: t.rows[t.mRow[i]],
              x: {TL}.xOf(ts) }})); }}"""
    )
    # the whole run: 5 ms over ~1100 px, so marker_b's three instants within 0.4 µs share a column
    assert sorted((m["name"], m["count"]) for m in marks) == [
        ("marker_a", 1),
        ("marker_a", 1),
        ("marker_b", 3),
    ]
    assert all(m["row"] == host for m in marks)
    dense = next(m for m in marks if m["name"] == "marker_b")
    top = state(page, f"{TL}.rowY({json.dumps(host)})")
    # drawn: the marker's colour at its tip, not the row's background
    assert pixel(page, dense["x"], top + 3)[:3] not in ([255, 255, 255], [238, 241, 246])
    box = page.locator("#tl-canvas").bounding_box()
    page.mouse.move(box["x"] + dense["x"], box["y"] + top + 3)
    page.wait_for_function("() => document.getElementById('tl-canvas').title.includes('marker_b')")
    assert "3 under this mark" in page.get_attribute("#tl-canvas", "title")
    page.mouse.click(box["x"] + dense["x"], box["y"] + top + 3)
    page.wait_for_function(f"(id) => {TL}.state.selected && {TL}.state.selected.id === id", arg=dense["id"])
    details = page.inner_text("#tl-details")
    assert "marker_b" in details and "instant" in details and "3 under this mark" in details
    assert state(page, "s.selected.fields.ph") == "i"
    screenshot(page, "timeline-instant-marks")
    # a single one; then a search for its name outlines it
    single = next(m for m in marks if m["name"] == "marker_a")
    page.mouse.click(box["x"] + single["x"] + 2, box["y"] + top + 2)
    page.wait_for_function(f"(id) => {TL}.state.selected && {TL}.state.selected.id === id", arg=single["id"])
    assert "under this mark" not in page.inner_text("#tl-details")
    before = state(page, "s.tiles")
    page.fill("#tl-search", "marker_a")
    page.press("#tl-search", "Enter")
    # both found, the first selected and brought into view, its mark outlined in yellow
    page.wait_for_function(
        f"() => {{ const s = {TL}.state;"
        " return s.matchTotal === 2 && s.selected?.fields.name === 'marker_a'; }",
        timeout=TIMEOUT_MS,
    )
    wait_tile(page, before)
    page.wait_for_timeout(200)  # a frame
    first = min((m for m in marks if m["name"] == "marker_a"), key=lambda m: m["ts"])
    assert state(page, "s.selected.id") == first["id"]
    x = page.evaluate(f"(t) => {TL}.xOf(t)", first["ts"])
    near = [pixel(page, x + dx, top + 1 + dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1)]
    assert any(r > 200 and g > 150 and b < 100 for r, g, b, _ in near), near
    screenshot(page, "timeline-instant-search")


def test_memory_track(page: Any, deep: Served) -> None:
    """The allocator's ``[memory]`` totals: a curve under the GPU, its scale's top in the gutter."""
    open_timeline(page, deep)
    gpu, _, _ = open_gpu(page)
    kids = child_ids(page, gpu)
    mem = "mem/0/1/0/allocated"
    assert kids[: kids.index(mem) + 2][-2:] == [mem, "mem/0/1/0/reserved"]
    page.wait_for_function(f"(id) => {TL}.state.tile && {TL}.state.tile.rows.includes(id)", arg=mem)
    curve = page.evaluate(
        f"""(id) => {{ const t = {TL}.state.tile, k = t.rows.indexOf(id);
              return Array.from(t.sVal).filter((v, i) => t.sRow[i] === k); }}""",
        mem,
    )
    assert curve == [4096, 1_500_000, 6_000_000, 2_000_000]
    page.wait_for_function(f"() => {TL}.scales()[{json.dumps(mem)}] !== undefined")
    scales = page.evaluate(f"() => {TL}.scales()")
    assert scales[mem] == "top 6 MB" and scales["mem/0/1/0/reserved"] == "top 8 MB"
    # the peak fills its row: at the peak's time, just under the row's top, the curve's green
    peak_x = page.evaluate(
        f"""(id) => {{ const t = {TL}.state.tile, k = t.rows.indexOf(id);
              for (let i = 0; i < t.sTs.length; i++) if (t.sRow[i] === k && t.sVal[i] === 6000000)
                return {TL}.xOf(t.sTs[i]) + 3; }}""",
        mem,
    )
    top = state(page, f"{TL}.rowY({json.dumps(mem)})")
    r, g, b = pixel(page, peak_x, top + 6)[:3]
    assert g > r and g > b, (r, g, b)
    screenshot(page, "timeline-memory-track")


def test_index_built_on_first_look_shows_progress(page: Any, tmp_path: Path) -> None:
    """A profile written through the Python API has no index yet: the page says it is being built
    (the server answers 202 with its progress: no failed request, so nothing in the console),
    then draws the rows."""
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    trace = tmp_path / "rank0.pt.trace.json"
    _trace(trace)
    with Store(tmp_path / "home") as store:
        store.import_traces([trace], "first-look")
    for served in _serve(tmp_path / "home", "first-look"):
        page.goto(f"{served.url}/#/timeline/{served.profile_id}")
        page.wait_for_function(f"() => {TL} && {TL}.state.buildingSeen > 0", timeout=TIMEOUT_MS)
        page.wait_for_function(
            f"() => {TL}.state.rows !== null && {TL}.state.building === null", timeout=TIMEOUT_MS
        )
        wait_tile(page, 0)
        assert child_ids(page, "job") == ["node/node-a"]
        assert "building" not in page.inner_text("#timeline")
        seen = page.evaluate(f"{TL}.state.buildingLog")
        assert seen and seen == sorted(seen) and all(0 <= x <= 1 for x in seen)
    assert not console, console


def test_zoom_burst_ends_on_the_layer_of_its_last_view(page: Any, deep: Served) -> None:
    """Each frame of a wheel zoom asks for a new scale, and a layer may take several frames to draw:
    the layer begun is finished (one begun anew at every frame would never be shown), then one more
    is drawn for the view the burst ended on, so the picture does not stay a stretched preview."""
    open_timeline(page, deep)
    open_gpu(page)
    # no new tile while zooming (it would bring a fresh layer for the view of its own): the layers
    # are all of the tile shown, one phase of drawing per frame
    page.route("**/timeline/tile?*", lambda route: None)
    tiles = state(page, "s.tiles")
    # every scale begun at once (no settling: test_timeline_frames.py has the zoom that waits)
    page.evaluate(f"() => {{ {TL}.sliceMs(0); {TL}.settleMs(0); {TL}.state.frameLog = []; }}")
    # one wheel turn per frame, so that the burst ends while a layer is being drawn
    page.evaluate(
        """async () => { const c = document.querySelector('#tl-canvas'), r = c.getBoundingClientRect();
            const at = { clientX: r.left + r.width / 2, clientY: r.top + 60, cancelable: true };
            for (let i = 0; i < 12; i++) {
              await new Promise(requestAnimationFrame);
              c.dispatchEvent(new WheelEvent('wheel', { deltaY: -80, ...at }));
            } }"""
    )
    page.wait_for_function(f"() => {TL}.settled()", timeout=TIMEOUT_MS)
    kinds = page.evaluate(f"() => {TL}.state.frameLog.map(f => f.kind)")
    assert "slice" in kinds and "draw" in kinds, kinds  # layers drawn over several frames, and shown
    assert state(page, "s.tiles") == tiles
    page.evaluate(f"() => {{ {TL}.sliceMs(4); {TL}.settleMs(100); {TL}.state.frameLog = null; }}")


def test_global_instants_sit_on_a_row_that_says_so(page: Any, tmp_path: Path) -> None:
    """Kineto's global instants ("Iteration Start", scope "g") belong to no thread: drawn as marks on
    a row "host · global instants (no thread)", never "host · thread -1"."""
    trace = tmp_path / "rank0.pt.trace.json"
    _trace(trace)
    doc = json.loads(trace.read_text())
    doc["traceEvents"].append(
        {
            "ph": "i",
            "s": "g",
            "name": "Iteration Start: PyTorch Profiler",
            "pid": "Spans",
            "tid": "x",
            "ts": 2500,
        }
    )
    trace.write_text(json.dumps(doc))
    with Store(tmp_path / "home") as store:
        store.import_traces([trace], "globals")
    for served in _serve(tmp_path / "home", "globals"):
        open_timeline(page, served)
        page.evaluate(f"() => {TL}.openAll()")
        page.wait_for_function(
            f"() => !{TL}.state.loading && {TL}.state.tile"
            f" && {TL}.state.tile.rows.some(r => r.endsWith('/-1/-1'))",
            timeout=TIMEOUT_MS,
        )
        labels = dict(page.evaluate(f"() => {TL}.state.layout.map(r => [r.id, r.label])"))
        (row,) = [i for i in labels if i.startswith("host/") and i.endswith("/-1/-1")]
        assert labels[row] == "host · global instants (no thread)"
        assert not any("thread -1" in str(v) for v in labels.values())
        marks = page.evaluate(
            f"""() => {{ const t = {TL}.state.tile;
                  return Array.from(t.mName, (n, i) => [t.names[n], t.rows[t.mRow[i]]]); }}"""
        )
        assert ["Iteration Start: PyTorch Profiler", row] in marks
        screenshot(page, "timeline-global-instants")
