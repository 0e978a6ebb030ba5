"""What the dashboard says, in Debian's chromium against the real ``hyperscope ui``, checked against
the store itself (SQL over the events), not only against ``hyperscope.analysis``: communication
kernels are no compute precision, and the "(all N kernels)" bar knows its shortest and longest."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from hyperscope import Store
from hyperscope.analysis import Scope
from hyperscope.store.synth import SynthSpec, write_job, write_rank
from tests.ui.conftest import Served, _serve, expected_dashboard
from tests.ui.harness import api
from tests.ui.pages import (
    TIMEOUT_MS,
    check_charts,
    load_job,
    names,
    open_jobs,
    option,
    renders,
    tooltip_text,
    values,
    wait_dashboard,
)

pytestmark = pytest.mark.browser


def _sql(served: Served, query: str) -> Any:
    with Store(served.home) as store:
        return store.profile(served.job).connect().execute(query).fetchone()


def test_precision_leaves_communication_out_of_the_precisions(page: Any, synth: Served) -> None:
    open_jobs(page, synth.url)
    load_job(page, synth.job)
    opt = option(page, "precision")
    assert opt is not None
    slices = dict(zip(names(opt["series"][0]), values(opt["series"][0]), strict=True))
    (comm,) = _sql(synth, "SELECT sum(dur_ns) FROM events WHERE kind = 'kernel' AND name ILIKE 'nccl%'")
    (fp32,) = _sql(
        synth,
        "SELECT sum(dur_ns) FROM events WHERE kind = 'kernel' AND name NOT ILIKE 'nccl%' "
        "AND regexp_matches(name, 'sgemm|scudnn|float|f32|fp32|sgemv', 'i') "
        "AND NOT regexp_matches(name, 'fp8|e4m3|e5m2|int8|bf16|bfloat16|fp16|half|tf32|double|f64', 'i')",
    )
    assert comm > 0  # the generated AllReduce on fp32 data
    assert slices["communication"] == comm
    assert slices.get("FP32", 0) == (fp32 or 0)
    notes = page.inner_text("[data-chart='precision'] .notes")
    assert "no compute precision" in notes


def test_all_kernels_bar_tooltip_has_min_and_max(page: Any, synth: Served) -> None:
    open_jobs(page, synth.url)
    load_job(page, synth.job)
    text = tooltip_text(page, "kernels", 0, 0)
    assert text.startswith("(all ")
    lo, hi = _sql(synth, "SELECT min(dur_ns), max(dur_ns) FROM events WHERE kind = 'kernel'")
    got = re.search(r"min ([0-9.,]+) ([nµm]?s), max ([0-9.,]+) ([nµm]?s)", text)
    assert got, text
    scale = {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}
    shown = [float(got.group(i).replace(",", "")) * scale[got.group(i + 1)] for i in (1, 3)]
    assert 0 < lo <= hi
    assert shown == [pytest.approx(lo, rel=0.01), pytest.approx(hi, rel=0.01)]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Ranks 0 and 1 on node-a, 2 and 3 on node-b."""
    root = tmp_path_factory.mktemp("ui-two-nodes")
    files = []
    for rank in range(4):
        path = root / "traces" / f"rank{rank}.pt.trace.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_rank(
            path, SynthSpec(ranks=4, steps=4, ops_per_step=10, node="node-a" if rank < 2 else "node-b"), rank
        )
        files.append(path)
    with Store(root / "home") as store:
        store.import_traces(files, "two-nodes")
    yield from _serve(root / "home", "two-nodes", 4)


def _offered(pg: Any) -> list[str]:
    return list(pg.eval_on_selector_all("#filter-rank option", "os => os.map(o => o.value)"))


def test_node_narrows_ranks_and_ranks_are_multi_select(page: Any, two_nodes: Served) -> None:
    open_jobs(page, two_nodes.url)
    load_job(page, two_nodes.job)
    page.wait_for_function("() => document.querySelectorAll('#filter-rank option').length === 4")
    assert "node-a" in page.inner_text("#filter-rank option[value='0']")
    page.select_option("#filter-node", "node-b")
    assert _offered(page) == ["2", "3"]
    page.select_option("#filter-node", "")
    assert _offered(page) == ["0", "1", "2", "3"]
    # two ranks at once
    before = renders(page)
    page.select_option("#filter-rank", ["1", "3"])
    page.click("#filter-apply")
    wait_dashboard(page, before)
    _, want = expected_dashboard(two_nodes.home, two_nodes.job, scope=Scope(ranks=(1, 3)))
    check_charts(page, want)
    assert option(page, "ranks")["xAxis"][0]["data"] == ["rank 1", "rank 3"]  # type: ignore[index]
    assert "ranks 1, 3" in page.inner_text("#dash-status")
    # a node keeps only the chosen ranks that are on it
    page.select_option("#filter-node", "node-a")
    assert _offered(page) == ["0", "1"]
    assert page.eval_on_selector_all("#filter-rank option:checked", "os => os.map(o => o.value)") == ["1"]


def test_bad_step_range_quotes_what_was_typed(page: Any, synth: Served) -> None:
    open_jobs(page, synth.url)
    load_job(page, synth.job)
    _, filters = api(synth.url, f"/api/profiles/{synth.profile_id}/filters")
    last = filters["steps"]["max"]
    before = renders(page)
    page.fill("#filter-step-from", "50")
    page.click("#filter-apply")
    error = page.locator("#filter-error")
    error.wait_for(state="visible")
    text = error.inner_text()
    # what was typed, once, and the profile's last step it is after: no number nobody typed twice
    assert text == f'Steps from "50": the profile\'s last step, {last}, is before the first, 50.'
    assert renders(page) == before  # nothing queried with a range that is not one
    page.fill("#filter-step-from", "")
    page.click("#filter-apply")
    wait_dashboard(page, before)
    assert error.is_hidden()


def test_what_the_analysis_computes_is_on_the_page(page: Any, synth: Served) -> None:
    """Idle time by cause, kernel types with their overlap, the longest launch latencies and the
    straggler verdict: each table of the dashboard answer drawn, with the analysis' numbers."""
    open_jobs(page, synth.url)
    load_job(page, synth.job)
    t = synth.expected
    idle = option(page, "idle_causes")
    assert idle is not None
    want: dict[str, int] = {}
    for r in t["idle"]["rows"]:
        want[r["cause"]] = want.get(r["cause"], 0) + r["idle_ns"]
    assert dict(zip(names(idle["series"][0]), values(idle["series"][0]), strict=True)) == want
    kinds = option(page, "kernel_types")
    assert kinds is not None
    segs = {r["kernel_types"]: r["duration_ns"] for r in t["kernel_types"]["rows"] if r["duration_ns"] > 0}
    assert dict(zip(names(kinds["series"][0]), values(kinds["series"][0]), strict=True)) == segs
    assert "overlap" in kinds["title"][0]["text"]
    rows = page.locator("[data-chart='latency_outliers'] tbody tr")
    outliers = t["latency_outliers"]["rows"]
    assert rows.count() == len(outliers) > 0
    assert outliers[0]["kernel"] in rows.nth(0).inner_text()  # the whole name
    verdict = page.inner_text("[data-chart='stragglers']")
    flagged = [r for r in t["ranks"]["rows"] if r["straggler"]]
    if flagged:
        for r in flagged:
            assert r["reason"] in verdict
    else:
        assert f"No straggler among {len(t['ranks']['rows'])} ranks." in verdict


def test_figures_shown_without_hovering(page: Any, synth: Served) -> None:
    """Busy % over the GPU time pie, mean/p50/p90 over the histograms, the ranks' per-step means on
    an axis of their own, axes in the unit of their values."""
    open_jobs(page, synth.url)
    load_job(page, synth.job)
    t = synth.expected
    job = t["gpu_time_job"]["rows"][0]
    busy = option(page, "gpu_time_job")["title"][0]["text"]  # type: ignore[index]
    assert busy == f"busy {100 * job['busy_ns'] / job['span_ns']:.1f} % of the span"
    steps = option(page, "step_histogram")["title"][0]["text"]  # type: ignore[index]
    assert steps.startswith("mean ") and " · p50 " in steps and " · p90 " in steps
    lat = option(page, "latency_histogram")["title"][0]["text"]  # type: ignore[index]
    assert "p50" in lat and "p90" in lat
    ranks = option(page, "ranks")
    assert ranks is not None
    axes = {s["name"]: s.get("yAxisIndex", 0) for s in ranks["series"]}
    assert axes["mean step"] == 0 and {axes["GPU busy"], axes["GPU idle"]} == {1}
    assert [a["name"] for a in ranks["yAxis"]] == ["per step", "whole run"]
    # each axis in the unit of its values: its top label reads 1 to 9,999 of that unit
    tops = page.evaluate(
        """() => { const c = window.__hyperscope.charts.ranks, o = c.getOption();
            return [0, 1].map((i) => o.yAxis[i].axisLabel.formatter(
                c.getModel().getComponent('yAxis', i).axis.scale.getExtent()[1])); }"""
    )
    for top in tops:
        number, unit = top.split(" ")
        assert unit in ("ns", "µs", "ms", "s") and (1 <= float(number) < 10_000 or unit == "ns"), tops
    # launch latency in bins of equal ratio (log bins), each bin a bar of the chart
    bins = t["latency_histogram"]["rows"]
    assert len(option(page, "latency_histogram")["xAxis"][0]["data"]) == len(bins) > 2  # type: ignore[index]
    ratios = [r["hi_ns"] / r["lo_ns"] for r in bins]
    assert max(ratios) == pytest.approx(min(ratios), rel=0.01) and min(ratios) > 1.01


@pytest.fixture(scope="module")
def nameless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """8 ranks whose traces name no host, as the DLRM set's Kineto traces do."""
    root = tmp_path_factory.mktemp("ui-nameless")
    with Store(root / "home") as store:
        store.import_traces(
            write_job(root / "t", SynthSpec(ranks=8, steps=2, ops_per_step=5, node="")), "eight"
        )
    yield from _serve(root / "home", "eight", 8)


def _gpu_lines(pg: Any) -> tuple[list[str], dict[str, Any]]:
    """The per-GPU utilization chart's line names, and where its legend and plot are drawn."""
    opt = option(pg, "gpu_utilization")
    assert opt is not None
    where = pg.evaluate(
        """() => { const c = window.__hyperscope.charts.gpu_utilization, m = c.getModel();
            const g = c.getViewOfComponentModel(m.getComponent('legend')).group;
            const r = g.getBoundingRect(), plot = m.getComponent('grid').coordinateSystem.getRect();
            return { items: g.childAt(0).childCount(), top: g.y + r.y, bottom: g.y + r.y + r.height,
                     left: g.x + r.x, right: g.x + r.x + r.width, plot: plot.y + plot.height,
                     width: c.getWidth(), height: c.getHeight() }; }"""
    )
    assert opt["legend"][0]["type"] == "plain"  # not paged
    return [s["name"] for s in opt["series"]], dict(where)


def test_per_gpu_lines_are_named_and_all_in_the_legend(
    page: Any, nameless: Served, two_nodes: Served
) -> None:
    """At 1280 px: no "(unnamed node)" on every line, every rank's line in the legend, on screen."""
    page.set_viewport_size({"width": 1280, "height": 720})
    for served, want in (
        (nameless, [f"rank {r}" for r in range(8)]),
        (two_nodes, [f"node-{'a' if r < 2 else 'b'} · rank {r}" for r in range(4)]),
    ):
        open_jobs(page, served.url)
        load_job(page, served.job)
        page.locator("[data-chart=gpu_utilization]").scroll_into_view_if_needed()
        lines, where = _gpu_lines(page)
        assert sorted(lines) == sorted(want)
        assert where["items"] == len(want), where  # every line has its legend item
        assert where["left"] >= 0 and where["right"] <= where["width"], where
        assert where["plot"] <= where["top"] and where["bottom"] <= where["height"], where


def test_top_k_at_40_keeps_every_label_and_the_names_apart(page: Any, h200: Served) -> None:
    open_jobs(page, h200.url)
    load_job(page, h200.job)
    before = renders(page)
    page.fill("#top-k", "40")
    page.press("#top-k", "Enter")
    wait_dashboard(page, before)
    opt = option(page, "kernels")
    assert opt is not None
    axis = opt["yAxis"][0]
    assert axis["axisLabel"]["interval"] == 0  # every bar labelled
    shown = page.evaluate("""() => window.__hyperscope.dashboard.tables.kernels.rows.map(r => r.name)""")
    height = page.evaluate("document.querySelector('[data-chart=kernels] .chart-body').clientHeight")
    assert height >= 20 * len(shown)
    # hovering the row of the smallest bar shows its whole name
    text = tooltip_text(page, "kernels", 0, len(shown) - 1)
    assert str(opt["yAxis"][0]["data"][-1]) in text
    # the labels drawn (head and tail of each name) are as many as the names: none read alike
    names_ = opt["yAxis"][0]["data"]
    labels = page.evaluate(
        """() => { const o = window.__hyperscope.charts.kernels.getOption();
            return o.yAxis[0].data.map((n) => o.yAxis[0].axisLabel.formatter(n)); }"""
    )
    assert len(set(labels)) == len(set(names_)) == len(names_)
    # the real pointer, beside the smallest bar (far right of its row), then on the label of the
    # one above it: each time the tooltip names the bar pointed at (so not the last tooltip left)
    page.locator("[data-chart=kernels]").scroll_into_view_if_needed()
    tip = "[data-chart='kernels'] .chart-body > div:last-child"
    last = len(names_) - 1
    for where, i in (("row", last), ("label", last - 1)):
        x, y = page.evaluate(
            """([i, where]) => {
                const c = window.__hyperscope.charts.kernels, o = c.getOption();
                const top = Math.max(...o.series[0].data.map((d) => d.value ?? d));
                const [px, py] = c.convertToPixel({ seriesIndex: 0 }, [top * 0.9, i]);
                const [x0] = c.convertToPixel({ seriesIndex: 0 }, [0, i]);
                const box = c.getDom().getBoundingClientRect();
                return [box.x + (where === 'row' ? px : x0 - 30), box.y + py];
            }""",
            [i, where],
        )
        page.mouse.move(x, y, steps=3)
        page.wait_for_function(
            """([sel, name, other]) => { const el = document.querySelector(sel);
                return el && el.innerText.includes(name) && !el.innerText.includes(other); }""",
            arg=[tip, str(names_[i]), str(names_[last if i != last else last - 1])],
            timeout=TIMEOUT_MS,
        )


@pytest.fixture(scope="module")
def straggling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """4 generated ranks; rank 3's communication kernels taken out, so the others wait for it."""
    root = tmp_path_factory.mktemp("ui-straggler")
    files = write_job(root / "t", SynthSpec(ranks=4, steps=4, ops_per_step=10))
    doc = json.loads(files[3].read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("nccl")]
    files[3].write_text(json.dumps(doc))
    with Store(root / "home") as store:
        store.import_traces(files, "straggling")
    yield from _serve(root / "home", "straggling", 4)


def test_why_a_rank_is_a_straggler_is_on_the_page(page: Any, straggling: Served) -> None:
    flagged = [r for r in straggling.expected["ranks"]["rows"] if r["straggler"]]
    assert [r["rank"] for r in flagged] == [3] and "least communication time" in flagged[0]["reason"]
    open_jobs(page, straggling.url)
    load_job(page, straggling.job)
    rows = page.eval_on_selector_all(
        "[data-chart='stragglers'] tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent))"
    )
    assert len(rows) == 1 and rows[0][0] == "3"
    assert rows[0][-1] == flagged[0]["reason"]  # the why, written out, not in a tooltip
