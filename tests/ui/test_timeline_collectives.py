"""Collectives across ranks on the timeline, in real Chromium through the real server: a click on
one rank's all-reduce draws arrows from every rank's kernel to the last rank's, outlines that one
and says "last to arrive: rank R, +X after the first"; "all collectives" does it for every
collective in view; Esc clears it. On the hand-made three-rank profile whose answer is known
(tests/timeline/test_collectives.py: rank 2 is 100 µs late in the second all-reduce)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hyperscope import Store
from hyperscope import timeline as tl
from hyperscope.timeline.collectives import instance_of
from tests.timeline.test_collectives import ALLREDUCE, write_collectives
from tests.ui.conftest import Served, _serve, screenshot
from tests.ui.pages import TIMEOUT_MS

pytestmark = pytest.mark.browser

TL = "window.__hyperscope.timeline"
JOB = "three-ranks-collectives"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("ui-tl-coll")
    with Store(root / "home") as store:
        store.import_traces(write_collectives(root / "traces"), JOB)
    yield from _serve(root / "home", JOB, 3)


def _state(pg: Any, expr: str) -> Any:
    return pg.evaluate(f"() => {{ const s = {TL}.state; return {expr}; }}")


def _settled(pg: Any, before: int) -> None:
    pg.wait_for_function(
        f"(n) => {TL}.state.tiles > n && !{TL}.state.loading", arg=before, timeout=TIMEOUT_MS
    )


def test_a_selected_collective_is_linked_on_every_rank(page: Any, served: Served) -> None:
    page.goto(f"{served.url}/#/timeline/{served.profile_id}")
    page.wait_for_function(
        f"() => {TL} && {TL}.state.rows !== null && {TL}.state.tiles > 0", timeout=TIMEOUT_MS
    )
    before = _state(page, "s.tiles")
    page.evaluate(f"() => {TL}.openAll()")
    _settled(page, before)
    # the second all-reduce of rank 1, drawn on its stream: click it
    target = page.evaluate(
        f"""(name) => {{ const s = {TL}.state, t = s.tile, ks = [];
            for (let i = 0; i < t.ts.length; i++)
              if (t.names[t.name[i]] === name && t.rows[t.row[i]] === 'stream/1/1/7') ks.push(i);
            ks.sort((a, b) => t.ts[a] - t.ts[b]);
            const i = ks[1];
            return {{ id: t.id[i], x: {TL}.xOf(t.ts[i] + t.dur[i] / 2), depth: t.depth[i] }}; }}""",
        ALLREDUCE,
    )
    box = page.locator("#tl-canvas").bounding_box()
    y = page.evaluate(
        f"(d) => {TL}.rowY('stream/1/1/7') + {TL}.laneTop(d) + {TL}.laneHeight(d) / 2", target["depth"]
    )
    page.mouse.click(box["x"] + target["x"], box["y"] + y)
    page.wait_for_function(
        f"(id) => {TL}.state.selected && {TL}.state.selected.id === id && {TL}.state.collective",
        arg=target["id"],
        timeout=TIMEOUT_MS,
    )
    page.wait_for_function(f"() => {TL}.state.collArrows.length === 2", timeout=TIMEOUT_MS)
    coll = _state(page, "s.collective")
    assert (coll["collective"], coll["seq"], coll["ranks"]) == ("AllReduce", 1, 3)
    assert [e["rank"] for e in coll["events"]] == [0, 1, 2]
    # the panel: what it is, the last rank and every rank by arrival
    assert page.inner_text("#tl-last-arrival") == "last to arrive: rank 2, +100 µs after the first"
    assert "AllReduce #2 on 3 ranks" in page.inner_text("#tl-collective")
    ranks = page.eval_on_selector_all("#tl-coll-ranks li", "ls => ls.map(l => l.dataset.rank)")
    assert ranks[-1] == "2" and sorted(ranks) == ["0", "1", "2"]
    # the arrows: from ranks 0 and 1 to rank 2's kernel, where the last mark outlines it
    last = next(e for e in coll["events"] if e["rank"] == 2)
    origin = int(_state(page, "s.origin.toString()"))
    x_last = page.evaluate(f"(t) => {TL}.xOf(t)", int(last["ts_ns"]) - origin)
    arrows = _state(page, "s.collArrows")
    assert all(abs(a["x1"] - x_last) < 0.5 and not a["dashed"] for a in arrows)
    y_last = page.evaluate(
        f"(d) => {TL}.rowY('stream/2/2/7') + {TL}.laneTop(d) + {TL}.laneHeight(d) / 2", last["depth"]
    )
    assert all(abs(a["y1"] - y_last) < 0.5 for a in arrows)
    starts = sorted(
        page.evaluate(f"(t) => {TL}.xOf(t)", int(e["ts_ns"]) - origin) for e in coll["events"][:2]
    )
    assert sorted(a["x0"] for a in arrows) == pytest.approx(starts, abs=0.5)
    marks = _state(page, "s.lastMarks")
    assert len(marks) == 1 and abs(marks[0]["x"] - x_last) < 0.5
    screenshot(page, "timeline-collective-selected")
    # a jump to another rank's kernel of the same collective keeps the same links
    page.click("#tl-coll-ranks li[data-rank='0'] button.tl-jump")
    page.wait_for_function(
        f"(id) => {TL}.state.selected && {TL}.state.selected.id === id && {TL}.state.collective",
        arg=coll["events"][0]["id"],
        timeout=TIMEOUT_MS,
    )
    assert _state(page, "s.collective.last") == coll["last"]
    # Esc: no selection, no arrows
    page.focus("#tl-canvas")
    page.keyboard.press("Escape")
    page.wait_for_function(
        f"() => !{TL}.state.selected && {TL}.state.collArrows.length === 0", timeout=TIMEOUT_MS
    )
    assert not page.locator("#tl-collective").count()
    # every collective in the window: 8 of them (4 all-reduces, 4 send/recvs), 2 arrows each
    page.keyboard.press("f")
    before = _state(page, "s.tiles")
    page.check("#tl-all-collectives")
    _settled(page, before)
    page.wait_for_function(f"() => {TL}.state.collectives.length === 8", timeout=TIMEOUT_MS)
    page.wait_for_function(f"() => {TL}.state.collArrows.length === 16", timeout=TIMEOUT_MS)
    assert _state(page, "s.collectivesTotal") == 8
    lasts = _state(page, "s.collectives.map(c => c.last.rank)")
    assert lasts == [0, 2, 2, 2, 0, 2, 2, 2]  # all-reduces: ties to rank 0, rank 2 late; send/recvs: rank 2
    assert len(_state(page, "s.lastMarks")) == 8
    assert "8 collectives" in page.inner_text("#tl-status")
    screenshot(page, "timeline-collectives-all")


@pytest.mark.shared
def test_a_real_allreduce_is_linked_across_8_ranks(page: Any, real: Served) -> None:
    """The 8-rank DLRM set: the first all-reduce found by the search is linked to its kernel on
    the 7 other ranks (to their closed GPU groups' lines, dashed, until "Show every rank")."""
    page.goto(f"{real.url}/#/timeline/{real.profile_id}")
    page.wait_for_function(
        f"() => {TL} && {TL}.state.rows !== null && {TL}.state.tiles > 0", timeout=TIMEOUT_MS
    )
    page.fill("#tl-search", "ncclKernel_AllReduce")
    page.press("#tl-search", "Enter")
    page.wait_for_function(
        f"() => {TL}.state.collective && {TL}.state.collArrows.length === 7", timeout=TIMEOUT_MS
    )
    coll = _state(page, "s.collective")
    with Store(real.home) as store:
        index = tl.load(store.profile(real.job))
    want = instance_of(index, _state(page, "s.selected.id"))
    assert want is not None and want["collective"] == "AllReduce" and want["ranks"] == 8
    assert coll["last"] == want["last"] and [e["id"] for e in coll["events"]] == [
        e["id"] for e in want["events"]
    ]
    text = page.inner_text("#tl-last-arrival")
    assert text.startswith(f"last to arrive: rank {want['last']['rank']}, +") and text.endswith(
        "after the first"
    )
    assert page.get_attribute("#tl-collective", "data-last-rank") == str(want["last"]["rank"])
    assert _state(page, "s.collArrows.filter(a => a.dashed).length") > 0  # other ranks' GPUs closed
    before = _state(page, "s.tiles")
    page.click("#tl-coll-show")
    _settled(page, before)
    page.wait_for_function(
        f"() => {TL}.state.collArrows.length === 7 && {TL}.state.collArrows.every(a => !a.dashed)"
        f" && {TL}.state.lastMarks.length === 1",
        timeout=TIMEOUT_MS,
    )
    screenshot(page, "timeline-collective-dlrm")
