"""What the dashboard says, in Debian's chromium against the real ``hyperscope ui``, checked against
the store itself (SQL over the events), not only against ``hyperscope.analysis``: communication
kernels are no compute precision, and the "(all N kernels)" bar knows its shortest and longest."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from hyperscope import Store
from hyperscope.analysis import Scope
from hyperscope.store.synth import SynthSpec, write_rank
from tests.ui.conftest import Served, _serve, expected_dashboard
from tests.ui.harness import api
from tests.ui.pages import (
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
