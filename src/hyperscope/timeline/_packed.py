"""The timeline index as it is kept on disk: small, and read back into plain arrays in one pass.

Kept as the ``.npy`` columns the builder fills, the index took 18–32 bytes per event, 4–20× the
profile's own events file (df_index_resolver: 3.97 MB of index beside 0.52 MB of events, more than
the gzipped JSON). So once built:

- ``ts``, ``cum`` and ``corr`` are not kept at all: they are the events' ``ts_ns``, durations
  (``greatest(coalesce(dur_ns, 0), 0)``) and ``correlation`` (else -1) taken at each event's id
  (``src``) from the profile's Parquet files, which are read once when the index is loaded;
- every other column is stored as zstd frames of at most ``BLOCK`` values, each frame delta-coded
  (for the columns that mostly grow: ids, positions, instants' times), cut to the narrowest integer
  type that holds it, and byte-shuffled (the k-th byte of every value together), which is what lets
  zstd find the runs of equal high bytes.

df_index_resolver: 0.42 MB with every column packed this way, 0.11 MB without ts/cum/corr
(measured while choosing; bench/README.md). Loading decompresses and undoes the deltas with numpy:
no per-event Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

#: values per zstd frame: bounds the memory of packing an index of 100M events
BLOCK: Final = 1 << 22
LEVEL: Final = 9
#: columns read from the events' Parquet files at load, by event id: not stored in the index
FROM_EVENTS: Final = ("ts", "cum", "corr")
#: columns delta-coded before compression (each frame from 0)
DELTA: Final = frozenset({"src", "perm", "m_ts", "m_src"})
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
        block = np.frombuffer(raw, dtype=np.uint8).reshape(t.itemsize, n).T.copy().view(t).reshape(n)
        out[at : at + n] = np.cumsum(block, dtype=np.int64) if column in DELTA else block
        at, pos = at + n, pos + size
    if at != len(out) or pos != len(data):
        raise ValueError(f"{path}: {at} values in {pos} bytes, expected {len(out)} in {len(data)}")
    return out


def from_events(parts: list[Path], src: npt.NDArray[Any], types: dict[str, str]) -> dict[str, Any]:
    """``ts``, ``cum`` and ``corr`` of the index's events, read from the profile's part files."""
    columns = ["ts_ns", "dur_ns", "correlation"]
    tables = [pq.read_table(p, columns=columns) for p in parts]
    table = pa.concat_tables(tables) if tables else None

    def column(name: str, fill: int) -> npt.NDArray[np.int64]:
        if table is None:
            return np.zeros(0, dtype=np.int64)
        arr = table.column(name).combine_chunks().fill_null(fill)
        return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)

    ts = column("ts_ns", 0)[src] if len(src) else np.zeros(0, dtype=np.int64)
    dur = np.maximum(column("dur_ns", 0)[src], 0) if len(src) else np.zeros(0, dtype=np.int64)
    corr = column("correlation", -1)[src] if len(src) else np.zeros(0, dtype=np.int64)
    cum = np.zeros(len(src) + 1, dtype=np.int64)
    np.cumsum(dur, out=cum[1:])
    return {"ts": ts, "cum": cum, "corr": corr.astype(np.dtype(types.get("corr", "<i8")))}
