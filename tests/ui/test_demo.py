"""``hyperscope demo`` on a machine without a GPU, in Debian's chromium: the UI opens on the real
GPU recording that ships with hyperscope, and its timeline opens on the first node's GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hyperscope import Store
from hyperscope._samples import H200_JOB
from tests.ui.conftest import screenshot
from tests.ui.harness import missing, ui_server
from tests.ui.test_timeline import TIMEOUT_MS, TL, child_ids, state, wait_tile

pytestmark = pytest.mark.browser


def test_demo_without_a_gpu_opens_the_ui_on_the_real_gpu_recording(page: Any, tmp_path: Path) -> None:
    if missing():
        pytest.skip(missing() or "")
    home = tmp_path / "home"
    seen: list[str] = []
    demo = ("demo", "--synthetic", "--ranks", "1", "--steps", "2")
    with ui_server(home, timeout_s=600, command=demo, seen=seen) as url:
        with Store(home) as store:
            profile_id = store.profile(H200_JOB).meta.profile_id
        opening = next(line for line in seen if line.startswith("opening "))
        assert opening.split()[1] == f"{url}/#/dashboard/{profile_id}"
        page.goto(opening.split()[1])
        page.wait_for_selector("#dashboard:not([hidden])")
        # the dashboard of the H200 recording: its GPU's kernels by name
        page.wait_for_function("() => document.body.innerText.includes('bfloat16')", timeout=TIMEOUT_MS)
        screenshot(page, "demo-gpu-sample-dashboard")
        page.click("a.tab[data-route=timeline]")
        page.wait_for_function(f"() => {TL} && {TL}.state.rows !== null", timeout=TIMEOUT_MS)
        wait_tile(page, 0)
        node = child_ids(page, "job")[0]
        gpu = next(i for i in child_ids(page, node) if i.startswith("gpu/"))
        host = next(i for i in child_ids(page, gpu) if i.startswith("host/"))
        streams = [i for i in child_ids(page, gpu) if i.startswith("stream/")]
        assert state(page, "s.layout.filter(r => r.open).map(r => r.id)") == ["job", node, gpu]
        page.wait_for_function(
            f"(ids) => {{ const s = {TL}.state; "
            "return !s.loading && s.tile && ids.every(i => s.tile.rows.includes(i)); }",
            arg=[host, *streams],
            timeout=TIMEOUT_MS,
        )
        assert state(page, "s.tile.ts.length") > 0
        screenshot(page, "demo-gpu-sample-timeline")
