"""An index's event durations, read from its running sums as an array of them would be."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
Ints = npt.NDArray[Any]


class Durations:
    """The events' durations, read from ``cum`` (``cum[i + 1] - cum[i]``) as an int64 array would
    be: ``dur[i]``, ``dur[lo:hi]``, ``dur[indices]``, ``dur[mask]``, and ``np.asarray(dur)`` (which
    reads them all)."""

    __slots__ = ("_cum",)

    def __init__(self, cum: Ints) -> None:
        self._cum = cum

    def __len__(self) -> int:
        return len(self._cum) - 1

    @property
    def dtype(self) -> np.dtype[np.int64]:
        return np.dtype(np.int64)

    def __getitem__(self, key: Any) -> Any:
        n = len(self)
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step == 1:
                c = np.asarray(self._cum[start : max(stop, start) + 1], dtype=np.int64)
                return c[1:] - c[:-1]
            key = np.arange(start, stop, step)
        if isinstance(key, int | np.integer):
            i = int(key) + n if key < 0 else int(key)
            if not 0 <= i < n:
                raise IndexError(f"index {key} is out of bounds for {n} durations")
            return np.int64(self._cum[i + 1] - self._cum[i])
        idx = np.asarray(key)
        if idx.dtype == np.bool_:
            idx = np.flatnonzero(idx)
        idx = idx.astype(np.int64, copy=False)
        idx = np.where(idx < 0, idx + n, idx)
        return np.asarray(self._cum[idx + 1], dtype=np.int64) - np.asarray(self._cum[idx], dtype=np.int64)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> I64:
        c = np.asarray(self._cum, dtype=np.int64)
        out = c[1:] - c[:-1]
        return out if dtype is None else out.astype(dtype)
