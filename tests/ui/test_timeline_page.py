"""The timeline page among the others, in Debian's chromium against the real ``hyperscope ui``:
leaving it and coming back keeps the browser responsive (a hidden canvas is 0 px wide), unloading
the profile clears it, and with none loaded it shows the placeholder the other pages show."""

from __future__ import annotations

from typing import Any

import pytest

from tests.ui.conftest import Served
from tests.ui.pages import TIMEOUT_MS

pytestmark = pytest.mark.browser

TL = "window.__hyperscope.timeline"
#: a page whose main thread is stuck answers no evaluation; this long is far beyond any frame
RESPONSIVE_MS = 15_000


def open_timeline(pg: Any, served: Served) -> None:
    pg.goto(f"{served.url}/#/timeline/{served.profile_id}")
    pg.wait_for_selector("#timeline:not([hidden])")
    pg.wait_for_function(
        f"() => {TL} && {TL}.state.rows !== null && {TL}.state.tiles > 0 && !{TL}.state.loading",
        timeout=TIMEOUT_MS,
    )


def responsive(pg: Any) -> None:
    """The page answers within RESPONSIVE_MS: two animation frames have run (a frame stuck in a
    drawing loop never lets the second one come)."""
    pg.wait_for_function(
        "() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => done(1))))",
        timeout=RESPONSIVE_MS,
    )


def test_leaving_the_timeline_keeps_the_page_responsive(page: Any, synth: Served) -> None:
    open_timeline(page, synth)
    for route, ready in (
        ("jobs", "#jobs-page:not([hidden])"),
        ("info", "#info:not([hidden])"),
        ("dashboard", "#dashboard:not([hidden])"),
    ):
        page.click(f"a.tab[data-route={route}]")
        page.wait_for_selector(ready, timeout=TIMEOUT_MS)
        responsive(page)
        page.click("a.tab[data-route=timeline]")
        page.wait_for_selector("#timeline:not([hidden])", timeout=TIMEOUT_MS)
        responsive(page)
    # back on the timeline it is drawn at its size again: the ruler spans the profile
    assert page.evaluate(f"{TL}.ticks().length") > 0
    assert page.evaluate("document.querySelector('#tl-canvas').width") > 0


def test_no_profile_loaded_shows_the_placeholder(page: Any, synth: Served) -> None:
    page.goto(f"{synth.url}/#/timeline")
    page.wait_for_selector("#timeline:not([hidden])")
    placeholder = page.locator("#tl-placeholder")
    placeholder.wait_for(state="visible", timeout=TIMEOUT_MS)
    assert "No profile loaded" in placeholder.inner_text()
    assert page.locator("#timeline .tl-body").is_hidden()


def test_unloading_clears_the_timeline(page: Any, synth: Served) -> None:
    open_timeline(page, synth)
    assert page.locator("#tl-placeholder").is_hidden()
    page.click("[data-testid=unload]")
    page.locator("#tl-placeholder").wait_for(state="visible", timeout=TIMEOUT_MS)
    assert page.locator("#timeline .tl-body").is_hidden()
    assert page.evaluate(f"{TL}.state.profile") is None
    assert page.evaluate(f"{TL}.state.tile") is None
    # loading it again draws it again
    page.goto(f"{synth.url}/#/jobs")
    page.goto(f"{synth.url}/#/timeline/{synth.profile_id}")
    ready = f"() => {TL}.state.profile !== null && {TL}.state.tiles > 0 && !{TL}.state.loading"
    page.wait_for_function(ready, timeout=TIMEOUT_MS)
    assert page.locator("#tl-placeholder").is_hidden()


def _select_first_event(pg: Any) -> None:
    pg.evaluate(f"{TL}.select(Number({TL}.state.tile.id[0]))")
    pg.wait_for_function(f"() => {TL}.state.selected !== null", timeout=TIMEOUT_MS)
    assert "Click an event." not in pg.inner_text("#tl-details")


def test_esc_and_a_click_on_empty_canvas_clear_the_selection_and_fit_fits_the_profile(
    page: Any, synth: Served
) -> None:
    open_timeline(page, synth)
    span = page.evaluate(f"{TL}.state.span")
    _select_first_event(page)
    page.focus("#tl-canvas")
    page.keyboard.press("Escape")
    page.wait_for_function(f"() => {TL}.state.selected === null", timeout=TIMEOUT_MS)
    assert "Click an event." in page.inner_text("#tl-details")
    # a click below the last row: nothing there, nothing selected
    _select_first_event(page)
    box = page.locator("#tl-canvas").bounding_box()
    last = page.evaluate(f"Math.max(...{TL}.state.layout.map(r => r.y + r.h))")
    assert last + 60 < box["height"]
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] - 20)
    page.wait_for_function(f"() => {TL}.state.selected === null", timeout=TIMEOUT_MS)
    # Fit, with nothing selected, fits the whole profile (not the event selected before)
    page.keyboard.press("w")
    page.keyboard.press("w")
    assert page.evaluate(f"{TL}.state.t1 - {TL}.state.t0") < span[1] - span[0]
    page.keyboard.press("f")
    assert page.evaluate(f"[{TL}.state.t0, {TL}.state.t1]") == span


def test_toolbar_stays_one_line_whatever_its_status_says(page: Any, synth: Served) -> None:
    page.set_viewport_size({"width": 1280, "height": 720})
    open_timeline(page, synth)
    toolbar = page.locator("#timeline .toolbar")
    height = toolbar.bounding_box()["height"]
    top = page.locator("#tl-canvas").bounding_box()["y"]
    long = "building the timeline index of this profile: 42%, 17 s (once per profile; " * 4
    page.evaluate("(t) => { document.querySelector('#tl-status').textContent = t; }", long)
    page.wait_for_function("() => new Promise((done) => requestAnimationFrame(() => done(1)))")
    assert toolbar.bounding_box()["height"] == height
    assert page.locator("#tl-canvas").bounding_box()["y"] == top
    # every control is still on screen
    for sel in ("#tl-steps", "#tl-search", "#tl-fit"):
        b = page.locator(sel).bounding_box()
        assert b["x"] + b["width"] <= 1280, sel
