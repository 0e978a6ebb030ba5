"""How one block of an index column is kept on disk (``_blocks`` reads them back, a block at a time).

A block is delta-coded where the column mostly grows, less its minimum in the narrowest unsigned
type, and zstd-compressed. Most columns are byte-shuffled first (the planes of the values' bytes
one after another: the high bytes, mostly zero, compress to nothing). The columns every wide tile
reads end to end (``FLAT``: the start times, the running sums of durations, the starts in class
order) are kept unshuffled instead: putting planes back together costs a pass over the block per
byte of width, several times the rest of the decoding (a whole-run tile at 10M events decodes
millions of their entries), for a few percent of their (small) size. Each block's directory entry
says which.
"""

from __future__ import annotations

import os
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
DELTA: Final = frozenset({"ts", "cum", "pts", "m_ts", "src", "m_src", "ov_s", "ov_c"})
#: columns sorted within the ranges the tiles search: their blocks' first values are kept apart
SORTED: Final = frozenset({"ts", "m_ts"})
#: columns kept unshuffled (see the module docstring)
FLAT: Final = frozenset({"ts", "cum", "pts", "ov_s", "ov_c"})
_WIDTHS: Final = (np.uint8, np.uint16, np.uint32, np.uint64)


def block_size() -> int:
    """Entries per block written now (``BLOCK``, else ``HYPERSCOPE_TIMELINE_BLOCK``)."""
    try:
        return max(1, int(os.environ.get("HYPERSCOPE_TIMELINE_BLOCK", BLOCK)))
    except ValueError:
        return BLOCK


def _codec() -> Any:
    import pyarrow as pa

    return pa.Codec("zstd", ZSTD_LEVEL)


def encode_block(values: npt.NDArray[Any], delta: bool, flat: bool = False) -> tuple[bytes, list[int]]:
    """One block's bytes and its directory entry ``[length, minimum, first, width, flat]``."""
    v = np.asarray(values, dtype=np.int64)
    first = int(v[0]) if len(v) else 0
    if delta and len(v):
        v = np.diff(v, prepend=v[:1])
    lo = int(v.min()) if len(v) else 0
    span = int(v.max()) - lo if len(v) else 0
    width = next(w for w in _WIDTHS if span <= np.iinfo(w).max)
    narrow = (v - lo).astype(width)
    raw = narrow.tobytes() if flat else narrow.view(np.uint8).reshape(-1, narrow.itemsize).T.tobytes()
    packed = _codec().compress(raw, asbytes=True)
    return packed, [len(packed), lo, first, int(np.dtype(width).itemsize), int(flat)]


def decode_block(raw: bytes, n: int, entry: list[int], delta: bool, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """What :func:`encode_block` wrote, as ``n`` values of ``dtype``."""
    import pyarrow as pa

    _, lo, first, size, *flat = entry
    plain = pa.Codec("zstd").decompress(raw, n * size, asbytes=False)
    v = np.empty(n, dtype=np.int64)
    undo(plain, v, lo, first, size, delta, bool(flat and flat[0]))
    out: npt.NDArray[Any] = v.astype(dtype, copy=False)
    return out


def undo(
    plain: Any, v: npt.NDArray[np.int64], lo: int, first: int, size: int, delta: bool, flat: bool
) -> None:
    """Fill ``v`` with a block's values from its decompressed bytes: the values as they are
    (``flat``) or their ``size`` byte planes put back together by shifts in the block's own narrow
    type (contiguous, several times faster than a transposed copy, and half or less of the memory
    traffic of doing it in int64), cast once, then the minimum and differences undone in place.
    Bits past 2^63 wrap, as the minimum added after does: exact modulo 2^64."""
    n = len(v)
    narrow = _WIDTHS[size.bit_length() - 1]
    if flat or size == 1:
        np.copyto(v, np.frombuffer(plain, dtype=narrow, count=n), casting="unsafe")
    else:
        planes = np.frombuffer(plain, dtype=np.uint8).reshape(size, n)
        u = planes[0].astype(narrow)
        part = np.empty(n, dtype=narrow)
        for j in range(1, size):
            np.copyto(part, planes[j], casting="unsafe")
            np.left_shift(part, narrow(8 * j), out=part)
            np.bitwise_or(u, part, out=u)
        np.copyto(v, u, casting="unsafe")
    if lo:
        v += np.int64(lo)
    if delta and n:
        v[0] = first
        np.cumsum(v, out=v)


def write_column(path: Path, values: npt.NDArray[Any], name: str) -> dict[str, Any]:
    """Write ``values`` block by block into ``path``; the column's directory (JSON-ready)."""
    delta = name in DELTA
    flat = name in FLAT
    size = block_size()
    entries: list[list[int]] = []
    firsts: list[int] = []
    offset = 0
    with path.open("wb") as fh:
        for start in range(0, len(values), size):
            block = np.asarray(values[start : start + size])
            packed, entry = encode_block(block, delta, flat)
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
