"""Collectives across ranks on the dashboard, in real Chromium through the real server: each rank's
wait for the slowest in the collectives matched on every rank, on hand-made traces whose answer
is known (tests/analysis/test_collective_waits.py builds the same)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hyperscope import Store
from tests.analysis.test_collective_waits import _trace
from tests.ui.conftest import Served, _serve
from tests.ui.pages import load_job, open_jobs, option, values

pytestmark = pytest.mark.browser

JOB = "three-ranks-allreduce"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("ui-waits")
    ends = [1000.0 + 1000 * k for k in range(4)]
    late = {1: 100.0, 3: 30.0}  # rank 2 arrives late in the second and fourth all-reduce

    def kernels(r: int) -> list[tuple[float, float]]:  # (start, duration): all end together
        lag = [late.get(k, 0.0) if r == 2 else 0.0 for k in range(4)]
        return [(e - 200 + d, 200 - d) for e, d in zip(ends, lag, strict=True)]

    files = [_trace(root / f"rank{r}.json", r, kernels(r)) for r in range(3)]
    with Store(root / "home") as store:
        store.import_traces(files, JOB)
    yield from _serve(root / "home", JOB, 3)


def test_dashboard_shows_each_ranks_wait_for_the_slowest(page: Any, served: Served) -> None:
    open_jobs(page, served.url)
    load_job(page, JOB)
    got = option(page, "collective_waits")
    assert got is not None
    assert got["xAxis"][0]["data"] == ["rank 0", "rank 1", "rank 2"]
    assert values(got["series"][0]) == [130_000, 130_000, 0]
    notes = page.inner_text("[data-chart=collective_waits] .notes")
    assert "rank 0 arrived last in 2 of 4 collectives" in notes
