"""The dashboard's memory view in real Chromium through the real server, on torch.profiler's own
trace of the H200 run (tests/data, recorded with profile_memory): peaks per rank, the allocation
curve whose top is the peak, the largest blocks alive at it; narrowed by the step filter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hyperscope import Store
from hyperscope._samples import H200_TRACE
from hyperscope.analysis import Scope
from hyperscope.analysis.memory import peak_memory
from hyperscope.analysis.memory_view import allocations_at_peak
from tests.ui.conftest import Served, _serve, screenshot
from tests.ui.pages import load_job, open_jobs, option, wait_dashboard

pytestmark = pytest.mark.browser

JOB = "torch211-memory"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("ui-memory") / "home"
    trace = H200_TRACE
    with Store(home) as store:
        store.import_traces([trace], JOB)
    yield from _serve(home, JOB, 1)


def test_memory_view_shows_peaks_curve_and_allocations_and_follows_the_steps(
    page: Any, served: Served
) -> None:
    with Store(served.home) as store:
        profile = store.profile(JOB)
        (peak,) = peak_memory(profile).rows
        allocs = allocations_at_peak(profile).rows
    open_jobs(page, served.url)
    load_job(page, JOB)
    page.locator("#memory-view").scroll_into_view_if_needed()
    text = page.inner_text("[data-chart=memory_peaks]")
    mb = f"{peak.peak_allocated_bytes / 1e6:.2f} MB"
    assert mb in text and "allocator events" in text
    assert peak.peak_reserved_bytes and f"{peak.peak_reserved_bytes / 1e6:.2f} MB" in text
    reserved = max(
        p[1]
        for s in option(page, "memory_curve")["series"]
        if s["name"].endswith("reserved")
        for p in s["data"]
    )  # type: ignore[index]
    assert reserved == peak.peak_reserved_bytes
    curve = option(page, "memory_curve")
    assert curve is not None
    top = max(p[1] for s in curve["series"] if s["name"].endswith("allocated") for p in s["data"])
    assert top == peak.peak_allocated_bytes
    rows = page.eval_on_selector_all("[data-chart=memory_allocations] tbody tr", "rs => rs.length")
    assert rows == len(allocs) == 10
    first = page.inner_text("[data-chart=memory_allocations] tbody tr:first-child")
    assert f"{allocs[0].bytes / 1e6:.2f} MB" in first
    screenshot(page, "dashboard-memory")
    # the step filter narrows it (one dashboard load for both: each costs seconds here)
    with Store(served.home) as store:
        scoped = peak_memory(store.profile(JOB), Scope(steps=(3, 3))).rows
    before = int(page.evaluate("window.__hyperscope.renders"))
    page.fill("#filter-step-from", "3")
    page.fill("#filter-step-to", "3")
    page.click("#filter-apply")
    wait_dashboard(page, before)
    text = page.inner_text("[data-chart=memory_peaks]")
    if scoped:
        assert f"{scoped[0].peak_allocated_bytes / 1e6:.2f} MB" in text
    else:
        assert "No GPU memory" in text
