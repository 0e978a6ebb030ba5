"""How the timeline spreads its drawing over frames, in Debian's chromium against the real
``hyperscope ui``: a tile's layer is drawn in slices (the merged columns one row's band at a time)
and ends as the very picture drawn in one go; a zoom begins no layer while its scale keeps changing
(the last one is shown stretched), and draws it once the scale holds. Frame times are the bench's
(bench/timeline_tiles.py --browser); these tests check what is drawn and in how many frames."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hyperscope import Store
from hyperscope.analysis.groundtruth import GroundTruthSpec
from hyperscope.schema.layout import profile_dir
from hyperscope.store.profile import Profile
from hyperscope.timeline import index as timeline_index
from tests.server.conftest import add_generated
from tests.ui.pages import TIMEOUT_MS
from tests.ui.test_timeline import TL, Served, _serve, open_timeline, state, wait_tile

pytestmark = pytest.mark.browser

FEW_RUNS = 2000  # layer.ts: from this many runs of merged columns on, they are written as pixels

# the whole canvas as one number (and how many pixels are not blank): equal pictures, equal sums
PICTURE = """() => { const c = document.getElementById('tl-canvas');
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let h = 0, inked = 0;
  for (let i = 0; i < d.length; i += 4) {
    const v = (d[i] << 16) ^ (d[i + 1] << 8) ^ d[i + 2] ^ (d[i + 3] << 24);
    h = (Math.imul(h, 31) + v) | 0;
    if (d[i] !== 255 || d[i + 1] !== 255 || d[i + 2] !== 255) inked++;
  }
  return [h, inked]; }"""


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Three ranks of 600 steps (~240k events): at the whole run every row is merged columns, in
    more than FEW_RUNS runs; the index kept beside it, as ``hyperscope import`` leaves it."""
    home = tmp_path_factory.mktemp("tl-ui-frames") / "home"
    with Store(home) as store:
        pid = add_generated(store, "busy", GroundTruthSpec(ranks=3, steps=600, kernels_per_step=40))
    timeline_index.store(Profile.open(profile_dir(home, pid)))
    yield from _serve(home, "busy")


def _frames(page: Any) -> list[dict[str, Any]]:
    log = f"() => {TL}.state.frameLog.map(f => ({{ kind: f.kind, t0: f.t0, t1: f.t1 }}))"
    return list(page.evaluate(log))


def _all_rows(page: Any, served: Served) -> None:
    open_timeline(page, served)
    before = state(page, "s.tiles")
    page.evaluate(f"() => {TL}.openAll()")
    wait_tile(page, before)
    page.wait_for_function(f"() => {TL}.settled()", timeout=TIMEOUT_MS)
    # no new tile from here on (each would bring a layer of its own): layers of the tile shown
    page.route("**/timeline/tile?*", lambda route: None)


def test_a_layer_drawn_in_slices_is_the_picture_drawn_at_once(page: Any, busy: Served) -> None:
    """With a budget of 0 ms a frame draws one phase, or one row's band of merged columns, of the
    new layer (the last one shown meanwhile): the layer takes a frame per row of merged columns,
    and the picture it ends on is the one a layer drawn in a single frame gives."""
    _all_rows(page, busy)
    assert state(page, f"{TL}.runs()") >= FEW_RUNS  # the merged columns are written as pixels
    t0, t1 = state(page, "[s.t0, s.t1]")
    page.evaluate(f"() => {{ {TL}.settleMs(0); {TL}.sliceMs(10000); }}")
    whole = page.evaluate(PICTURE)
    assert whole[1] > 0
    page.evaluate(f"([a, b]) => {TL}.setView(a, b)", [t0, t0 + (t1 - t0) * 0.8])  # another scale
    page.wait_for_function(f"() => {TL}.settled()", timeout=TIMEOUT_MS)
    page.evaluate(f"() => {{ {TL}.sliceMs(0); {TL}.state.frameLog = []; }}")
    page.evaluate(f"([a, b]) => {TL}.setView(a, b)", [t0, t1])  # back: the layer drawn anew, in slices
    page.wait_for_function(f"() => {TL}.settled()", timeout=TIMEOUT_MS)
    kinds = [f["kind"] for f in _frames(page)]
    rows = state(page, "new Set(Array.from(s.tile.binRow)).size")
    assert kinds.count("slice") >= rows, (rows, kinds)  # a frame per row's band at least
    assert kinds[-1] in ("draw", "copy"), kinds
    assert page.evaluate(PICTURE) == whole
    page.evaluate(f"() => {{ {TL}.sliceMs(4); {TL}.settleMs(100); {TL}.state.frameLog = null; }}")


def test_a_zoom_begins_no_layer_until_its_scale_holds(page: Any, busy: Served) -> None:
    """Every frame of a wheel burst asks for a new scale: each shows the last layer stretched
    ("preview") and none begins a layer; once the scale holds, the layer of the view the burst
    ended on is drawn, the same picture as when the view is set at once."""
    _all_rows(page, busy)
    # a settling time no burst reaches, so that a loaded machine's slow frames cannot end it early
    page.evaluate(f"() => {{ {TL}.settleMs(600000); {TL}.state.frameLog = []; }}")
    page.evaluate(
        """async () => { const c = document.querySelector('#tl-canvas'), r = c.getBoundingClientRect();
            const at = { clientX: r.left + r.width * 0.6, clientY: r.top + 200, cancelable: true };
            for (let i = 0; i < 12; i++) {
              await new Promise(requestAnimationFrame);
              c.dispatchEvent(new WheelEvent('wheel', { deltaY: i < 8 ? -80 : 80, ...at }));
            }
            await new Promise(requestAnimationFrame); await new Promise(requestAnimationFrame); }"""
    )
    frames = _frames(page)
    assert len({(f["t0"], f["t1"]) for f in frames}) >= 6, frames  # a new view (and scale) per frame or so
    assert {f["kind"] for f in frames} == {"preview"}, frames
    assert not state(page, f"{TL}.settled()")
    end = state(page, "[s.t0, s.t1]")
    page.evaluate(f"() => {TL}.settleMs(0)")  # the scale holds: its layer is drawn
    page.wait_for_function(f"() => {TL}.settled()", timeout=TIMEOUT_MS)
    kinds = [f["kind"] for f in _frames(page)[len(frames) :]]
    assert "draw" in kinds, kinds
    assert state(page, "[s.t0, s.t1]") == end
    burst = page.evaluate(PICTURE)
    # the same view set at once, its layer drawn in one frame
    page.evaluate(f"([a, b]) => {TL}.setView(a, b * 1.01)", end)
    page.wait_for_function(f"() => {TL}.settled()", timeout=TIMEOUT_MS)
    page.evaluate(f"([a, b]) => {TL}.setView(a, b)", end)
    page.wait_for_function(f"() => {TL}.settled()", timeout=TIMEOUT_MS)
    assert page.evaluate(PICTURE) == burst
    page.evaluate(f"() => {{ {TL}.settleMs(100); {TL}.state.frameLog = null; }}")
