"""The timeline index as it is kept on disk: small, and read back into plain arrays in one pass.

Kept as the ``.npy`` columns the builder fills, the index took 18–32 bytes per event, 4–20× the
profile's own events file (df_index_resolver: 3.97 MB of index beside 0.52 MB of events, more than
the gzipped JSON). So once built, every column is stored as zstd frames of at most ``BLOCK``
values, each frame delta-coded (the columns that mostly grow: times, running sums, ids,
positions), cut to the narrowest integer type that holds it, and byte-shuffled (the k-th byte of
every value together), which is what lets zstd find the runs of equal high bytes. Loading
decompresses and undoes the deltas with numpy: no per-event Python.

``ts`` is stored less ``cum`` (the idle time since the previous event of its lane, far smaller
than the gap between starts). df_index_resolver: 0.39 MB (from 3.97 MB). Taking ``ts``, ``cum``
and ``corr`` from the events' Parquet file by id instead of storing them gave 0.11 MB, but loading
the index then took 5x longer (reading and gathering three columns of every event), too slow for
a first paint within a second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

#: values per zstd frame: bounds the memory of packing an index of 100M events
BLOCK: Final = 1 << 22
LEVEL: Final = 9
#: columns delta-coded before compression (each frame from 0)
DELTA: Final = frozenset({"ts", "cum", "corr", "src", "perm", "m_ts", "m_src"})
_CODEC: Final = pa.Codec("zstd", LEVEL)


def _narrow(lo: int, hi: int) -> np.dtype[Any]:
    for t in (np.int8, np.int16, np.int32):
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return np.dtype(t)
    return np.dtype(np.int64)


def pack(column: str, values: npt.NDArray[Any], path: Path) -> dict[str, Any]:
    """Write ``values`` to ``path`` as frames (module docstring); what :func:`unpack` needs."""
    frames: list[dict[str, Any]] = []
    with path.open("wb") as fh:
        for k in range(0, len(values), BLOCK):
            block = np.asarray(values[k : k + BLOCK]).astype(np.int64)
            if column in DELTA:
                block = np.diff(block, prepend=np.int64(0))
            narrow = block.astype(_narrow(int(block.min()), int(block.max())))
            shuffled = narrow.view(np.uint8).reshape(-1, narrow.itemsize).T.copy()
            data = _CODEC.compress(shuffled.tobytes(), asbytes=True)
            fh.write(data)
            frames.append({"n": len(narrow), "type": narrow.dtype.str, "bytes": len(data)})
    return {"type": np.dtype(values.dtype).str, "n": len(values), "frames": frames}


def unpack(column: str, spec: dict[str, Any], path: Path) -> npt.NDArray[Any]:
    out = np.empty(int(spec["n"]), dtype=np.dtype(spec["type"]))
    data = path.read_bytes()
    at = pos = 0
    for frame in spec["frames"]:
        n, t, size = int(frame["n"]), np.dtype(frame["type"]), int(frame["bytes"])
        raw = _CODEC.decompress(data[pos : pos + size], n * t.itemsize, asbytes=True)
        planes = np.frombuffer(raw, dtype=np.uint8).reshape(t.itemsize, n)
        joined = np.empty((n, t.itemsize), dtype=np.uint8)
        for k in range(t.itemsize):  # plane by plane: 3-10x faster than a transposed copy
            joined[:, k] = planes[k]
        block = joined.view(t).reshape(n)
        out[at : at + n] = np.cumsum(block, dtype=np.int64) if column in DELTA else block
        at, pos = at + n, pos + size
    if at != len(out) or pos != len(data):
        raise ValueError(f"{path}: {at} values in {pos} bytes, expected {len(out)} in {len(data)}")
    return out
