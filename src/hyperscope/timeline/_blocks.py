"""The timeline index's columns kept compressed on disk, cut into blocks decoded one at a time.

The index is derived data counted in the profile's size (docs/store.md), and as plain ``.npy``
columns it was 18-32 bytes an event: 4-20 times the events' own Parquet. Compressed as one piece it
would have to be unpacked whole at a process's first look and held in RAM (3.2 GB at 100M events).
So each column is cut into blocks of ``BLOCK`` entries, each kept on its own (``_codec``: delta-coded
where the column mostly grows, less its minimum in the narrowest unsigned type, byte-shuffled or
not, zstd). A small directory (offset, length, minimum, first value, width and layout per block,
and for sorted columns each block's first value uncompressed) says where everything is, so a
tile decodes only the blocks its window touches, and a binary search over a sorted range reads the
directory first and then one block per probe.

Decoded blocks are shared by every index of the process in one LRU bounded in bytes
(``cache_bytes``, ``HYPERSCOPE_TIMELINE_CACHE_MB``): a server drawing many large profiles holds at
most that much of them, whatever their size.

Reading block by block costs a gather per block on every access (a whole-run tile touches every
block of ``ts`` and ``cum``), several times the CPU of a plain array. So a column whose decoded
size is at most ``1 / WHOLE_SHARE`` of the cache's bound is decoded whole at its first use into
one contiguous array, kept in the same cache (counted in its bytes, evicted as one entry) and read
exactly as an ``.npy`` column would be; only columns too large for that (100M events) are read
block by block.
"""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from hyperscope.timeline._cache import CACHE as CACHE
from hyperscope.timeline._cache import WHOLE as WHOLE
from hyperscope.timeline._cache import BlockCache as BlockCache
from hyperscope.timeline._cache import _Arena
from hyperscope.timeline._cache import cache_bytes as cache_bytes
from hyperscope.timeline._codec import DELTA, decode_block, undo
from hyperscope.timeline._codec import encode_block as encode_block
from hyperscope.timeline._codec import write_column as write_column

#: a column is decoded into one array when its decoded bytes are at most the cache's bound over
#: this (at 10M events the largest column, 80 MB, fits the default 512 MiB; so do all of them
#: together; tests raise it to read block by block)
WHOLE_SHARE = 4
#: a read missing this many blocks decodes half of them in a second thread (a whole-run tile
#: decodes every block of the start times and running sums: at 10M events, twenty million entries)
PARALLEL: Final = 16
#: blocks decoded per hold of a column's lock
FILL: Final = 32


_IDS = iter(range(1 << 62))
_IDS_LOCK = threading.Lock()


class BlockColumn:
    """One stored column, read as an array would be (``col[i]``, ``col[lo:hi]``, ``col[indices]``,
    ``np.asarray(col)``), decoding only the blocks asked for, through :data:`CACHE`."""

    __slots__ = (
        "B",
        "_delta",
        "_dir",
        "_firsts",
        "_id",
        "_lock",
        "_path",
        "_whole_lock",
        "dtype",
        "n",
    )

    def __init__(self, path: Path, name: str, directory: dict[str, Any]) -> None:
        self._path = path
        self._delta = name in DELTA
        self._dir = np.asarray(directory["blocks"], dtype=np.int64).reshape(-1, 6)
        self._firsts = np.asarray(directory.get("firsts", []), dtype=np.int64)
        self.n = int(directory["n"])
        self.dtype = np.dtype(directory["dtype"])
        self.B = int(directory["block"])  # entries per block
        if self.B < 1:
            raise ValueError(f"{path}: blocks of {self.B} entries")
        self._lock = threading.Lock()
        self._whole_lock = threading.Lock()
        with _IDS_LOCK:
            self._id = next(_IDS)
        expected = -(-self.n // self.B)
        if len(self._dir) != expected:
            raise ValueError(f"{path}: {len(self._dir)} blocks for {self.n} entries (expected {expected})")

    def __len__(self) -> int:
        return self.n

    def __del__(self) -> None:
        CACHE.drop(self._id)

    @property
    def nbytes(self) -> int:
        """Bytes on disk."""
        return int(self._dir[:, 1].sum()) if len(self._dir) else 0

    @property
    def ndim(self) -> int:
        return 1

    @property
    def shape(self) -> tuple[int]:
        return (self.n,)

    def fits_whole(self) -> bool:
        """Whether this column is read through one array (its decoded bytes fit the share of the
        cache), else block by block."""
        return bool(self.n * self.dtype.itemsize <= cache_bytes() // WHOLE_SHARE)

    def _arena(self) -> _Arena | None:
        """The column's one array (made empty at its first read), or None when it does not fit."""
        if not self.fits_whole():
            return None
        key = (self._id, WHOLE)
        found: _Arena | None = CACHE.get(key)
        if found is None:
            with self._whole_lock:
                found = CACHE.peek(key)
                if found is None:
                    found = _Arena(self.n, self.dtype, len(self._dir))
                    CACHE.put(key, found)
        return found

    def _fill(self, arena: _Arena, blocks: npt.NDArray[np.intp]) -> None:
        """Decode into ``arena`` those of ``blocks`` it lacks (a block kept from before the column
        fitted is copied, not decoded again). One thread at a time per column, ``FILL`` blocks at a
        time: a tile needing a few blocks waits for a chunk, not for another reader's whole pass."""
        need = blocks[~arena.filled[blocks]]
        for start in range(0, len(need), FILL):
            self._fill_some(arena, need[start : start + FILL])

    def _fill_some(self, arena: _Arena, blocks: npt.NDArray[np.intp]) -> None:
        if not len(blocks):
            return
        with self._whole_lock:
            missing = [int(k) for k in blocks[~arena.filled[blocks]]]
            if not missing:
                return
            with self._lock, self._path.open("rb") as fh:
                if len(missing) > 8:  # one read of the file (a few bytes an entry), not many
                    raw = memoryview(fh.read())
                    pieces = {k: raw[self._dir[k, 0] : self._dir[k, 0] + self._dir[k, 1]] for k in missing}
                else:
                    pieces = {}
                    for k in missing:
                        fh.seek(int(self._dir[k, 0]))
                        pieces[k] = memoryview(fh.read(int(self._dir[k, 1])))
            if len(missing) >= PARALLEL:  # half on a second core (zstd and numpy let go of the GIL)
                half = len(missing) // 2
                other: list[tuple[int, bool]] = []
                helper = threading.Thread(
                    target=lambda: other.append(self._decode_into(arena, missing[half:], pieces)),
                    name="hyperscope-timeline-decode",
                    daemon=True,
                )
                helper.start()
                added, copied = self._decode_into(arena, missing[:half], pieces)
                helper.join()
                if not other:
                    raise RuntimeError(f"{self._path}: blocks {missing[half]}.. were not decoded")
                added, copied = added + other[0][0], copied or other[0][1]
            else:
                added, copied = self._decode_into(arena, missing, pieces)
            arena.count += added
        CACHE.grew((self._id, WHOLE), arena, added * self.dtype.itemsize)
        if copied:
            CACHE.drop(self._id, blocks_only=True)  # now held in the arena

    def _decode_into(self, arena: _Arena, blocks: list[int], pieces: dict[int, Any]) -> tuple[int, bool]:
        """Decode ``blocks`` (their bytes in ``pieces``) where they lie in ``arena``; the entries
        filled, and whether any was copied from a block kept before."""
        import pyarrow as pa

        codec = pa.Codec("zstd")
        added, copied = 0, False
        scratch = None if self.dtype == np.int64 else np.empty(min(self.B, self.n), dtype=np.int64)
        for k in blocks:
            a, b = k * self.B, min(self.n, (k + 1) * self.B)
            cached = CACHE.peek((self._id, k))
            if cached is not None:
                arena.values[a:b] = cached
                copied = True
            else:
                lo, first, size, flat = (int(x) for x in self._dir[k, 2:])
                plain = codec.decompress(pieces[k], (b - a) * size, asbytes=False)
                v = arena.values[a:b] if scratch is None else scratch[: b - a]
                undo(plain, v, lo, first, size, self._delta, bool(flat))
                if scratch is not None:
                    np.copyto(arena.values[a:b], v, casting="unsafe")
            arena.filled[k] = True
            added += b - a
        return added, copied

    def whole(self, decode: bool = True) -> npt.NDArray[Any] | None:
        """The whole column decoded into one read-only array (from the cache when it is there),
        or None when it is too large for that (then it is read block by block), or when it is
        not all decoded yet and ``decode`` is false."""
        if not decode:
            found = CACHE.peek((self._id, WHOLE)) if self.fits_whole() else None
            return found.ro if found is not None and found.complete else None
        arena = self._arena()
        if arena is None:
            return None
        self._fill(arena, np.arange(len(self._dir)))
        return arena.ro

    def block(self, k: int) -> npt.NDArray[Any]:
        """Block ``k``, decoded (from the cache when it is there)."""
        arena = self._arena()
        if arena is not None:
            self._fill(arena, np.asarray([k]))
            return arena.ro[k * self.B : (k + 1) * self.B]
        key = (self._id, k)
        found = CACHE.get(key)
        if found is not None:
            return found  # type: ignore[no-any-return]
        offset, length, *entry = (int(x) for x in self._dir[k])
        with self._lock, self._path.open("rb") as fh:
            fh.seek(offset)
            raw = fh.read(length)
        n = min(self.B, self.n - k * self.B)
        out = decode_block(raw, n, [length, *entry], self._delta, self.dtype)
        out.setflags(write=False)
        CACHE.put(key, out)
        return out

    def _slice(self, lo: int, hi: int) -> npt.NDArray[Any]:
        if hi <= lo:
            return np.zeros(0, self.dtype)
        b0, b1 = lo // self.B, (hi - 1) // self.B
        arena = self._arena()
        if arena is not None:
            self._fill(arena, np.arange(b0, b1 + 1))
            return arena.ro[lo:hi]
        if b0 == b1:
            return self.block(b0)[lo - b0 * self.B : hi - b0 * self.B]
        pieces = [self.block(k) for k in range(b0, b1 + 1)]
        pieces[-1] = pieces[-1][: hi - b1 * self.B]
        pieces[0] = pieces[0][lo - b0 * self.B :]
        return np.concatenate(pieces)

    def _take(self, idx: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        if not len(idx):
            return np.empty(0, dtype=self.dtype)
        which = idx // self.B
        arena = self._arena()
        if arena is not None:
            self._fill(arena, np.flatnonzero(np.bincount(which, minlength=len(self._dir))))
            return arena.ro[idx]
        out = np.empty(len(idx), dtype=self.dtype)
        for k, group in _groups(which):
            out[group] = self.block(k)[idx[group] - k * self.B]
        return out

    def __getitem__(self, key: Any) -> Any:
        w = self.whole(decode=False)
        if w is not None:
            return w[key]
        if isinstance(key, slice):
            start, stop, step = key.indices(self.n)
            got = (
                self._slice(start, max(start, stop)) if step > 0 else self._take(np.arange(start, stop, step))
            )
            return got[::step] if step > 1 else got
        if isinstance(key, int | np.integer):
            i = int(key) + self.n if key < 0 else int(key)
            if not 0 <= i < self.n:
                raise IndexError(f"index {key} is out of bounds for {self.n} entries")
            return self.block(i // self.B)[i % self.B]
        idx = np.asarray(key)
        if idx.dtype == np.bool_:
            if idx.shape != (self.n,):
                raise IndexError(f"a mask of {idx.shape} for {self.n} entries")
            idx = np.flatnonzero(idx)
        shape = idx.shape
        idx = idx.astype(np.int64, copy=False).reshape(-1)
        if len(idx) and (int(idx.min()) < -self.n or int(idx.max()) >= self.n):
            raise IndexError(f"an index is out of bounds for {self.n} entries")
        return self._take(np.where(idx < 0, idx + self.n, idx)).reshape(shape)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> npt.NDArray[Any]:
        out = self._slice(0, self.n)
        if copy:
            out = out.copy()
        return out if dtype is None else out.astype(dtype)

    def searchsorted(
        self, lo: int, hi: int, values: npt.NDArray[Any], side: str = "left"
    ) -> npt.NDArray[np.int64]:
        """``lo + np.searchsorted(self[lo:hi], values, side)`` for a range sorted by value, reading
        the directory and then only the blocks where the answers lie."""
        values = np.asarray(values)
        if hi <= lo:
            return np.full(values.shape, lo, dtype=np.int64)
        w = self.whole(decode=False)
        if w is not None:
            return np.searchsorted(w[lo:hi], values, side=side).astype(np.int64) + lo  # type: ignore[call-overload,no-any-return]
        if not len(self._firsts):  # not a sorted column: read the range
            return np.searchsorted(self._slice(lo, hi), values, side=side).astype(np.int64) + lo  # type: ignore[call-overload,no-any-return]
        b0, b1 = lo // self.B, (hi - 1) // self.B
        # the blocks after b0 start inside the range: their first values are sorted too
        which = b0 + np.searchsorted(self._firsts[b0 + 1 : b1 + 1], values, side=side)  # type: ignore[call-overload]
        arena = self._arena()
        if arena is not None:
            self._fill(arena, np.flatnonzero(np.bincount(which - b0)) + b0)
            if bool(arena.filled[b0 : b1 + 1].all()):  # one search, as in a plain array
                return np.searchsorted(arena.ro[lo:hi], values, side=side).astype(np.int64) + lo  # type: ignore[call-overload,no-any-return]
        out = np.empty(values.shape, dtype=np.int64)
        for k, sel in _groups(which):
            a, b = max(lo, k * self.B), min(hi, (k + 1) * self.B)
            part = self.block(k)[a - k * self.B : b - k * self.B]
            out[sel] = np.searchsorted(part, values[sel], side=side) + a  # type: ignore[call-overload]
        return out


def _groups(which: npt.NDArray[np.int64]) -> list[tuple[int, Any]]:
    """The positions of ``which`` (block numbers) grouped by block: slices where ``which`` is
    sorted (what tiles ask: edges and positions in order), index arrays otherwise."""
    if len(which) == 0:
        return []
    first, last = int(which[0]), int(which[-1])
    if first == last and (len(which) < 3 or bool((which == first).all())):
        return [(first, slice(None))]
    if bool((which[1:] >= which[:-1]).all()):
        cuts = [0, *(np.flatnonzero(which[1:] != which[:-1]) + 1).tolist(), len(which)]
        return [(int(which[a]), slice(a, b)) for a, b in itertools.pairwise(cuts)]
    order = np.argsort(which, kind="stable")
    ranked = which[order]
    cuts = [0, *(np.flatnonzero(ranked[1:] != ranked[:-1]) + 1).tolist(), len(which)]
    return [(int(ranked[a]), order[a:b]) for a, b in itertools.pairwise(cuts)]


def searchsorted(
    column: Any, lo: int, hi: int, values: npt.NDArray[Any], side: str = "left"
) -> npt.NDArray[np.int64]:
    """``lo + np.searchsorted(column[lo:hi], values)``, for plain arrays and :class:`BlockColumn`."""
    if isinstance(column, BlockColumn):
        return column.searchsorted(lo, hi, values, side)
    return np.searchsorted(column[lo:hi], values, side=side).astype(np.int64) + lo  # type: ignore[call-overload,no-any-return]
