"""Shareable views in real Chromium through the real server: the address carries the page, the
profile, the dashboard's filters, the timeline's window, open rows and selection, and a link
pasted into a fresh browser (no stored state) opens the same view; the export buttons download
the window shown, or the whole profile, as Chrome-trace JSON."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs

import pytest

from hyperscope import Store
from tests.ui.conftest import Served
from tests.ui.pages import TIMEOUT_MS, load_job, open_jobs, wait_dashboard, wait_info

pytestmark = pytest.mark.browser

TL = "window.__hyperscope.timeline"


@contextmanager
def fresh_page(browser: Any) -> Iterator[Any]:
    """A second browser profile: nothing in its storage, as on a colleague's machine."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield pg
    finally:
        context.close()
    assert not errors, errors


def view_of(pg: Any) -> tuple[str, dict[str, list[str]]]:
    hash_ = str(pg.evaluate("location.hash"))
    path, _, query = hash_.partition("?")
    return path, parse_qs(query)


def wait_hash(pg: Any, *keys: str) -> None:
    pg.wait_for_function(
        "(keys) => { const q = new URLSearchParams(location.hash.split('?')[1] || ''); "
        "return keys.every((k) => q.has(k)); }",
        arg=list(keys),
        timeout=TIMEOUT_MS,
    )


def test_a_dashboard_link_opens_the_same_filters(page: Any, browser: Any, synth: Served) -> None:
    open_jobs(page, synth.url)
    load_job(page, synth.job)
    path, query = view_of(page)
    assert path == f"#/dashboard/{synth.profile_id}" and query == {}  # defaults: nothing to say
    page.select_option("#filter-rank", ["1", "2"])
    page.fill("#filter-step-from", "2")
    page.fill("#filter-step-to", "4")
    before = int(page.evaluate("window.__hyperscope.renders"))
    page.click("#filter-apply")
    wait_dashboard(page, before)
    page.fill("#top-k", "7")
    before = int(page.evaluate("window.__hyperscope.renders"))
    page.press("#top-k", "Enter")
    wait_dashboard(page, before)
    wait_hash(page, "rank", "steps", "k")
    path, query = view_of(page)
    assert path == f"#/dashboard/{synth.profile_id}"
    assert query == {"rank": ["1", "2"], "steps": ["2:4"], "k": ["7"]}
    link = page.url
    want = page.evaluate("window.__hyperscope.dashboard.tables")

    with fresh_page(browser) as other:
        other.goto(link)
        wait_dashboard(other)
        scope = other.evaluate("window.__hyperscope.dashboard.scope")
        assert scope == {"nodes": None, "ranks": [1, 2], "steps": [2, 4]}
        assert other.evaluate("window.__hyperscope.dashboard.tables") == want
        # the filter bar says so too, once its choices are in
        other.wait_for_function(
            "() => [...document.querySelector('#filter-rank').selectedOptions]"
            ".map(o => o.value).join() === '1,2'",
            timeout=TIMEOUT_MS,
        )
        assert other.input_value("#filter-step-from") == "2" and other.input_value("#filter-step-to") == "4"
        assert other.input_value("#top-k") == "7"
        # a tab switch keeps the view in the address; back on the dashboard it is the same
        other.click("a.tab[data-route=info]")
        wait_info(other)
        assert view_of(other) == (f"#/info/{synth.profile_id}", query)


def test_a_timeline_link_opens_the_same_window_rows_and_selection(
    page: Any, browser: Any, synth: Served
) -> None:
    page.goto(f"{synth.url}/#/timeline/{synth.profile_id}")
    page.wait_for_function(
        f"() => {TL} && {TL}.state.rows !== null && {TL}.state.tiles > 0", timeout=TIMEOUT_MS
    )
    page.evaluate(f"() => {TL}.openAll()")
    page.wait_for_function(f"() => {TL}.state.tile && {TL}.state.tile.id.length > 0", timeout=TIMEOUT_MS)
    span = page.evaluate(f"() => {TL}.state.span")
    t0, t1 = span[0] + (span[1] - span[0]) // 4, span[0] + (span[1] - span[0]) // 2  # whole ns
    page.evaluate(f"([a, b]) => {TL}.setView(a, b)", [t0, t1])
    page.wait_for_function(
        f"() => !{TL}.state.loading && {TL}.state.tile && {TL}.state.tile.id.length > 0", timeout=TIMEOUT_MS
    )
    event = int(page.evaluate(f"() => {TL}.state.tile.id[0]"))
    page.evaluate(f"(id) => {TL}.select(id)", event)
    wait_hash(page, "t0", "t1", "open", "sel")
    path, query = view_of(page)
    assert path == f"#/timeline/{synth.profile_id}"
    origin = int(page.evaluate(f"() => {TL}.state.origin.toString()"))
    assert int(query["t0"][0]) - origin == t0 and int(query["t1"][0]) - origin == t1
    opened = sorted(page.evaluate(f"() => [...{TL}.state.open]"))
    assert sorted(query["open"]) == opened and len(opened) > 1
    assert query["sel"] == [str(event)]
    link = page.url

    with fresh_page(browser) as other:
        other.goto(link)
        other.wait_for_function(
            f"(id) => {TL} && {TL}.state.rows !== null && {TL}.state.selected"
            f" && {TL}.state.selected.id === id",
            arg=event,
            timeout=TIMEOUT_MS,
        )
        got = other.evaluate(f"() => [{TL}.state.t0, {TL}.state.t1]")
        assert got == [t0, t1]
        assert sorted(other.evaluate(f"() => [...{TL}.state.open]")) == opened
        assert "Click an event" not in other.inner_text("#tl-details")
        # Esc clears the selection, and the address forgets it
        other.click("#tl-canvas", position={"x": 5, "y": 5})
        other.keyboard.press("Escape")
        other.wait_for_function(
            "() => !new URLSearchParams(location.hash.split('?')[1] || '').has('sel')", timeout=TIMEOUT_MS
        )
        assert "t0" in view_of(other)[1]


def _events_in(served: Served, where: str) -> list[int]:
    """Per rank, the stored events matching ``where``."""
    with Store(served.home) as store:
        profile = store.profile(served.job)
        con = profile.connect()
        try:
            return [
                int(con.execute(f"SELECT count(*) FROM events WHERE rank = {r} AND ({where})").fetchone()[0])
                for r in range(served.ranks)
            ]
        finally:
            con.close()


def _zip_counts(path: str) -> tuple[list[str], list[int]]:
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        return names, [len(json.loads(zf.read(n))["traceEvents"]) for n in names]


def test_export_downloads_the_window_shown_or_the_whole_profile(page: Any, synth: Served) -> None:
    page.goto(f"{synth.url}/#/timeline/{synth.profile_id}")
    page.wait_for_function(
        f"() => {TL} && {TL}.state.rows !== null && {TL}.state.tiles > 0", timeout=TIMEOUT_MS
    )
    # the whole span shown: the whole profile, a ZIP of one Chrome-trace file per rank
    with page.expect_download(timeout=TIMEOUT_MS) as got:
        page.click("#tl-export")
    whole = got.value
    assert whole.suggested_filename == f"{synth.job}-{synth.profile_id}.zip"
    names, counts = _zip_counts(whole.path())
    assert [n.split("/")[-1] for n in names] == [f"rank{r}.pt.trace.json" for r in range(synth.ranks)]
    assert counts == _events_in(synth, "true")
    # zoomed in: only the events overlapping the window shown
    span = page.evaluate(f"() => {TL}.state.span")
    page.evaluate(f"([a, b]) => {TL}.setView(a, b)", [span[0] + span[1] // 3, span[0] + span[1] // 2])
    origin = int(page.evaluate(f"() => {TL}.state.origin.toString()"))
    t0, t1 = (int(x) for x in page.evaluate(f"() => [Math.floor({TL}.state.t0), Math.ceil({TL}.state.t1)]"))
    start, end = origin + t0, origin + t1
    with page.expect_download(timeout=TIMEOUT_MS) as got:
        page.click("#tl-export")
    cut = got.value
    assert cut.suggested_filename == f"{synth.job}-{synth.profile_id}-window-{start}-{end}.zip"
    _, counts = _zip_counts(cut.path())
    want = _events_in(
        synth, f"ph = 'M' OR ts_ns IS NULL OR (ts_ns < {end} AND ts_ns + coalesce(dur_ns, 0) >= {start})"
    )
    assert counts == want and sum(want) < sum(_events_in(synth, "true"))
    # Profile info offers the whole profile too
    page.click("a.tab[data-route=info]")
    wait_info(page)
    with page.expect_download(timeout=TIMEOUT_MS) as got:
        page.click("#info-export")
    assert got.value.suggested_filename == f"{synth.job}-{synth.profile_id}.zip"
