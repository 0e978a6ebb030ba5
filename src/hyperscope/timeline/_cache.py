"""The decoded blocks of every stored timeline index of this process, in one LRU bounded in bytes.

A server drawing many large profiles holds at most ``cache_bytes()`` of them, whatever their size
(``HYPERSCOPE_TIMELINE_CACHE_MB``). An entry is one decoded block, or a column's one array
(``_Arena``, under the block number ``WHOLE``) filled block by block and counted by what is filled.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict
from typing import Any, Final

import numpy as np

#: the block number under which a column's one array (``_Arena``) is kept in the cache
WHOLE: Final = -1


class _Arena:
    """A column's values in one array, filled block by block as reads ask for them: a read is a
    view (or a gather) of one contiguous array, as of an ``.npy`` column, however many blocks it
    spans, and a block is decoded once, where it lies, with no second decoding or copy when the
    whole column is read later. Counted in the cache by the entries filled so far."""

    __slots__ = ("count", "filled", "ro", "values")

    def __init__(self, n: int, dtype: np.dtype[Any], blocks: int) -> None:
        # anonymous memory of its own, in plain pages taken only where blocks are written: numpy
        # asks the kernel for huge pages for large arrays, whose first touch may stop to compact
        # memory (a fresh server's first whole-run tile: 259 ms of CPU, 199 of them in the kernel,
        # against 76 ms with plain pages, on this loaded machine)
        self.values = np.frombuffer(mmap.mmap(-1, max(1, n * dtype.itemsize)), dtype=dtype, count=n)
        self.ro = self.values.view()
        self.ro.setflags(write=False)
        self.filled = np.zeros(blocks, dtype=np.bool_)
        self.count = 0  # entries filled

    @property
    def nbytes(self) -> int:
        return self.count * self.values.itemsize

    @property
    def complete(self) -> bool:
        return self.count == len(self.values)


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
        self._blocks: OrderedDict[tuple[int, int], Any] = OrderedDict()  # arrays and _Arena
        self._lock = threading.Lock()
        self.nbytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[int, int]) -> Any:
        with self._lock:
            found = self._blocks.get(key)
            if found is None:
                self.misses += 1
                return None
            self.hits += 1
            self._blocks.move_to_end(key)
            return found

    def put(self, key: tuple[int, int], block: Any) -> None:
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

    def grew(self, key: tuple[int, int], entry: Any, added: int) -> None:
        """``entry`` (kept under ``key``) holds ``added`` bytes more: counted, and the least
        recently used others dropped past the bound (nothing, if it was dropped meanwhile)."""
        limit = cache_bytes()
        with self._lock:
            if self._blocks.get(key) is not entry:
                return
            self.nbytes += added
            self._blocks.move_to_end(key)
            while self.nbytes > limit and len(self._blocks) > 1:
                _, old = self._blocks.popitem(last=False)
                self.nbytes -= old.nbytes

    def peek(self, key: tuple[int, int]) -> Any:
        """What ``get`` answers, but counted neither as a hit nor a miss, nor made recent."""
        with self._lock:
            return self._blocks.get(key)

    def drop(self, owner: int, blocks_only: bool = False) -> None:
        """Forget the blocks of one column (its index is gone), or with ``blocks_only`` all but
        the column decoded whole (which holds them)."""
        with self._lock:
            for key in [k for k in self._blocks if k[0] == owner and not (blocks_only and k[1] == WHOLE)]:
                self.nbytes -= self._blocks.pop(key).nbytes

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()
            self.nbytes = 0


#: the process's decoded blocks (all indexes together)
CACHE: Final = BlockCache()
