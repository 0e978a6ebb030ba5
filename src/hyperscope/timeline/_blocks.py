"""The timeline index's columns kept compressed on disk, cut into blocks decoded one at a time.

The index is derived data counted in the profile's size (docs/store.md), and as plain ``.npy``
columns it was 18-32 bytes an event: 4-20 times the events' own Parquet. Compressed as one piece it
would have to be unpacked whole at a process's first look and held in RAM (3.2 GB at 100M events).
So each column is cut into blocks of ``BLOCK`` entries, each kept on its own: delta-coded where the
column mostly grows, less its minimum in the narrowest unsigned type, byte-shuffled, zstd. A small
directory (offset, length, minimum, first value, width per block, and for sorted columns each
block's first value uncompressed) says where everything is, so a tile decodes only the blocks its
window touches, and a binary search over a sorted range reads the directory first and then one
block per probe.

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
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

#: entries per block: 64k (0.5 MB of int64 decoded), a few hundred microseconds to decode; kept in
#: each column's directory, so ``HYPERSCOPE_TIMELINE_BLOCK`` (tests: blocks of a few hundred) only
#: changes what is written
BLOCK: Final = 1 << 16
ZSTD_LEVEL: Final = 9
#: columns coded as differences of consecutive entries (they grow within a row's level)
DELTA: Final = frozenset({"ts", "cum", "pts", "m_ts", "src", "m_src"})
#: columns sorted within the ranges the tiles search: their blocks' first values are kept apart
SORTED: Final = frozenset({"ts", "m_ts"})
_WIDTHS: Final = (np.uint8, np.uint16, np.uint32, np.uint64)
#: a column decoded whole when its decoded bytes are at most the cache's bound over this (at 10M
#: events the largest column, 80 MB, fits the default 512 MiB; so do all of them together; tests
#: raise it to read block by block)
WHOLE_SHARE = 4
#: a column is decoded whole by the first slice or gather after which at least 1 / WIDE of its
#: blocks will have been read (the whole run's tile reads every block of the start times and
#: running sums); until then reads and searches decode only their blocks (a search, the list of
#: steps or a short window's tile touches a few blocks of a column: decoding all of it for them
#: would cost many times as much); the blocks already decoded are copied, not decoded again
WIDE: Final = 2
#: the block number under which a column decoded whole is kept in the cache
WHOLE: Final = -1


def block_size() -> int:
    """Entries per block written now (``BLOCK``, else ``HYPERSCOPE_TIMELINE_BLOCK``)."""
    try:
        return max(1, int(os.environ.get("HYPERSCOPE_TIMELINE_BLOCK", BLOCK)))
    except ValueError:
        return BLOCK


def cache_bytes() -> int:
    """The bound on decoded blocks kept by this process (default 512 MiB: the 355 MiB that the
    tiles of bench/timeline_tiles.py touched at 10M events fit)."""
    try:
        return max(1, int(os.environ.get("HYPERSCOPE_TIMELINE_CACHE_MB", "512"))) << 20
    except ValueError:
        return 512 << 20


class BlockCache:
    """Decoded blocks, least recently used first, never more than ``limit()`` bytes in all (but
    the block being returned)."""

    def __init__(self) -> None:
        self._blocks: OrderedDict[tuple[int, int], npt.NDArray[Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.nbytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[int, int]) -> npt.NDArray[Any] | None:
        with self._lock:
            found = self._blocks.get(key)
            if found is None:
                self.misses += 1
                return None
            self.hits += 1
            self._blocks.move_to_end(key)
            return found

    def put(self, key: tuple[int, int], block: npt.NDArray[Any]) -> None:
        """Keep ``block``, unless its whole column is kept already (decoded by another thread)."""
        limit = cache_bytes()
        with self._lock:
            if key in self._blocks or (key[0], WHOLE) in self._blocks:
                return
            self._blocks[key] = block
            self.nbytes += block.nbytes
            while self.nbytes > limit and len(self._blocks) > 1:
                _, old = self._blocks.popitem(last=False)
                self.nbytes -= old.nbytes

    def peek(self, key: tuple[int, int]) -> npt.NDArray[Any] | None:
        """What ``get`` answers, but counted neither as a hit nor a miss, nor made recent."""
        with self._lock:
            return self._blocks.get(key)

    def drop(self, owner: int) -> None:
        """Forget the blocks of one column (its index is gone)."""
        with self._lock:
            for key in [k for k in self._blocks if k[0] == owner]:
                self.nbytes -= self._blocks.pop(key).nbytes

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()
            self.nbytes = 0


#: the process's decoded blocks (all indexes together)
CACHE: Final = BlockCache()
_IDS = iter(range(1 << 62))
_IDS_LOCK = threading.Lock()


def _codec() -> Any:
    import pyarrow as pa

    return pa.Codec("zstd", ZSTD_LEVEL)


def encode_block(values: npt.NDArray[Any], delta: bool) -> tuple[bytes, list[int]]:
    """One block's bytes and its directory entry ``[length, minimum, first, width]``."""
    v = np.asarray(values, dtype=np.int64)
    first = int(v[0]) if len(v) else 0
    if delta and len(v):
        v = np.diff(v, prepend=v[:1])
    lo = int(v.min()) if len(v) else 0
    span = int(v.max()) - lo if len(v) else 0
    width = next(w for w in _WIDTHS if span <= np.iinfo(w).max)
    narrow = (v - lo).astype(width)
    shuffled = narrow.view(np.uint8).reshape(-1, narrow.itemsize).T.tobytes()
    packed = _codec().compress(shuffled, asbytes=True)
    return packed, [len(packed), lo, first, int(np.dtype(width).itemsize)]


def decode_block(raw: bytes, n: int, entry: list[int], delta: bool, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """What :func:`encode_block` wrote, as ``n`` values of ``dtype``."""
    import pyarrow as pa

    _, lo, first, size = entry
    plain = pa.Codec("zstd").decompress(raw, n * size, asbytes=True)
    # the byte planes put back together by shifts (contiguous, several times faster than a
    # transposed copy); bits past 2^63 wrap, as the minimum added after does: exact modulo 2^64
    planes = np.frombuffer(plain, dtype=np.uint8).reshape(size, n)
    v = planes[0].astype(np.int64)
    for j in range(1, size):
        v |= planes[j].astype(np.int64) << np.int64(8 * j)
    v += np.int64(lo)
    if delta and n:
        v[0] = first
        v = np.cumsum(v)
    out: npt.NDArray[Any] = v.astype(dtype, copy=False)
    return out


def write_column(path: Path, values: npt.NDArray[Any], name: str) -> dict[str, Any]:
    """Write ``values`` block by block into ``path``; the column's directory (JSON-ready)."""
    delta = name in DELTA
    size = block_size()
    entries: list[list[int]] = []
    firsts: list[int] = []
    offset = 0
    with path.open("wb") as fh:
        for start in range(0, len(values), size):
            block = np.asarray(values[start : start + size])
            packed, entry = encode_block(block, delta)
            fh.write(packed)
            entries.append([offset, *entry])
            offset += len(packed)
            if name in SORTED:
                firsts.append(int(block[0]))
    return {
        "n": len(values),
        "dtype": np.dtype(values.dtype).str,
        "block": size,
        "blocks": entries,
        "firsts": firsts,
    }


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
        "_read",
        "_whole_lock",
        "dtype",
        "n",
    )

    def __init__(self, path: Path, name: str, directory: dict[str, Any]) -> None:
        self._path = path
        self._delta = name in DELTA
        self._dir = np.asarray(directory["blocks"], dtype=np.int64).reshape(-1, 5)
        self._firsts = np.asarray(directory.get("firsts", []), dtype=np.int64)
        self.n = int(directory["n"])
        self.dtype = np.dtype(directory["dtype"])
        self.B = int(directory["block"])  # entries per block
        if self.B < 1:
            raise ValueError(f"{path}: blocks of {self.B} entries")
        self._lock = threading.Lock()
        self._whole_lock = threading.Lock()
        self._read = np.zeros(len(self._dir), dtype=np.bool_)  # the blocks read so far
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
        """Whether this column is decoded whole (its decoded bytes fit the share of the cache)."""
        return bool(self.n * self.dtype.itemsize <= cache_bytes() // WHOLE_SHARE)

    def whole(self, decode: bool = True) -> npt.NDArray[Any] | None:
        """The whole column decoded into one read-only array (from the cache when it is there),
        or None when it is too large for that (then it is read block by block), or when it is
        not decoded yet and ``decode`` is false."""
        if not self.fits_whole():
            return None
        key = (self._id, WHOLE)
        found = CACHE.get(key) if decode else CACHE.peek(key)
        if found is not None or not decode:
            return found
        with self._whole_lock:  # one thread decodes it, the others wait for its answer
            found = CACHE.get(key)
            if found is not None:
                return found
            out = self._decode_whole()
            CACHE.drop(self._id)  # its blocks, now held twice
            CACHE.put(key, out)
            return out

    def _decode_whole(self) -> npt.NDArray[Any]:
        """Every block, read in one piece and decoded straight into one preallocated array: one
        zstd call a block, then its byte planes, minimum and differences undone in place (no
        temporary block, no copy after)."""
        import pyarrow as pa

        codec = pa.Codec("zstd")
        wide = np.empty(self.n, dtype=np.int64)
        with self._lock, self._path.open("rb") as fh:
            raw = fh.read()
        for k, (offset, length, lo, first, size) in enumerate(self._dir.tolist()):
            a = k * self.B
            b = min(self.n, a + self.B)
            cached = CACHE.peek((self._id, k))
            if cached is not None:
                wide[a:b] = cached
                continue
            plain = codec.decompress(memoryview(raw)[offset : offset + length], (b - a) * size, asbytes=False)
            planes = np.frombuffer(plain, dtype=np.uint8).reshape(size, b - a)
            v = wide[a:b]
            np.copyto(v, planes[0], casting="unsafe")
            for j in range(1, size):  # as decode_block: exact modulo 2^64
                v |= planes[j].astype(np.int64) << np.int64(8 * j)
            v += np.int64(lo)
            if self._delta and b > a:
                v[0] = first
                np.cumsum(v, out=v)
        out = wide if self.dtype == np.int64 else wide.astype(self.dtype)
        out.setflags(write=False)
        return out

    def block(self, k: int) -> npt.NDArray[Any]:
        """Block ``k``, decoded (from the cache when it is there)."""
        w = self.whole(decode=False)
        if w is not None:
            return w[k * self.B : (k + 1) * self.B]
        key = (self._id, k)
        found = CACHE.get(key)
        if found is not None:
            return found
        offset, length, *entry = (int(x) for x in self._dir[k])
        with self._lock, self._path.open("rb") as fh:
            fh.seek(offset)
            raw = fh.read(length)
        n = min(self.B, self.n - k * self.B)
        out = decode_block(raw, n, [length, *entry], self._delta, self.dtype)
        out.setflags(write=False)
        CACHE.put(key, out)
        return out

    def _wide(self, blocks: Any) -> bool:
        """Whether, with ``blocks`` (a slice or an array of block numbers) read now, enough of the
        column has been read to decode it whole (see ``WIDE``)."""
        if not self.fits_whole():
            return False
        self._read[blocks] = True
        return int(np.count_nonzero(self._read)) * WIDE >= len(self._dir)

    def _slice(self, lo: int, hi: int) -> npt.NDArray[Any]:
        if hi <= lo:
            return np.zeros(0, self.dtype)
        w = self.whole(decode=self._wide(slice(lo // self.B, (hi - 1) // self.B + 1)))
        if w is not None:
            return w[lo:hi]
        b0, b1 = lo // self.B, (hi - 1) // self.B
        if b0 == b1:
            return self.block(b0)[lo - b0 * self.B : hi - b0 * self.B]
        pieces = [self.block(k) for k in range(b0, b1 + 1)]
        pieces[-1] = pieces[-1][: hi - b1 * self.B]
        pieces[0] = pieces[0][lo - b0 * self.B :]
        return np.concatenate(pieces)

    def _take(self, idx: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        out = np.empty(len(idx), dtype=self.dtype)
        if not len(idx):
            return out
        w = self.whole(decode=self._wide(idx // self.B))
        if w is not None:
            return w[idx]
        which = idx // self.B
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
