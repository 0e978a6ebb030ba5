"""Range selection on the timeline in real Chromium through the real server: shift+drag over the
events (or a drag on the ruler) marks a range; the panel shows its statistics per row and per kind
as the server computes them; Zoom to range zooms there; Esc clears it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.ui.conftest import Served, screenshot
from tests.ui.harness import api
from tests.ui.pages import TIMEOUT_MS

pytestmark = pytest.mark.browser

TL = "window.__hyperscope.timeline"
GUTTER = 280


def _open(pg: Any, served: Served) -> dict[str, float]:
    pg.goto(f"{served.url}/#/timeline/{served.profile_id}")
    pg.wait_for_function(
        f"() => {TL} && {TL}.state.rows !== null && {TL}.state.tiles > 0", timeout=TIMEOUT_MS
    )
    pg.evaluate(f"() => {TL}.openAll()")
    pg.wait_for_function(
        f"() => !{TL}.state.loading && {TL}.state.tile && {TL}.state.tile.id.length > 0", timeout=TIMEOUT_MS
    )
    return dict(
        pg.eval_on_selector(
            "#tl-canvas",
            "c => { const r = c.getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width, h: r.height}; }",
        )
    )


def _drag(pg: Any, box: dict[str, float], y: float, f0: float, f1: float, shift: bool) -> None:
    w = box["w"] - GUTTER
    pg.mouse.move(box["x"] + GUTTER + w * f0, box["y"] + y)
    if shift:
        pg.keyboard.down("Shift")
    pg.mouse.down()
    pg.mouse.move(box["x"] + GUTTER + w * (f0 + f1) / 2, box["y"] + y, steps=4)
    pg.mouse.move(box["x"] + GUTTER + w * f1, box["y"] + y, steps=4)
    pg.mouse.up()
    if shift:
        pg.keyboard.up("Shift")


def test_shift_drag_marks_a_range_with_its_statistics(page: Any, synth: Served) -> None:
    box = _open(page, synth)
    view = page.evaluate(f"() => [{TL}.state.t0, {TL}.state.t1]")
    _drag(page, box, box["h"] * 0.6, 0.2, 0.6, shift=True)
    page.wait_for_function(f"() => {TL}.state.rangeStats !== null", timeout=TIMEOUT_MS)
    # the view did not pan: a shift+drag marks, it does not move
    assert page.evaluate(f"() => [{TL}.state.t0, {TL}.state.t1]") == view
    a, b = page.evaluate(f"() => {TL}.state.range")
    assert (
        0.19 < (a - view[0]) / (view[1] - view[0]) < 0.21
        and 0.59 < (b - view[0]) / (view[1] - view[0]) < 0.61
    )
    stats = page.evaluate(f"() => {TL}.state.rangeStats")
    origin = int(page.evaluate(f"() => {TL}.state.origin.toString()"))
    rows = [r["id"] for r in stats["rows"]]
    assert len(rows) > 1
    status, want = api(
        synth.url,
        f"/api/profiles/{synth.profile_id}/timeline/range?rows={','.join(rows)}"
        f"&t0_ns={origin + round(a)}&t1_ns={origin + round(b)}",
    )
    assert status == 200
    # (the echoed epoch ns lose their last digits in the browser's JSON numbers)
    assert abs(stats["t0_ns"] - want["t0_ns"]) < 1000 and abs(stats["t1_ns"] - want["t1_ns"]) < 1000
    assert {k: v for k, v in want.items() if k not in ("t0_ns", "t1_ns")} == {
        k: v for k, v in stats.items() if k not in ("t0_ns", "t1_ns")
    }
    assert want["count"] > 0
    panel = page.inner_text("#tl-range")
    assert f"{want['count']:,} events" in panel and want["top"][0]["name"][:30] in panel
    shown = page.eval_on_selector_all("#tl-range .tl-range-rows tbody tr", "rs => rs.map(r => r.dataset.row)")
    assert shown == rows
    screenshot(page, "timeline-range")
    page.click("#tl-range-zoom")
    page.wait_for_function(
        f"([a, b]) => Math.abs({TL}.state.t0 - a) < 1 && Math.abs({TL}.state.t1 - b) < 1",
        arg=[a, b],
        timeout=TIMEOUT_MS,
    )
    page.focus("#tl-canvas")
    page.keyboard.press("Escape")
    page.wait_for_function(f"() => {TL}.state.range === null", timeout=TIMEOUT_MS)
    assert "Click an event" in page.inner_text("#tl-details")


def test_a_drag_on_the_ruler_marks_a_range(page: Any, synth: Served) -> None:
    box = _open(page, synth)
    _drag(page, box, 10, 0.5, 0.3, shift=False)  # right to left
    page.wait_for_function(f"() => {TL}.state.rangeStats !== null", timeout=TIMEOUT_MS)
    a, b = page.evaluate(f"() => {TL}.state.range")
    assert a < b
