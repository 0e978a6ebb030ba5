"""The web UI in Debian's chromium against the real ``hyperscope ui``: find a job, load it, and read
back from every chart the numbers ``hyperscope.analysis`` computes for the same profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hyperscope import Store
from hyperscope.analysis import Scope, annotation_histogram
from hyperscope.store.catalog import JobStatus
from tests.ui.conftest import Served, expected_dashboard, screenshot
from tests.ui.harness import api, ui_server
from tests.ui.pages import (
    TIMEOUT_MS,
    check_charts,
    job_names,
    load_job,
    open_jobs,
    option,
    renders,
    search,
    tooltip_text,
    values,
    wait_dashboard,
    wait_info,
    wait_jobs,
)

pytestmark = pytest.mark.browser

ALL_CHARTS = {
    *("gpu_time_job", "gpu_activity", "memory_ops", "precision", "gpu_utilization_nodes", "gpu_utilization"),
    *("kernels", "kernel_launches", "latency_histogram", "step_histogram", "ranks", "cpu_time"),
    "cpu_utilization",
}
#: every ECharts chart of the dashboard: those check_charts reads, and those of panels/answers.ts
#: (checked in test_dashboard_answers)
DRAWN = ALL_CHARTS | {"idle_causes", "kernel_types", "collective_waits"}


def _search_load_and_check(pg: Any, served: Served, name: str) -> None:
    open_jobs(pg, served.url)
    assert set(job_names(pg)) == {served.job, "other-run"}
    search(pg, served.job[:-3].upper(), [served.job])  # part of the name, any case: the server's search
    screenshot(pg, f"jobs-{name}")
    load_job(pg, served.job)
    assert pg.get_attribute("#loaded-bar", "data-loaded") == "true"
    assert served.job in pg.inner_text("#loaded-bar")
    assert served.profile_id in pg.inner_text("#loaded-bar")
    assert set(check_charts(pg, served.expected)) == ALL_CHARTS
    screenshot(pg, f"dashboard-{name}")


def test_synth_profile_charts_match_analysis(page: Any, synth: Served) -> None:
    _search_load_and_check(page, synth, "synth")
    assert len(option(page, "ranks")["xAxis"][0]["data"]) == 4  # type: ignore[index]


def test_h200_capture_charts_match_analysis(page: Any, h200: Served) -> None:
    _search_load_and_check(page, h200, "h200")
    # tooltips give exact values with units
    pie = tooltip_text(page, "gpu_time_job", 0, 0)
    busy = h200.expected["gpu_time_job"]["rows"][0]["busy_ns"]
    assert "busy" in pie and f"{busy / 1e6:,.3f} ms" in pie and "%" in pie
    kernels = tooltip_text(page, "kernels", 0, 1)
    top = h200.expected["kernels"]["rows"][0]
    assert f"{top['launches']:,}" in kernels and "µs" in kernels and "of kernel time" in kernels
    hist = tooltip_text(page, "latency_histogram", 0, 0)
    assert f"{h200.expected['latency_histogram']['rows'][0]['count']:,} launches" in hist


@pytest.mark.shared
def test_real_trace_charts_match_analysis(page: Any, real: Served) -> None:
    _search_load_and_check(page, real, "real-dlrm")
    assert len(option(page, "ranks")["xAxis"][0]["data"]) == 8  # type: ignore[index]
    # an annotation name with spaces and '#' travels in the path
    name = "## forward ##"
    page.select_option("#add-chart-select", name)
    page.click("#add-chart")
    page.wait_for_selector(f"[data-chart='annotation:{name}'][data-state=ready]", timeout=TIMEOUT_MS)
    with Store(real.home) as store:
        want = annotation_histogram(store.profile(real.job), name, bins=20).to_dict()["rows"]
    got = option(page, f"annotation:{name}")
    assert got is not None and values(got["series"][0]) == [r["count"] for r in want]
    assert sum(r["count"] for r in want) > 0


def test_info_panel(page: Any, h200: Served) -> None:
    open_jobs(page, h200.url)
    load_job(page, h200.job)
    page.click("a[data-route=info]")
    wait_info(page)
    text = page.inner_text("#info")
    assert "NVIDIA H200" in text
    assert page.inner_text("[data-field=Hosts]") == "vm"
    assert page.inner_text("[data-field='World size']") == "1"
    assert page.inner_text("[data-field=Source]") == "capture"
    assert page.inner_text("[data-field=flush_every_steps]") == "10"  # a capture setting
    assert "perf counters unavailable" in text  # the rank's note
    screenshot(page, "info-h200")


def test_unload_with_the_trash_icon(page: Any, synth: Served) -> None:
    open_jobs(page, synth.url)
    load_job(page, synth.job)
    assert page.evaluate("Object.keys(window.__hyperscope.charts).length") == len(DRAWN)
    # the loaded profile survives a reload; the dashboard is queried when shown, at its full size
    page.click("a[data-route=jobs]")
    page.reload()
    page.wait_for_function("() => document.body.dataset.route === 'jobs'", timeout=TIMEOUT_MS)
    assert synth.job in page.inner_text("#loaded-bar")
    page.click("a[data-route=dashboard]")
    page.wait_for_function("() => window.__hyperscope.state === 'ready'", timeout=TIMEOUT_MS)
    page.wait_for_function(
        "() => Object.values(window.__hyperscope.charts).every(c => c.getWidth() > 99 && c.getHeight() > 99)",
        timeout=TIMEOUT_MS,
    )
    assert page.evaluate("Object.keys(window.__hyperscope.charts).length") == len(DRAWN)
    page.click("[data-testid=unload]")
    page.wait_for_selector("#loaded-bar[data-loaded=false]")
    page.wait_for_selector("#dash-placeholder:not([hidden])")
    assert page.evaluate("Object.keys(window.__hyperscope.charts).length") == 0
    assert page.evaluate("window.__hyperscope.state") == "idle"
    assert "No profile loaded" in page.inner_text("#dashboard")
    screenshot(page, "dashboard-unloaded")
    page.click("a[data-route=jobs]")
    assert page.inner_text(f"#jobs-table tr[data-job='{synth.job}'] button") == "Load"


def test_only_one_profile_is_loaded(page: Any, synth: Served) -> None:
    open_jobs(page, synth.url)
    load_job(page, synth.job)
    page.click("a[data-route=jobs]")
    load_job(page, "other-run")
    assert "other-run" in page.inner_text("#loaded-bar")
    assert synth.job not in page.inner_text("#loaded-bar")
    assert len(option(page, "ranks")["xAxis"][0]["data"]) == 1  # type: ignore[index]
    page.click("a[data-route=jobs]")
    loaded = page.eval_on_selector_all("#jobs-table tr.loaded", "rs => rs.map(r => r.dataset.job)")
    assert loaded == ["other-run"]


def test_custom_annotation_chart(page: Any, h200: Served) -> None:
    open_jobs(page, h200.url)
    load_job(page, h200.job)
    offered = page.eval_on_selector_all("#add-chart-select option", "os => os.map(o => o.value)")
    assert offered == api(h200.url, f"/api/profiles/{h200.profile_id}/filters")[1]["annotations"]
    assert "forward" in offered
    page.select_option("#add-chart-select", "forward")
    page.click("#add-chart")
    page.wait_for_selector("[data-chart='annotation:forward'][data-state=ready]", timeout=TIMEOUT_MS)
    with Store(h200.home) as store:
        profile = store.profile(h200.job)
        want = annotation_histogram(profile, "forward", bins=20).to_dict()["rows"]
        scoped = annotation_histogram(profile, "forward", Scope(steps=(5, 20)), bins=20)
        want_scoped = scoped.to_dict()["rows"]
    got = option(page, "annotation:forward")
    assert got is not None and values(got["series"][0]) == [r["count"] for r in want]
    assert sum(r["count"] for r in want) == 40  # one forward per step of the capture
    screenshot(page, "custom-chart-h200")

    # the added chart follows the filter bar
    before = renders(page)
    page.fill("#filter-step-from", "5")
    page.fill("#filter-step-to", "20")
    page.click("#filter-apply")
    wait_dashboard(page, before)
    got = option(page, "annotation:forward")
    assert got is not None and values(got["series"][0]) == [r["count"] for r in want_scoped]
    assert sum(r["count"] for r in want_scoped) == 16

    page.click("[data-chart='annotation:forward'] button[aria-label='Remove chart forward']")
    assert page.query_selector("[data-chart='annotation:forward']") is None
    assert option(page, "annotation:forward") is None


def test_filter_by_rank_and_steps(page: Any, synth: Served) -> None:
    open_jobs(page, synth.url)
    load_job(page, synth.job)
    offered = page.eval_on_selector_all("#filter-rank option", "os => os.map(o => o.value)")
    assert offered == ["0", "1", "2", "3"]  # none chosen: all ranks
    before = renders(page)
    page.select_option("#filter-rank", "2")
    page.click("#filter-apply")
    wait_dashboard(page, before)
    _, want = expected_dashboard(synth.home, synth.job, scope=Scope(ranks=(2,)))
    check_charts(page, want)
    assert option(page, "ranks")["xAxis"][0]["data"] == ["rank 2"]  # type: ignore[index]
    assert "rank 2" in page.inner_text("#dash-status")
    screenshot(page, "dashboard-rank2")

    before = renders(page)
    page.fill("#filter-step-from", "2")
    page.fill("#filter-step-to", "3")
    page.click("#filter-apply")
    wait_dashboard(page, before)
    _, want = expected_dashboard(synth.home, synth.job, scope=Scope(ranks=(2,), steps=(2, 3)))
    check_charts(page, want)

    before = renders(page)
    page.click("#filter-reset")
    wait_dashboard(page, before)
    check_charts(page, synth.expected)

    assert page.eval_on_selector_all("#filter-node option", "os => os.map(o => o.value)") == ["", "node-0"]
    before = renders(page)
    page.select_option("#filter-node", "node-0")
    page.click("#filter-apply")
    wait_dashboard(page, before)
    assert "node node-0" in page.inner_text("#dash-status")
    _, want = expected_dashboard(synth.home, synth.job, scope=Scope(nodes=("node-0",)))
    check_charts(page, want)


def test_top_k_kernels(page: Any, h200: Served) -> None:
    open_jobs(page, h200.url)
    load_job(page, h200.job)
    before = renders(page)
    page.fill("#top-k", "3")
    page.press("#top-k", "Enter")
    wait_dashboard(page, before)
    _, want = expected_dashboard(h200.home, h200.job, top_k=3)
    kernels = want["kernels"]["rows"]
    assert len(kernels) == 4  # 3 and "all kernels"
    got = option(page, "kernels")
    assert got is not None
    assert got["yAxis"][0]["data"] == [kernels[-1]["name"], *(r["name"] for r in kernels[:-1])]
    check_charts(page, want)


def test_api_error_is_shown(page: Any, h200: Served) -> None:
    open_jobs(page, h200.url)
    load_job(page, h200.job)
    # (a reversed step range is refused on the page itself, before any query: test_dashboard_answers)
    status, body = api(h200.url, f"/api/profiles/{h200.profile_id}/dashboard?rank=99")
    assert status == 400
    # a rank the server refuses, as a filter bar of stale choices would send it
    page.evaluate("""() => document.querySelector('#filter-rank').append(new Option('rank 99', '99'))""")
    page.select_option("#filter-rank", "99")
    page.click("#filter-apply")
    page.wait_for_function("() => window.__hyperscope.state === 'error'", timeout=TIMEOUT_MS)
    banner = page.inner_text("#error")
    assert f"Error 400: {body['detail']}" in banner
    assert body["detail"] in page.inner_text("#dash-status")
    screenshot(page, "error-bad-steps")


def test_jobs_filters_sort_and_refresh(page: Any, synth: Served) -> None:
    open_jobs(page, synth.url)
    assert job_names(page) == ["other-run", synth.job]  # newest first
    page.click("#jobs-table th[data-sort=name]")
    wait_jobs(page, ["other-run", synth.job])
    page.click("#jobs-table th[data-sort=name]")
    wait_jobs(page, [synth.job, "other-run"])
    page.click("#jobs-table th[data-sort=ranks]")  # most ranks first
    wait_jobs(page, [synth.job, "other-run"])
    page.fill("#created-before", "2000-01-01T00:00:00")
    wait_jobs(page, [])
    assert "No jobs match" in page.inner_text("#jobs-table")
    page.fill("#created-before", "")
    page.fill("#created-after", "2000-01-01T00:00:00")
    wait_jobs(page, [synth.job, "other-run"])

    with Store(synth.home) as store:
        store.catalog.set_status("other-run", JobStatus.IN_PROGRESS)
    try:
        page.check("input[data-status-filter=InProgress]")
        wait_jobs(page, ["other-run"])
        screenshot(page, "jobs-in-progress")
        page.uncheck("input[data-status-filter=InProgress]")
        wait_jobs(page, [synth.job, "other-run"])
        # a running job: the list refreshes by itself and shows the new status
        with Store(synth.home) as store:
            store.catalog.set_status("other-run", JobStatus.FAILED, "exit 1")
        failed = "#jobs-table tr[data-job='other-run'] [data-status=Failed]"
        page.wait_for_selector(failed, timeout=TIMEOUT_MS)
    finally:
        with Store(synth.home) as store:
            store.catalog.set_status("other-run", JobStatus.COMPLETED)


def test_running_job_dashboard_refreshes(page: Any, synth: Served) -> None:
    with Store(synth.home) as store:
        store.catalog.set_status("other-run", JobStatus.IN_PROGRESS)
    try:
        open_jobs(page, synth.url)
        load_job(page, "other-run")
        assert page.get_attribute("#loaded-bar [data-status]", "data-status") == "InProgress"
        before = renders(page)
        wait_dashboard(page, before)  # re-queried without a click
        with Store(synth.home) as store:
            store.catalog.set_status("other-run", JobStatus.COMPLETED)
        page.wait_for_selector("#loaded-bar [data-status=Completed]", timeout=TIMEOUT_MS)
    finally:
        with Store(synth.home) as store:
            store.catalog.set_status("other-run", JobStatus.COMPLETED)


CPU_ONLY_TRACE = {
    "schemaVersion": 1,
    "traceEvents": [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#0",
            "pid": 1,
            "tid": 1,
            "ts": 1000,
            "dur": 500,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1100, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 1300, "dur": 100},
    ],
}


def test_empty_states(page: Any, tmp_path: Path) -> None:
    """A profile without GPU work: each GPU chart says so instead of drawing an empty chart."""
    trace = tmp_path / "cpu.json"
    trace.write_text(json.dumps(CPU_ONLY_TRACE))
    home = tmp_path / "home"
    with Store(home) as store:
        store.import_traces([trace], "cpu-only")
    _, want = expected_dashboard(home, "cpu-only")
    with ui_server(home) as url:
        open_jobs(page, url)
        load_job(page, "cpu-only")
        check_charts(page, want)
        for name in ("gpu_time_job", "gpu_activity", "gpu_utilization", "gpu_utilization_nodes"):
            card = f"[data-chart='{name}']"
            assert page.get_attribute(card, "data-empty") == "true"
            assert "No GPU activity in this profile" in page.inner_text(card)
        assert "No GPU kernels" in page.inner_text("[data-chart='kernels']")
        assert option(page, "cpu_time") is not None  # the CPU side still draws
        assert page.is_disabled("#add-chart")  # no annotations to offer
        screenshot(page, "dashboard-empty-gpu")


def test_dashboard_link_loads_its_profile(page: Any, synth: Served) -> None:
    page.goto(f"{synth.url}/#/dashboard/{synth.profile_id}")
    wait_dashboard(page)
    page.wait_for_function(
        "(job) => document.querySelector('#loaded-bar').innerText.includes(job)",
        arg=synth.job,
        timeout=TIMEOUT_MS,
    )
    check_charts(page, synth.expected)

    unknown = "0123456789abcdef"
    status, body = api(synth.url, f"/api/profiles/{unknown}")
    assert status == 404
    page.goto(f"{synth.url}/#/dashboard/{unknown}")
    page.wait_for_selector("#error:not([hidden])", timeout=TIMEOUT_MS)
    assert f"Error 404: {body['detail']}" in page.inner_text("#error")
    page.wait_for_selector("#loaded-bar[data-loaded=false]", timeout=TIMEOUT_MS)
