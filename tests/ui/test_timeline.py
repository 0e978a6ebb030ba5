"""The timeline in Debian's chromium against the real ``hyperscope ui``: expand a node and a GPU,
zoom to a step, click a kernel, find its launch in the connections tab and jump to it, search a
kernel name, and check the drawn tile against the engine over the store."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hyperscope import Store
from hyperscope import timeline as tl
from hyperscope.store.profile import Profile
from tests.conftest import REPO, shared_trace_set
from tests.ui.conftest import screenshot
from tests.ui.harness import missing, ui_server
from tests.ui.pages import TIMEOUT_MS

pytestmark = pytest.mark.browser

TL = "window.__hyperscope.timeline"


@dataclass(frozen=True)
class Served:
    url: str
    profile: Profile
    profile_id: str


def _serve(home: Path, job: str) -> Iterator[Served]:
    if missing():
        pytest.skip(missing() or "")
    with Store(home) as store:
        profile = store.profile(job)
    with ui_server(home) as url:
        yield Served(url, profile, profile.meta.profile_id)


@pytest.fixture(scope="module")
def h200(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("tl-ui-h200") / "home"
    shutil.copytree(REPO / "tests" / "data" / "h200_capture", home)
    yield from _serve(home, "h200-transformer")


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The 8-rank DLRM set of ../shared/traces (skipped where absent)."""
    files = shared_trace_set("dlrm")
    home = tmp_path_factory.mktemp("tl-ui-dlrm") / "home"
    with Store(home) as store:
        store.import_traces(files, "dlrm-kineto-8ranks")
    yield from _serve(home, "dlrm-kineto-8ranks")


def state(pg: Any, expr: str) -> Any:
    return pg.evaluate(f"() => {{ const s = {TL}.state; return {expr}; }}")


def wait_tile(pg: Any, before: int) -> None:
    """Until a tile newer than ``before`` is shown and no other is on its way."""
    pg.wait_for_function(
        f"(n) => {TL} && {TL}.state.tiles > n && !{TL}.state.loading", arg=before, timeout=TIMEOUT_MS
    )


def click_row(pg: Any, row_id: str) -> None:
    """Open a group by a click on its line; one the first look opened already stays open."""
    if pg.evaluate(f"(id) => {TL}.state.layout.some(r => r.id === id && r.open)", row_id):
        return
    before = state(pg, "s.tiles")
    y = pg.evaluate(f"(id) => {TL}.rowY(id)", row_id)
    assert y is not None, row_id
    box = pg.locator("#tl-canvas").bounding_box()
    pg.mouse.click(box["x"] + 30, box["y"] + y + 10)
    pg.wait_for_function(
        f"(id) => {TL}.state.layout.some(r => r.id === id && r.open)", arg=row_id, timeout=TIMEOUT_MS
    )
    wait_tile(pg, before)


def open_timeline(pg: Any, served: Served) -> None:
    pg.goto(f"{served.url}/#/timeline/{served.profile_id}")
    pg.wait_for_selector("#timeline:not([hidden])")
    pg.wait_for_function(
        f"() => {TL}.state.rows !== null && {TL}.state.layout.length > 0", timeout=TIMEOUT_MS
    )
    wait_tile(pg, 0)
    assert pg.get_attribute("a.tab[data-route=timeline]", "class") == "tab active"


def child_ids(pg: Any, parent: str) -> list[str]:
    return list(
        pg.evaluate(
            f"""(p) => {{ const find = (r) => r.id === p ? r : (r.children || []).map(find).find(Boolean);
                 return (find({TL}.state.rows.root).children || []).map(c => c.id); }}""",
            parent,
        )
    )


def check_tile_matches_store(pg: Any, served: Served) -> None:
    # The tile and its request read in one evaluation: read apart, a tile that arrived between
    # the two reads (a jump to the next match opens other rows) was compared with the old request.
    pg.wait_for_function(f"() => {TL}.state.tile && !{TL}.state.loading", timeout=TIMEOUT_MS)
    tile = "{id: Array.from(s.tile.id), busy: Array.from(s.tile.binBusy), rows: s.tile.rows}"
    req, got = state(pg, f"[s.lastRequest, {tile}]")
    events = [r for r in req["rows"] if r.startswith(("host/", "stream/"))]
    want = tl.tile(tl.load(served.profile), events, int(req["t0_ns"]), int(req["t1_ns"]), req["width"])
    assert got["rows"][: len(events)] == events
    assert sorted(int(x) for x in got["id"]) == sorted(int(x) for x in want.id)
    assert sum(got["busy"]) == int(np.sum(want.bin_busy))


def kernel_flow(pg: Any, served: Served, streams: list[str], step: str, search: str, tag: str) -> None:
    # the step list says how many steps there are at once, and gets their options at its first
    # use (keyboard focus here; a pointer press does the same), before it opens (steplist.ts)
    names = {s["name"] for s in state(pg, "s.rows.steps")}
    options = "() => document.querySelectorAll('#tl-steps option').length"
    assert pg.locator("#tl-steps option").first.text_content() == f"zoom to step… ({len(names)})"
    assert pg.evaluate(options) == 1
    pg.focus("#tl-steps")
    assert pg.evaluate(options) == len(names) + 1
    before = state(pg, "s.tiles")
    pg.select_option("#tl-steps", step)
    wait_tile(pg, before)
    steps = [s for s in state(pg, "s.rows.steps") if s["name"] == step]
    t0 = min(int(s["ts_ns"]) for s in steps) - int(state(pg, "s.origin.toString()"))
    assert state(pg, "s.t0") <= t0 <= state(pg, "s.t1")
    check_tile_matches_store(pg, served)
    screenshot(pg, f"timeline-{tag}-step")
    # click the widest kernel drawn on the streams
    target = pg.evaluate(
        f"""(rows) => {{ const s = {TL}.state, t = s.tile, ks = rows.map(r => t.rows.indexOf(r));
            let best = -1;
            for (let i = 0; i < t.ts.length; i++)
              if (ks.includes(t.row[i]) && t.kinds[t.kind[i]] === 'kernel' && t.corr[i] >= 0
                  && (best < 0 || t.dur[i] > t.dur[best]))
                best = i;
            if (best < 0) return null;
            return {{ id: t.id[best], x: {TL}.xOf(t.ts[best] + t.dur[best] / 2), depth: t.depth[best],
                      corr: t.corr[best], name: t.names[t.name[best]], row: t.rows[t.row[best]] }}; }}""",
        streams,
    )
    assert target is not None, f"no kernel drawn on {streams}"
    stream = target["row"]
    box = pg.locator("#tl-canvas").bounding_box()
    y = pg.evaluate(
        f"([id, d]) => {TL}.rowY(id) + {TL}.laneTop(d) + {TL}.laneHeight(d) / 2", [stream, target["depth"]]
    )
    pg.mouse.click(box["x"] + target["x"], box["y"] + y)
    pg.wait_for_function(f"(id) => {TL}.state.selected && {TL}.state.selected.id === id", arg=target["id"])
    assert target["name"] in pg.inner_text("#tl-details")
    # its launch, in the connections tab, is the correlation join of the store
    pg.click("#tl-tab-connections")
    launch = pg.locator("#tl-links li[data-role=launch]")
    rank = state(pg, "s.selected.fields.rank")
    (want_name, want_ts) = (
        served.profile.connect()
        .execute(
            "SELECT name, ts_ns FROM events WHERE rank = $r AND correlation = $c "
            "AND kind IN ('runtime', 'driver') AND ph = 'X'",
            {"r": rank, "c": int(target["corr"])},
        )
        .fetchone()
    )  # type: ignore[misc]
    assert want_name in launch.inner_text()
    screenshot(pg, f"timeline-{tag}-kernel")
    before = state(pg, "s.tiles")
    launch.locator("button.tl-jump").click()
    pg.wait_for_function(f"() => {TL}.state.selected && {TL}.state.selected.fields.kind !== 'kernel'")
    wait_tile(pg, before)
    assert state(pg, "s.selected.fields.ts_ns") == str(want_ts)
    assert state(pg, "s.selected.row").startswith("host/")
    rel = want_ts - int(state(pg, "s.origin.toString()"))
    assert state(pg, "s.t0") <= rel <= state(pg, "s.t1")
    assert state(pg, "s.selected.links.some(l => l.role === 'kernel')")
    screenshot(pg, f"timeline-{tag}-launch")
    # keys: W zooms in, D pans, F fits the selection
    span = state(pg, "s.t1 - s.t0")
    pg.focus("#tl-canvas")
    pg.keyboard.press("w")
    assert state(pg, "s.t1 - s.t0") < span
    t0 = state(pg, "s.t0")
    pg.keyboard.press("d")
    assert state(pg, "s.t0") > t0
    pg.keyboard.press("f")
    assert state(pg, "s.t0") <= rel <= state(pg, "s.t1")
    # search: every match counted, the first selected and in view
    before = state(pg, "s.tiles")
    pg.fill("#tl-search", search)
    pg.press("#tl-search", "Enter")
    pg.wait_for_function(
        f"(q) => {TL}.state.selected && String({TL}.state.selected.fields.name).toLowerCase().includes(q)",
        arg=search.lower(),
        timeout=TIMEOUT_MS,
    )
    wait_tile(pg, before)
    (total,) = (
        served.profile.connect()
        .execute(
            "SELECT count(*) FROM events WHERE ph = 'X' AND name ILIKE $q AND kind IN "
            "('step','annotation','python','cpu_op','runtime','driver','kernel','memcpy','memset','sync','gpu_annotation')",
            {"q": f"%{search}%"},
        )
        .fetchone()
    )  # type: ignore[misc]
    assert state(pg, "s.matchTotal") == total > 0
    assert f"1 of {total:,}" in pg.inner_text("#tl-search-info")
    pg.click("#tl-next")
    pg.wait_for_function(f"() => {TL}.state.matchIndex === 1")
    check_tile_matches_store(pg, served)
    screenshot(pg, f"timeline-{tag}-search")


def test_h200_timeline(page: Any, h200: Served) -> None:
    open_timeline(page, h200)
    screenshot(page, "timeline-h200-open")
    # the first look: the first node, its first GPU and so the GPU's host thread and stream open
    gpu = next(i for i in child_ids(page, "node/vm") if i.startswith("gpu/"))
    opened = state(page, "s.layout.filter(r => r.open).map(r => r.id)")
    assert opened == ["job", "node/vm", gpu]
    host = next(i for i in child_ids(page, gpu) if i.startswith("host/"))
    assert {host, "stream/0/0/7"} <= set(state(page, "s.tile.rows"))
    assert state(page, "s.tile.ts.length") > 0
    # a closed node shows what ran on its GPUs' streams, flattened on its line
    before = state(page, "s.tiles")
    page.evaluate(f"() => {TL}.toggle('node/vm', false)")
    wait_tile(page, before)
    assert state(page, "s.tile.rows") == ["stream/0/0/7"]
    assert state(page, "s.tile.binCol.length + s.tile.ts.length") > 0
    click_row(page, "node/vm")
    kids = child_ids(page, gpu)
    assert kids[0] == "util/vm/0" and "stream/0/0/7" in kids
    assert state(page, "s.tile.rows").count("stream/0/0/7") == 1
    assert state(page, "s.tile.sTs.length") > 0  # the utilization track
    kernel_flow(page, h200, ["stream/0/0/7"], "ProfilerStep#20", "elementwise_kernel", "h200")
    # the wheel zooms around the pointer; "all arrows" draws every launch → kernel pair in view
    span = state(page, "s.t1 - s.t0")
    box = page.locator("#tl-canvas").bounding_box()
    page.mouse.move(box["x"] + 600, box["y"] + 200)
    page.mouse.wheel(0, 400)
    assert state(page, "s.t1 - s.t0") > span
    before = state(page, "s.tiles")
    page.check("#tl-all-arrows")
    wait_tile(page, before)
    page.wait_for_function(f"() => {TL}.state.flows.length > 0", timeout=TIMEOUT_MS)
    flows = state(page, "s.flows")
    assert all(
        f["launch"]["row"].startswith("host/0/") and f["kernel"]["row"] == "stream/0/0/7" for f in flows
    )
    screenshot(page, "timeline-h200-arrows")


@pytest.mark.shared
def test_dlrm_timeline(page: Any, dlrm: Served) -> None:
    open_timeline(page, dlrm)
    node = child_ids(page, "job")[0]
    click_row(page, node)
    gpu = next(i for i in child_ids(page, node) if i.startswith("gpu/"))
    click_row(page, gpu)
    streams = [i for i in child_ids(page, gpu) if i.startswith("stream/")]
    assert streams
    steps = state(page, "s.rows.steps")
    names = sorted({s["name"] for s in steps}, key=lambda n: int(n.rsplit("#", 1)[-1]))
    con = dlrm.profile.connect()
    row = con.execute(
        "SELECT name FROM events WHERE kind = 'kernel' "
        "AND (name ILIKE '%AllReduce%' OR name ILIKE '%SendRecv%') LIMIT 1"
    ).fetchone()
    search = "AllReduce" if row and "allreduce" in row[0].lower() else "SendRecv"
    kernel_flow(page, dlrm, streams, names[len(names) // 2], search, "dlrm")
