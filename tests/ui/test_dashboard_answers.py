"""What the dashboard says, in Debian's chromium against the real ``hyperscope ui``, checked against
the store itself (SQL over the events), not only against ``hyperscope.analysis``: communication
kernels are no compute precision, and the "(all N kernels)" bar knows its shortest and longest."""

from __future__ import annotations

import re
from typing import Any

import pytest

from hyperscope import Store
from tests.ui.conftest import Served
from tests.ui.pages import load_job, names, open_jobs, option, tooltip_text, values

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
