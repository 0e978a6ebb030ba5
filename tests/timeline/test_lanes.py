"""The first-fit lanes of a row whose events overlap without nesting: the compiled packer
(``timeline/_lanes.c``, through ``store._creader``) gives every event the lane the Python loop
gives it, with ties, zero durations and more lanes than its first allocation holds."""

from __future__ import annotations

import numpy as np
import pytest

from hyperscope.store import _creader
from hyperscope.timeline._build import _first_fit


@pytest.mark.parametrize("seed,spread", [(0, 10), (1, 1_000), (2, 100_000), (3, 1)])
def test_compiled_lanes_are_the_python_lanes(seed: int, spread: int) -> None:
    if _creader.pack_lanes(np.zeros(1, np.int64), np.zeros(1, np.int64)) is None:
        pytest.skip("no C compiler here: the Python loop is the only path (covered by test_tile)")
    rng = np.random.default_rng(seed)
    n = 3_000
    ts = np.sort(rng.integers(0, spread, n))
    dur = rng.integers(0, 5_000, n) * (rng.random(n) > 0.05)  # some of zero length
    order = np.lexsort((-dur, ts))  # start, longer first: the order _depths gets them in
    ts, ends = ts[order], (ts + dur)[order]
    got = _creader.pack_lanes(ts, ends)
    assert got is not None
    want = _first_fit(ts, ends)
    assert np.array_equal(got, want)
    if spread == 1:  # every event starts at once: one lane each but the zero-length ones' reuse
        assert int(got.max()) + 1 > 64
    for lane in np.unique(got):  # no two events of a lane overlap
        mine = got == lane
        assert np.all(ts[mine][1:] >= ends[mine][:-1])
