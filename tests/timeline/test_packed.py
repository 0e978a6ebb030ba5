"""The timeline index as kept on disk: packed columns come back exactly, and the whole index is
a small fraction of the events' own Parquet file."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hyperscope import timeline as tl
from hyperscope.store.profile import Profile
from hyperscope.timeline import _packed


@pytest.mark.parametrize("column", ["src", "perm", "name", "depth", "m_ts"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.int32, np.int64])
def test_columns_come_back_exactly_over_several_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, column: str, dtype: type
) -> None:
    monkeypatch.setattr(_packed, "BLOCK", 1000)
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    values: np.ndarray[Any, Any] = np.concatenate(
        [
            np.sort(rng.integers(0, min(info.max, 2**40), 2500)),  # mostly growing
            rng.integers(max(info.min, -(2**40)), min(info.max, 2**40), 1700),  # noise
            np.array([info.min, info.max, 0]),
        ]
    ).astype(dtype)
    spec = _packed.pack(column, values, tmp_path / "c.zst")
    assert len(spec["frames"]) == 5
    back = _packed.unpack(column, spec, tmp_path / "c.zst")
    assert back.dtype == values.dtype and np.array_equal(back, values)
    # a damaged file is refused, not read as other numbers
    (tmp_path / "c.zst").write_bytes((tmp_path / "c.zst").read_bytes()[:-3])
    with pytest.raises(Exception):  # noqa: B017 - zstd's own error or ours
        _packed.unpack(column, spec, tmp_path / "c.zst")


def test_stored_index_is_small_and_reads_back_the_built_one(generated: Profile) -> None:
    built = tl.build(generated)  # in memory, as a read-only store would
    tl.load(generated)
    where = tl.index.index_dir(generated)
    assert not list(where.glob("*.npy"))
    stored = sum(p.stat().st_size for p in where.iterdir())
    events = sum(p.stat().st_size for p in (generated.path / "events").iterdir())
    assert stored < events, (stored, events)  # it was 4-20x the events before it was packed
    again = tl.index._read(where)
    assert again is not None and again.rows == built.rows and again.names == built.names
    for c in tl.index.COLUMNS:
        a, b = np.asarray(getattr(again, c)), np.asarray(getattr(built, c))
        assert a.dtype == b.dtype and np.array_equal(a, b), c


def test_index_whose_files_are_damaged_is_not_read(generated: Profile, tmp_path: Path) -> None:
    tl.load(generated)
    shutil.copytree(generated.path, tmp_path / "p")
    copy = Profile.open(tmp_path / "p")
    where = tl.index.index_dir(copy)
    assert tl.index._read(where) is not None
    (where / "perm.zst").write_bytes(b"not zstd")
    assert tl.index._read(where) is None
