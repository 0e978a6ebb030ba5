"""The Compare tab in real Chromium through the real ``hyperscope ui`` server: two profiles (B = A
with one kernel slowed by a known amount), then two ranks of one profile; the summary, the steps
side by side and the kernel table show what the analysis computed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from hyperscope import Store
from hyperscope.analysis import ALL, compare
from hyperscope.analysis.groundtruth import GroundTruthSpec
from hyperscope.schema.layout import profile_dir
from hyperscope.store.profile import Profile
from tests.server.conftest import add_generated
from tests.server.test_compare import SLOWED, D, add_slowed
from tests.ui.conftest import screenshot
from tests.ui.harness import missing, ui_server

SPEC = GroundTruthSpec(ranks=2, steps=6)


@dataclass(frozen=True)
class Pair:
    url: str
    a: str
    b: str
    line: str


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    if missing():
        pytest.skip(missing() or "")
    home = tmp_path_factory.mktemp("ui-compare") / "home"
    with Store(home) as store:
        a = add_generated(store, "before", SPEC)
        b = add_slowed(store, "after", a, {SLOWED: D})
        expected = compare(
            (Profile.open(profile_dir(home, a)), ALL), (Profile.open(profile_dir(home, b)), ALL)
        ).summary.line
    with ui_server(home) as url:
        yield Pair(url, a, b, expected)


def test_compare_two_profiles_then_two_ranks(page: Any, pair: Pair) -> None:
    page.goto(f"{pair.url}/#/compare")
    page.wait_for_selector(f"[data-compare=profile-a] option[value='{pair.a}']", state="attached")
    page.select_option("[data-compare=profile-a]", pair.a)
    page.select_option("[data-compare=profile-b]", pair.b)
    page.click("[data-compare=run]")
    page.wait_for_function(
        "() => document.querySelector('[data-compare=summary]').textContent.startsWith('step time')"
    )
    assert page.text_content("[data-compare=summary]") == pair.line
    assert "beyond noise" in pair.line and SLOWED in pair.line
    # the same step of each run side by side: six bars a lane, B's each taller by the slowdown
    for side in ("a", "b"):
        steps = page.eval_on_selector_all(
            f"[data-table=step_pairs] .step-bar-{side}", "els => els.map(e => e.dataset.step)"
        )
        assert steps == [str(s) for s in range(SPEC.steps)]
    heights = page.eval_on_selector_all(
        "[data-table=step_pairs] .step-bar",
        "els => els.map(e => [e.dataset.index, e.classList[1], e.offsetHeight])",
    )
    by = {(i, side): hgt for i, side, hgt in heights}
    assert all(by[(str(i), "step-bar-b")] > by[(str(i), "step-bar-a")] for i in range(SPEC.steps))
    first = page.eval_on_selector(
        "[data-table=kernels] tbody tr", "tr => [...tr.children].map(td => td.textContent)"
    )
    assert first[:4] == [SLOWED, "name", "24", "24"] and first[-1] == "100 %"
    assert first[-2] == "40 µs"  # 2 launches a step, each 20 µs longer
    for key in ("steps", "gpu_time", "operators", "memory", "collectives"):
        assert page.locator(f"[data-table={key}] h3").count() == 1, key
    screenshot(page, "compare-two-profiles")

    page.select_option("[data-compare=profile-b]", "")  # same as A
    page.fill("[data-compare=rank-a]", "0")
    page.fill("[data-compare=rank-b]", "1")
    page.click("[data-compare=run]")
    page.wait_for_function(
        "() => document.querySelector('[data-compare=summary]').textContent.includes('no change')"
    )
    assert page.text_content("[data-compare=summary]") == "step time +0.0 % (within noise); no change"
    assert "before rank 0" in page.text_content(".compare-results") and "before rank 1" in page.text_content(
        ".compare-results"
    )


LANES = "() => window.__hyperscope.compareTimelines?.lanes"


def _lanes_settled(page: Any, step: str) -> list[dict[str, Any]]:
    """Both lanes aligned on ``step`` with a tile drawn and none on its way."""
    page.wait_for_function(
        f"""() => {{
            const l = window.__hyperscope.compareTimelines?.lanes;
            return l && l.length === 2 && l.every(s => s.step === {step!r} && s.tiles > 0 && !s.loading
                && s.stepX !== null && s.error === null);
        }}""",
        timeout=60_000,
    )
    lanes: list[dict[str, Any]] = page.evaluate(LANES)
    return lanes


def _inked(page: Any, side: str) -> int:
    """Non-white pixels right of the row labels in a lane's canvas: what the tile drew."""
    return int(
        page.eval_on_selector(
            f"[data-lane={side}] canvas",
            """c => {
                const d = c.getContext('2d').getImageData(300, 30, c.width - 300, c.height - 30).data;
                let n = 0;
                for (let i = 0; i < d.length; i += 4) if (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200) n++;
                return n;
            }""",
        )
    )


def test_stacked_timelines_align_the_same_step(page: Any, pair: Pair) -> None:
    page.goto(f"{pair.url}/#/compare")
    page.wait_for_selector(f"[data-compare=profile-a] option[value='{pair.a}']", state="attached")
    page.select_option("[data-compare=profile-a]", pair.a)
    page.select_option("[data-compare=profile-b]", pair.b)
    page.click("[data-compare=run]")
    a, b = _lanes_settled(page, "ProfilerStep#0")
    assert (a["profile"], b["profile"]) == (pair.a, pair.b)
    # one scale and one offset from each lane's step start: the step starts at the same x in both
    assert abs(a["stepX"] - b["stepX"]) < 0.5
    assert abs((a["t0"] - a["stepStart"]) - (b["t0"] - b["stepStart"])) < 1
    assert abs((a["t1"] - a["t0"]) - (b["t1"] - b["t0"])) < 1
    # B's step is the longer (its kernel slowed), so its end line is further right, by the difference
    ns_per_px = (a["t1"] - a["t0"]) / (
        page.eval_on_selector("[data-lane=a] canvas", "c => c.clientWidth") - 280
    )
    assert b["stepDur"] > a["stepDur"]
    assert abs((b["stepEndX"] - a["stepEndX"]) - (b["stepDur"] - a["stepDur"]) / ns_per_px) < 1
    for side, lane in (("a", a), ("b", b)):
        assert lane["events"] + lane["merged"] > 0, side
        assert _inked(page, side) > 1000, side
        assert any(r.startswith("gpu/") for r in lane["rows"]), lane["rows"]

    page.click("[data-table=step_pairs] .step-bar-b[data-index='3']")
    a, b = _lanes_settled(page, "ProfilerStep#3")
    assert abs(a["stepX"] - b["stepX"]) < 0.5 and a["stepStart"] > 0

    # a wheel zoom over A zooms both lanes around the same offset from their step's start
    span = a["t1"] - a["t0"]
    page.hover("[data-lane=a] canvas", position={"x": 600, "y": 100})
    page.mouse.wheel(0, -300)
    page.wait_for_function(
        f"() => window.__hyperscope.compareTimelines.lanes.every(s => s.t1 - s.t0 < {span * 0.9})"
    )
    a, b = _lanes_settled(page, "ProfilerStep#3")
    # and each lane ends on its layer at the new scale, not on the stretched preview of the zoom
    page.wait_for_function(
        "() => window.__hyperscope.compareTimelines.lanes.every(s => ['draw', 'copy'].includes(s.painted))"
    )
    assert abs((a["t0"] - a["stepStart"]) - (b["t0"] - b["stepStart"])) < 1
    assert abs(a["stepX"] - b["stepX"]) < 0.5
    screenshot(page, "compare-stacked-timelines")

    # two ranks of one profile: each lane shows only its rank's GPU rows
    page.select_option("[data-compare=profile-b]", "")
    page.fill("[data-compare=rank-a]", "0")
    page.fill("[data-compare=rank-b]", "1")
    page.click("[data-compare=run]")
    page.wait_for_function(
        "() => document.querySelector('[data-compare=summary]').textContent.includes('no change')"
    )
    a, b = _lanes_settled(page, "ProfilerStep#0")
    assert a["profile"] == b["profile"] == pair.a
    assert any(r.startswith("gpu/0/") for r in a["rows"]) and not any(
        r.startswith("gpu/1/") for r in a["rows"]
    )
    assert any(r.startswith("gpu/1/") for r in b["rows"]) and not any(
        r.startswith("gpu/0/") for r in b["rows"]
    )
    assert abs(a["stepX"] - b["stepX"]) < 0.5
