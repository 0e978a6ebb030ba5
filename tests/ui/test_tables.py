"""The Tables page in real Chromium through the real server, on torch.profiler's own trace of the
H200 run (tests/data: kernels with launch parameters, nested operators with shapes, annotations):
every row with its whole name, sorting and filtering, and a row taking the Timeline to that name's
occurrences with next/previous."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import pytest

from hyperscope import Store
from hyperscope._samples import H200_TRACE
from hyperscope.analysis import Scope
from hyperscope.analysis.tables import annotation_table, kernel_table, operator_table
from tests.ui.conftest import Served, _serve, screenshot
from tests.ui.pages import TIMEOUT_MS, load_job, open_jobs

pytestmark = pytest.mark.browser

JOB = "torch211-tables"
TL = "window.__hyperscope.timeline"
TABLES = "window.__hyperscope.tables"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("ui-tables") / "home"
    trace = H200_TRACE
    with Store(home) as store:
        store.import_traces([trace], JOB)
    yield from _serve(home, JOB, 1)


def open_tables(pg: Any, served: Served, kind: str = "kernels") -> None:
    open_jobs(pg, served.url)
    load_job(pg, JOB)
    pg.click("a.tab[data-route=tables]")
    if kind != "kernels":
        pg.click(f"#tables button[data-table={kind}]")
    wait_table(pg, kind)


def wait_table(pg: Any, kind: str) -> None:
    pg.wait_for_function(
        f"(kind) => document.querySelector('#tables').dataset.state === 'ready' && {TABLES}.kind === kind",
        arg=kind,
        timeout=TIMEOUT_MS,
    )


def shown(pg: Any) -> list[str]:
    return [str(n) for n in pg.evaluate(f"() => {TABLES}.shown")]


def column(pg: Any, col: str) -> list[str]:
    return [
        str(t)
        for t in pg.eval_on_selector_all(
            f"#tables-table td[data-col={col}]", "cs => cs.map(c => c.textContent)"
        )
    ]


def test_kernels_table_sorts_and_filters_with_whole_names(page: Any, served: Served) -> None:
    with Store(served.home) as store:
        want = kernel_table(store.profile(JOB)).rows
    open_tables(page, served)
    assert shown(page) == [r.name for r in want]  # longest total first, every kernel
    assert column(page, "name") == [r.name for r in want]  # whole names, none cut
    assert max(len(n) for n in column(page, "name")) > 60
    heads = page.eval_on_selector_all("#tables-table th[data-sort]", "hs => hs.map(h => h.dataset.sort)")
    assert {
        "launches",
        "total_ns",
        "mean_ns",
        "min_ns",
        "max_ns",
        "p50_ns",
        "p99_ns",
        "grid",
        "block",
        "registers_per_thread",
        "occupancy_pct",
    } <= set(heads)
    page.click("#tables-table th[data-sort=launches]")
    by_launches = sorted(want, key=lambda r: -r.launches)
    got = shown(page)
    assert [next(r.launches for r in want if r.name == n) for n in got] == [r.launches for r in by_launches]
    page.click("#tables-table th[data-sort=launches]")  # again: fewest first
    assert [next(r.launches for r in want if r.name == n) for n in shown(page)] == sorted(
        r.launches for r in want
    )
    page.fill("#tables-filter", "NVJET")  # any case: Hopper's cuBLAS GEMMs
    page.wait_for_function(f"() => {TABLES}.filter === 'NVJET'", timeout=TIMEOUT_MS)
    gemm = [r.name for r in want if "nvjet" in r.name.lower()]
    assert sorted(shown(page)) == sorted(gemm) and 0 < len(gemm) < len(want)
    assert "of" in page.inner_text("#tables-info")
    screenshot(page, "tables-kernels")


def test_operators_and_annotations_tables(page: Any, served: Served) -> None:
    with Store(served.home) as store:
        profile = store.profile(JOB)
        ops = operator_table(profile).rows
        notes = annotation_table(profile).rows
    open_tables(page, served, "operators")
    assert shown(page) == [r.name for r in ops]
    heads = page.eval_on_selector_all("#tables-table th[data-sort]", "hs => hs.map(h => h.dataset.sort)")
    assert {"calls", "total_ns", "self_ns", "input_shapes"} <= set(heads)
    page.click("#tables-table th[data-sort=self_ns]")
    assert shown(page)[0] == max(ops, key=lambda r: (r.self_ns, -ops.index(r))).name
    assert "self leaves them out" in page.inner_text("#tables-notes")
    page.click("#tables button[data-table=annotations]")
    wait_table(page, "annotations")
    assert shown(page) == [r.name for r in notes]


def test_a_row_opens_its_occurrences_on_the_timeline(page: Any, served: Served) -> None:
    with Store(served.home) as store:
        row = kernel_table(store.profile(JOB)).rows[0]
    open_tables(page, served)
    page.click(f"#tables-table tr[data-name='{row.name}'] button.occurrences")
    page.wait_for_selector("#timeline:not([hidden])", timeout=TIMEOUT_MS)
    page.wait_for_function(
        f"(name) => {TL}.state.selected && {TL}.state.selected.fields.name === name"
        f" && {TL}.state.matchIndex === 0",
        arg=row.name,
        timeout=TIMEOUT_MS,
    )
    assert page.evaluate(f"() => {TL}.state.searchExact") is True
    # the search is in the address too: a whole name, so q and exact=1
    query = parse_qs(str(page.evaluate("location.hash")).partition("?")[2])
    assert query["q"] == [row.name] and query["exact"] == ["1"]
    assert page.evaluate(f"() => {TL}.state.matchTotal") == row.launches  # exactly this name's launches
    first = page.evaluate(f"() => {TL}.state.selected.id")
    page.click("#tl-next")
    page.wait_for_function(
        f"(first) => {TL}.state.selected && {TL}.state.selected.id !== first", arg=first, timeout=TIMEOUT_MS
    )
    assert page.evaluate(f"() => {TL}.state.selected.fields.name") == row.name
    assert page.evaluate(f"() => {TL}.state.matchIndex") == 1
    assert f"2 of {row.launches:,} (this name)" == page.inner_text("#tl-search-info")
    page.click("#tl-prev")
    page.wait_for_function(
        f"(first) => {TL}.state.selected && {TL}.state.selected.id === first", arg=first, timeout=TIMEOUT_MS
    )


def test_a_bar_of_the_kernel_chart_opens_its_occurrences(page: Any, served: Served) -> None:
    with Store(served.home) as store:
        row = kernel_table(store.profile(JOB)).rows[1]
    open_jobs(page, served.url)
    load_job(page, JOB)
    page.locator("[data-chart=kernels]").scroll_into_view_if_needed()
    # the bar's middle, in page pixels, from the chart itself
    x, y = page.evaluate(
        """(name) => {
            const chart = window.__hyperscope.charts.kernels;
            const opt = chart.getOption();
            const i = opt.yAxis[0].data.indexOf(name);
            const value = opt.series[0].data[i].value ?? opt.series[0].data[i];
            const [px, py] = chart.convertToPixel({ seriesIndex: 0 }, [value / 2, i]);
            const box = chart.getDom().getBoundingClientRect();
            return [box.x + px, box.y + py];
        }""",
        row.name,
    )
    page.mouse.click(x, y)
    page.wait_for_selector("#timeline:not([hidden])", timeout=TIMEOUT_MS)
    page.wait_for_function(
        f"(name) => {TL}.state.selected && {TL}.state.selected.fields.name === name",
        arg=row.name,
        timeout=TIMEOUT_MS,
    )
    assert page.evaluate(f"() => {TL}.state.matchTotal") == row.launches


def test_a_tables_link_opens_the_same_table_sort_filter_and_scope(
    page: Any, browser: Any, served: Served
) -> None:
    """The address carries the table, its sort, order and filter, and the Dashboard's step range the
    table is computed in: a fresh browser profile opens the same rows."""
    with Store(served.home) as store:
        want = operator_table(store.profile(JOB), Scope(steps=(3, 4))).rows
        whole = operator_table(store.profile(JOB)).rows
    page.goto(f"{served.url}/#/tables/{served.profile_id}?steps=3:4")
    wait_table(page, "kernels")
    page.click("#tables button[data-table=operators]")
    wait_table(page, "operators")
    assert shown(page) == [r.name for r in want] != [r.name for r in whole]  # in the Dashboard's scope
    assert "steps 3 to 4" in page.inner_text("#tables")
    page.click("#tables-table th[data-sort=calls]")
    page.click("#tables-table th[data-sort=calls]")  # fewest first
    page.fill("#tables-filter", "ATEN::")
    page.wait_for_function(
        "() => new URLSearchParams(location.hash.split('?')[1] || '').get('tf') === 'ATEN::'",
        timeout=TIMEOUT_MS,
    )
    got = shown(page)
    aten = [r for r in want if "aten::" in r.name.lower()]
    assert sorted(got) == sorted(r.name for r in aten) and [
        next(r.calls for r in aten if r.name == n) for n in got
    ] == sorted(r.calls for r in aten)
    link = page.url
    query = parse_qs(link.split("?", 1)[1])
    assert query == {
        "steps": ["3:4"],
        "table": ["operators"],
        "sort": ["calls"],
        "order": ["asc"],
        "tf": ["ATEN::"],
    }
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        other = context.new_page()
        other.goto(link)
        wait_table(other, "operators")
        assert shown(other) == got and other.input_value("#tables-filter") == "ATEN::"
    finally:
        context.close()
