"""The index's compressed blocks: what is decoded equals what was written, reads decode only the
blocks asked for, the decoded-block cache never holds more than its bound, small profiles keep no
index on disk, and the earlier ``.npy`` layout still reads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from hyperscope import timeline as tl
from hyperscope.store.profile import Profile
from hyperscope.timeline import _blocks
from hyperscope.timeline._blocks import BlockColumn, decode_block, encode_block, write_column

EDGE_VALUES = [
    np.zeros(0, np.int64),
    np.asarray([7], np.int64),
    np.asarray([np.iinfo(np.int64).min, 0, np.iinfo(np.int64).max, -1, 5], np.int64),
    np.arange(1000, dtype=np.int64) * 1_000_003 + 1_700_000_000_000_000_000,
    np.random.default_rng(1).integers(-(1 << 40), 1 << 40, 777),
]


@pytest.mark.parametrize("values", EDGE_VALUES, ids=["empty", "one", "extremes", "growing", "random"])
@pytest.mark.parametrize("delta", [False, True])
@pytest.mark.parametrize("flat", [False, True], ids=["shuffled", "flat"])
def test_a_block_decodes_to_what_was_encoded(values: np.ndarray, delta: bool, flat: bool) -> None:
    raw, entry = encode_block(values, delta, flat)
    assert entry[4] == flat
    got = decode_block(raw, len(values), entry, delta, np.dtype(np.int64))
    assert got.dtype == np.int64 and np.array_equal(got, values)


def test_narrow_types_come_back_as_written() -> None:
    values = np.asarray([3, 0, 65535, 12], np.uint16)
    raw, entry = encode_block(values, False)
    assert entry[3] == 2  # two bytes a value before zstd
    got = decode_block(raw, 4, entry, False, np.dtype(np.uint16))
    assert got.dtype == np.uint16 and np.array_equal(got, values)


def column(
    tmp_path: Path,
    values: np.ndarray,
    name: str,
    block: int,
    monkeypatch: pytest.MonkeyPatch,
    whole: bool = False,
) -> BlockColumn:
    """A column of ``values`` in blocks of ``block``, decoded whole at first use or (``whole``
    False: no column fits the share) read block by block."""
    monkeypatch.setenv("HYPERSCOPE_TIMELINE_BLOCK", str(block))
    if not whole:
        monkeypatch.setattr(_blocks, "WHOLE_SHARE", 1 << 62)
    directory = write_column(tmp_path / f"{name}.blk", values, name)
    return BlockColumn(tmp_path / f"{name}.blk", name, json.loads(json.dumps(directory)))


@pytest.mark.parametrize("whole", [False, True], ids=["blocks", "whole"])
def test_a_column_reads_as_its_array(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whole: bool) -> None:
    rnd = np.random.default_rng(2)
    values = np.sort(rnd.integers(0, 1 << 50, 5000))
    col = column(tmp_path, values, "ts", 64, monkeypatch, whole)
    assert col.fits_whole() == whole
    assert len(col) == 5000 and col.dtype == np.int64 and np.array_equal(np.asarray(col), values)
    for sl in (
        slice(0, 1),
        slice(63, 65),
        slice(100, 4000),
        slice(4990, 6000),
        slice(10, 2),
        slice(5, 900, 7),
    ):
        assert np.array_equal(col[sl], values[sl]), sl
    idx = rnd.integers(-5000, 5000, 300)
    assert np.array_equal(col[idx], values[idx]) and np.array_equal(col[np.sort(idx)], values[np.sort(idx)])
    assert int(col[-1]) == values[-1] and int(col[64]) == values[64]
    assert np.array_equal(col[values > values[2500]], values[values > values[2500]])
    with pytest.raises(IndexError):
        col[5000]
    with pytest.raises(IndexError):
        col[np.asarray([1, 5000])]


@pytest.mark.parametrize("whole", [False, True], ids=["blocks", "whole"])
def test_searches_equal_numpy_and_decode_only_their_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whole: bool
) -> None:
    """Runs of equal values across block edges, sub-ranges starting and ending mid-block, values
    before and after everything: the answers are numpy's; and, read block by block, a search for
    one value decodes one block, not the range."""
    rnd = np.random.default_rng(3)
    values = np.sort(rnd.integers(0, 400, 3000))  # many repeats, straddling the 64-entry blocks
    col = column(tmp_path, values, "ts", 64, monkeypatch, whole)
    for lo, hi in ((0, 3000), (1, 2999), (64, 128), (70, 71), (500, 500), (130, 2000)):
        probe = np.sort(rnd.integers(-5, 405, 200))
        for side in ("left", "right"):
            want = lo + np.searchsorted(values[lo:hi], probe, side=side)  # type: ignore[call-overload]
            assert np.array_equal(col.searchsorted(lo, hi, probe, side), want), (lo, hi, side)
            shuffled = rnd.permutation(probe)
            want = lo + np.searchsorted(values[lo:hi], shuffled, side=side)  # type: ignore[call-overload]
            assert np.array_equal(col.searchsorted(lo, hi, shuffled, side), want)
    if whole:
        return
    _blocks.CACHE.clear()
    misses = _blocks.CACHE.misses
    col.searchsorted(0, 3000, np.asarray([200]))
    assert _blocks.CACHE.misses - misses == 1


def test_a_column_that_fits_is_one_array_filled_only_where_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads of a column that fits decode only the blocks they touch, into one array whose slices
    are views of it; reading the rest later decodes only the rest, and the whole column is that
    same array, counted once in the cache."""
    values = np.cumsum(np.random.default_rng(5).integers(0, 1000, 5000))
    col = column(tmp_path, values, "ts", 64, monkeypatch, whole=True)
    _blocks.CACHE.clear()
    assert np.array_equal(col[100:200], values[100:200])  # blocks 1 to 3
    arena = _blocks.CACHE.peek((col._id, _blocks.WHOLE))
    assert arena is not None and int(arena.filled.sum()) == 3 and col.whole(decode=False) is None
    assert _blocks.CACHE.nbytes == 3 * 64 * 8
    assert np.shares_memory(col[130:140], col[100:200])  # views of the one array, no copy
    got = col.searchsorted(0, 5000, values[[4000]])
    assert int(got[0]) == int(np.searchsorted(values, values[4000])) and int(arena.filled.sum()) == 4
    idx = np.asarray([1, 4999, 2500, 64])
    assert np.array_equal(col[idx], values[idx]) and int(arena.filled.sum()) == 7
    whole = col.whole()
    assert whole is not None and np.array_equal(whole, values) and not whole.flags.writeable
    assert np.shares_memory(whole, arena.values) and _blocks.CACHE.nbytes == values.nbytes
    assert col.whole(decode=False) is whole


def test_the_decoded_blocks_stay_under_their_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """1 MiB of cache, a 4 MB column read twice over: never more than 1 MiB kept, and what is read
    is still right (blocks dropped are decoded again)."""
    values = np.arange(500_000, dtype=np.int64) * 3
    col = column(tmp_path, values, "ts", 4096, monkeypatch)
    monkeypatch.setenv("HYPERSCOPE_TIMELINE_CACHE_MB", "1")
    _blocks.CACHE.clear()
    peak = 0
    for _ in range(2):
        for start in range(0, len(values), 20_000):
            assert np.array_equal(col[start : start + 20_000], values[start : start + 20_000])
            peak = max(peak, _blocks.CACHE.nbytes)
    assert 0 < peak <= 1 << 20
    assert np.array_equal(np.asarray(col), values) and _blocks.CACHE.nbytes <= 1 << 20
    del col  # a column gone takes its blocks with it
    assert _blocks.CACHE.nbytes == 0


@pytest.mark.parametrize("name", ["ts", "depth"])  # delta-coded, and not
def test_a_column_decoded_whole_equals_its_blocks_and_is_counted_in_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A column that fits a quarter of the cache is decoded whole (at its first wide read) into one array
    equal to its blocks read one by one, counted in the cache's bytes as one entry (its blocks
    read before are dropped), evicted as a unit when other columns need the room, and decoded
    again (still right) when read after. One too large for its share is read block by block."""
    rnd = np.random.default_rng(4)
    values = np.cumsum(rnd.integers(0, 1 << 20, 30_000)) if name == "ts" else rnd.integers(0, 60, 30_000)
    (tmp_path / "b").mkdir()
    by_blocks = column(tmp_path / "b", values, name, 1000, monkeypatch)  # read block by block first
    monkeypatch.setenv("HYPERSCOPE_TIMELINE_CACHE_MB", "1")  # 240 KB a column: a quarter of 1 MiB fits
    _blocks.CACHE.clear()
    blockwise = np.concatenate([by_blocks.block(k) for k in range(30)])
    assert _blocks.CACHE.nbytes == values.nbytes  # its 30 blocks
    monkeypatch.setattr(_blocks, "WHOLE_SHARE", 4)
    assert by_blocks.fits_whole()
    whole = by_blocks.whole()
    assert whole is not None and whole.dtype == values.dtype and not whole.flags.writeable
    assert np.array_equal(whole, blockwise) and np.array_equal(whole, values)
    assert _blocks.CACHE.nbytes == values.nbytes  # one entry now, the blocks dropped
    assert by_blocks.whole() is whole and np.shares_memory(np.asarray(by_blocks), whole)
    others = []
    for i in range(5):  # 5 more such columns: 6 x 240 KB > 1 MiB, the first read is evicted
        (tmp_path / f"o{i}").mkdir()
        others.append(column(tmp_path / f"o{i}", values + i, name, 1000, monkeypatch, whole=True))
        assert np.array_equal(others[-1][:10], values[:10] + i)  # one block: not decoded whole yet
        assert others[-1].whole(decode=False) is None
        assert np.array_equal(others[-1][:], values + i)  # all of it: decoded whole
        assert others[-1].whole(decode=False) is not None
        assert _blocks.CACHE.nbytes <= 1 << 20
    assert _blocks.CACHE.nbytes == 4 * values.nbytes
    again = by_blocks.whole()
    assert again is not None and again is not whole and np.array_equal(again, values)
    assert _blocks.CACHE.nbytes == 4 * values.nbytes
    monkeypatch.setattr(_blocks, "WHOLE_SHARE", 8)  # 128 KB a column now: block by block
    assert not by_blocks.fits_whole() and by_blocks.whole() is None
    assert np.array_equal(by_blocks[5:29_000], values[5:29_000])
    del by_blocks, others, whole, again
    assert _blocks.CACHE.nbytes == 0


def test_a_stored_index_is_blocks_far_smaller_than_its_arrays(generated: Profile) -> None:
    index = tl.load(generated)
    where = tl.index.index_dir(generated)
    assert sorted(p.name for p in where.iterdir()) == sorted(
        [tl.index.META, *(f"{c}.blk" for c in (*tl.index.COLUMNS, *tl.overview.COLUMNS))]
    )
    stored = sum(p.stat().st_size for p in where.iterdir() if not p.name.startswith("ov_"))
    plain = sum(np.asarray(getattr(index, c)).nbytes for c in tl.index.COLUMNS)
    assert stored * 4 < plain


def test_a_stored_index_keeps_its_step_list(generated: Profile) -> None:
    """A stored index answers ``steps`` from its directory (no event decoded for it), the same list
    as computed from the events' columns."""
    stored = tl.load(generated)
    assert stored.stored_steps is not None and tl.index._mapped(stored)
    in_memory = tl.index.build(generated)
    assert in_memory.stored_steps is None
    want = tl.steps(in_memory)
    assert len(want) == 30 and tl.steps(stored) == want
    _blocks.CACHE.clear()
    assert tl.steps(tl.index._read(tl.index.index_dir(generated))) == want  # type: ignore[arg-type]
    assert _blocks.CACHE.nbytes == 0


def test_a_small_profile_keeps_no_index_on_disk(
    tmp_path: Path, generated: Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``TIMELINE_STORE_MIN_EVENTS`` the index is built in memory at the first view and answers the
    same tiles as a stored one."""
    copy = tmp_path / "p"
    shutil.copytree(generated.path, copy, ignore=shutil.ignore_patterns("derived"))
    small = Profile.open(copy)
    monkeypatch.setenv("HYPERSCOPE_TIMELINE_STORE_MIN", str(small.meta.events + 1))
    assert not tl.index.store(small)
    assert not list((copy / "derived").glob("timeline-*"))
    index = tl.load(small)
    assert not list((copy / "derived").glob("timeline-*")) and not tl.index._mapped(index)
    stored = tl.load(generated)
    rows = [r.id for r in stored.rows][:8]
    lo, hi = tl.index.span(stored)
    assert tl.encode(tl.tile(index, rows, lo, hi, 700)) == tl.encode(tl.tile(stored, rows, lo, hi, 700))


def test_a_full_disk_while_a_column_is_packed_keeps_no_index(
    tmp_path: Path, generated: Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The columns are compressed on threads of their own: a write that fails on one of them fails
    the store (no index, no staging folder left), and the next store builds the whole index."""
    import errno

    copy = tmp_path / "p"
    shutil.copytree(generated.path, copy, ignore=shutil.ignore_patterns("derived"))
    profile = Profile.open(copy)
    monkeypatch.setenv("HYPERSCOPE_TIMELINE_STORE_MIN", "1")
    real = _blocks.write_column
    failed: list[str] = []

    def full_at_cum(path: Path, values: np.ndarray, name: str) -> dict[str, object]:
        if name == "cum":
            failed.append(name)
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, values, name)

    monkeypatch.setattr(_blocks, "write_column", full_at_cum)
    assert not tl.index.store(profile)
    assert failed == ["cum"]
    assert [p.name for p in (copy / "derived").iterdir()] == []
    monkeypatch.setattr(_blocks, "write_column", real)
    assert tl.index.store(profile)
    stored, want = tl.index._read(tl.index.index_dir(profile)), tl.load(generated)
    assert stored is not None
    rows = [r.id for r in want.rows]
    lo, hi = tl.index.span(want)
    assert tl.encode(tl.tile(stored, rows, lo, hi, 900)) == tl.encode(tl.tile(want, rows, lo, hi, 900))


def test_the_earlier_npy_layout_still_reads(tmp_path: Path, generated: Profile) -> None:
    """An index an earlier version stored (``.npy`` columns and ``meta.json``) is memory-mapped and
    answers as the blocks do."""
    old = tmp_path / "timeline-old"
    old.mkdir()
    tl.index.build(generated, old)
    assert (old / "meta.json").is_file() and (old / "ts.npy").is_file()
    earlier = tl.index._read(old)
    assert earlier is not None and tl.index._mapped(earlier)
    stored = tl.load(generated)
    rows = [r.id for r in stored.rows]
    lo, hi = tl.index.span(stored)
    for t0, t1 in ((lo, hi), (lo + (hi - lo) // 3, lo + (hi - lo) // 3 + 50_000)):
        assert tl.encode(tl.tile(earlier, rows, t0, t1, 900)) == tl.encode(tl.tile(stored, rows, t0, t1, 900))


def test_a_damaged_block_directory_is_no_index(tmp_path: Path, generated: Profile) -> None:
    """A directory that does not match its column reads as no index (rebuilt), never as wrong data."""
    tl.load(generated)
    copy = tmp_path / "t"
    shutil.copytree(tl.index.index_dir(generated), copy)
    (copy / tl.index.META).write_bytes(b"hs-zstd1 broken")
    assert tl.index._read(copy) is None


def test_tiles_are_the_same_through_one_array_through_blocks_and_in_memory(
    generated: Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every row, the whole run and zooms down to a microsecond at random places: the stored index
    read through one array per column (filled as tiles ask), read block by block (columns too
    large for their share, a cache of 1 MiB that evicts as it goes) and the index built in memory
    answer the same bytes."""
    import random

    in_memory = tl.index.build(generated)
    rows = [r.id for r in in_memory.rows]
    lo, hi = tl.index.span(in_memory)
    rnd = random.Random(11)
    windows = [(lo, hi + 1, 1400), (lo, hi + 1, 333)]
    for span in (hi - lo, (hi - lo) // 10, (hi - lo) // 100, 100_000, 10_000, 1_000):
        for _ in range(3):
            a = rnd.randrange(lo - span // 4, hi)
            windows.append((a, a + span, rnd.choice([64, 800, 1600])))
    want = [tl.encode(tl.tile(in_memory, rows, t0, t1, w)) for t0, t1, w in windows]
    where = tl.index.index_dir(generated)
    tl.load(generated)
    _blocks.CACHE.clear()
    arrays = tl.index._read(where)
    assert arrays is not None and arrays.ts.fits_whole()
    assert [tl.encode(tl.tile(arrays, rows, t0, t1, w)) for t0, t1, w in windows] == want
    monkeypatch.setattr(_blocks, "WHOLE_SHARE", 1 << 62)
    monkeypatch.setenv("HYPERSCOPE_TIMELINE_CACHE_MB", "1")
    blocks = tl.index._read(where)
    assert blocks is not None and not blocks.ts.fits_whole()
    assert [tl.encode(tl.tile(blocks, rows, t0, t1, w)) for t0, t1, w in windows] == want
    assert _blocks.CACHE.nbytes <= 1 << 20
