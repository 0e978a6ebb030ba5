"""The overview kept with a stored index: at every cell width it keeps, tiles read from it equal the
events (brute force, the index built in memory, every row), a wide tile read from it decodes no
block of the start times or running sums, and ``snap`` widens a window only to cells it keeps."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from hyperscope import timeline as tl
from hyperscope.store.profile import Profile
from hyperscope.timeline import _blocks, overview
from hyperscope.timeline.tile import MAX_WIDTH
from tests.timeline.conftest import add_instants
from tests.timeline.test_tile import brute_rows, check_tile


@pytest.mark.parametrize("which", ["generated", "h200"])
def test_every_part_of_the_overview_is_what_the_events_give(
    which: str, request: pytest.FixtureRequest
) -> None:
    """The stored overview equals one computed from the index built in memory, and each of its
    values is a plain numpy search and running sum over that level's events."""
    profile: Profile = request.getfixturevalue(which)
    stored = tl.load(profile)
    assert tl.index._mapped(stored) and stored.overview is not None
    in_memory = tl.index.build(profile)
    assert in_memory.overview is None
    want = overview.build_in_memory(in_memory)
    assert stored.overview.parts == want.parts and len(want.parts) > 0
    assert np.array_equal(np.asarray(stored.overview.s), want.s)
    assert np.array_equal(np.asarray(stored.overview.c), want.c)
    ts, dur = np.asarray(in_memory.ts), np.asarray(in_memory.dur)
    by_id = in_memory.by_id
    for (row, d, level), part in list(want.parts.items())[:: max(1, len(want.parts) // 40)]:
        info = by_id[row]
        lo, hi = info.depth_starts[d], info.depth_starts[d + 1]
        edges = (part.c0 + np.arange(part.m + 1)) << level
        starts, ends = ts[lo:hi], ts[lo:hi] + dur[lo:hi]
        s = want.s[part.offset : part.offset + part.m + 1]
        c = want.c[part.offset : part.offset + part.m + 1]
        assert np.array_equal(s, lo + np.searchsorted(starts, edges, side="left"))
        # busy time between consecutive edges, summed event by event
        busy = [
            int(np.clip(np.minimum(ends, b) - np.maximum(starts, a), 0, None).sum())
            for a, b in itertools.pairwise(edges.tolist())
        ]
        assert np.diff(c).tolist() == busy


def aligned_windows(index: tl.Index, rnd: random.Random) -> list[tuple[int, int, int]]:
    """For every cell width the overview keeps: the whole run and a window at a random place."""
    assert index.overview is not None
    lo, hi = tl.index.span(index)
    out = []
    for level in sorted(index.overview.levels):
        g = 1 << level
        t0 = (lo // g) * g
        width = min(MAX_WIDTH, -(-(hi - t0) // g))
        out.append((t0, t0 + width * g, width))
        a = (rnd.randrange(lo, hi) // g) * g
        w = rnd.choice([1, 7, 300, 1600])
        out.append((a, a + w * g, w))
    return out


@pytest.mark.parametrize("which", ["generated", "h200", "instants"])
def test_tiles_at_every_cell_width_equal_the_events(
    which: str, request: pytest.FixtureRequest, tmp_path: object
) -> None:
    """Tiles on the overview's cells, every row: byte-equal to the index built in memory (no
    overview: read from the events) and, on a sample of rows, to brute force."""
    import shutil
    from pathlib import Path

    if which == "instants":  # instants on rows with events and on rows without
        base: Profile = request.getfixturevalue("generated")
        copy = Path(str(tmp_path)) / "p"
        shutil.copytree(base.path, copy, ignore=shutil.ignore_patterns("derived"))
        add_instants(Profile.open(copy))
        profile = Profile.open(copy)
    else:
        profile = request.getfixturevalue(which)
    stored = tl.load(profile)
    in_memory = tl.index.build(profile)
    rows = [r.id for r in in_memory.rows]
    rnd = random.Random(8)
    windows = aligned_windows(stored, rnd)
    assert len(windows) >= 8
    for t0, t1, width in windows:
        assert overview.aligned(t0, t1, width) is not None
        got = tl.encode(tl.tile(stored, rows, t0, t1, width))
        assert got == tl.encode(tl.tile(in_memory, rows, t0, t1, width)), (t0, t1, width)
    truth = brute_rows(profile)  # the rows of events (brute force knows no instants)
    for t0, t1, width in windows[::3]:
        check_tile(stored, truth, rnd.sample(sorted(truth), min(6, len(truth))), t0, t1, width)


def test_a_wide_tile_on_the_overview_decodes_no_start_time(generated: Profile) -> None:
    """The whole run on the overview's cells reads a few blocks of the start times and running
    sums (the wide events'), where the same window off the cells reads most of them."""
    where = tl.index.index_dir(generated)
    tl.load(generated)
    rows = [r.id for r in tl.load(generated).rows]
    lo, hi = tl.index.span(tl.load(generated))
    width = 16  # pixels that few events fill: the others are merged, read from the overview
    for snapped in (True, False):
        _blocks.CACHE.clear()
        index = tl.index._read(where)
        assert index is not None and index.overview is not None
        t0, t1, width = tl.snap(index, lo, hi, width) if snapped else (lo, hi, width)
        assert (overview.aligned(t0, t1, width) is not None) == snapped
        tl.tile(index, rows, t0, t1, width)
        arena = _blocks.CACHE.peek((index.ts._id, _blocks.WHOLE))
        filled = 0 if arena is None else int(arena.filled.sum())
        if snapped:
            assert filled <= len(index.ts._dir) // 4, (filled, len(index.ts._dir))
        else:
            assert filled > len(index.ts._dir) // 2


def test_snap_widens_to_kept_cells_only(generated: Profile) -> None:
    index = tl.load(generated)
    assert index.overview is not None
    lo, hi = tl.index.span(index)
    a, b = lo + 12_345, hi - 999
    snapped = 0
    for width in (1, 3, 10, 40, 333, 1600):
        t0, t1, w = tl.snap(index, a, b, width)
        level = (-(-(b - a) // width) - 1).bit_length()  # the power of two at or above the pixel
        if level not in index.overview.levels:
            assert (t0, t1, w) == (a, b, width)
            continue
        snapped += 1
        assert overview.aligned(t0, t1, w) == level
        assert t0 <= a and t1 >= b and w <= width + 1 and t1 - t0 < (b - a) + 2 * (1 << level)
        px = (b - a) / width
        assert px <= 1 << level < 2 * px
    assert snapped >= 3
    # pixels finer than the finest cells kept, or no overview: the window as asked
    fine = 1 << min(index.overview.levels)
    assert tl.snap(index, lo, lo + fine * 10, 40) == (lo, lo + fine * 10, 40)
    assert overview.snap(None, lo, hi, 100, MAX_WIDTH) == (lo, hi, 100)
    assert tl.snap(tl.index.build(generated), lo, hi, 100) == (lo, hi, 100)


def test_a_damaged_overview_is_no_index(generated: Profile, tmp_path: object) -> None:
    """An overview part past its columns reads as no index (rebuilt), never as wrong tiles."""
    import json
    import shutil
    from pathlib import Path

    from hyperscope.store.derived import read_packed, write_packed

    tl.load(generated)
    copy = Path(str(tmp_path)) / "t"
    shutil.copytree(tl.index.index_dir(generated), copy)
    meta = json.loads(read_packed(copy / tl.index.META))
    meta["overview"]["parts"][0][4] += 10**9
    write_packed(copy / tl.index.META, json.dumps(meta).encode())
    assert tl.index._read(copy) is None
