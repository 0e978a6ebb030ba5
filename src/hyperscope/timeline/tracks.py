"""Value tracks read from events: the allocator's memory and trace counters.

Kineto writes every allocation and free as a ``[memory]`` instant carrying the allocator's totals
after it (``Total Allocated``, ``Total Reserved``, per ``Device Type``/``Device Id``), and
Chrome-trace counters (``ph: "C"``) carry one value per series in ``args``. Drawn as events they
would be thousands of meaningless ticks; what the user wants is the curve: how much memory the
process held over time and where it peaked. So each becomes a track that the timeline draws like
its sample rows (utilization), beside the rows of the rank that recorded it.

Row ids say what the profile says: ``mem/<rank>/<device type>/<device id>/<allocated|reserved>``
and ``counter/<rank>/<pid>/<name>/<series>`` with the name and series percent-encoded (they may
hold slashes). Tracks are read with one query per profile and kept for the life of its index;
a profile without memory or counter events costs one scan of the ``kind`` column.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import duckdb
import numpy as np
import numpy.typing as npt
import orjson

from hyperscope.schema.events import EventKind

#: Kineto's ``Device Type``: 0 is the CPU, 1 CUDA (ROCm devices also report 1)
CPU_DEVICE_TYPE: Final = 0
MEMORY_SERIES: Final = ("allocated", "reserved")


@dataclass(frozen=True)
class Track:
    """One curve: ``ts_ns`` sorted, ``value`` holding from each sample to the next."""

    id: str
    rank: int
    label: str
    unit: str
    ts_ns: npt.NDArray[np.int64]
    value: npt.NDArray[np.float64]
    #: for memory tracks, the GPU whose group it belongs under (-1: the rank's own group)
    device: int = -1
    #: merge samples denser than a pixel column by their maximum (memory: the peak is what matters)
    peak: bool = False


_CACHE: dict[int, dict[str, Track]] = {}
_LOCK = threading.Lock()


def is_track(row_id: str) -> bool:
    return row_id.startswith(("mem/", "counter/"))


def load(owner: object, con: duckdb.DuckDBPyConnection) -> dict[str, Track]:
    """The tracks of the profile ``con`` reads, kept as long as ``owner`` (its timeline index) lives."""
    key = id(owner)
    with _LOCK:
        found = _CACHE.get(key)
    if found is not None:
        return found
    tracks = read(con)
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = tracks
            weakref.finalize(owner, _CACHE.pop, key, None)
        return _CACHE[key]


def read(con: duckdb.DuckDBPyConnection) -> dict[str, Track]:
    """Every memory and counter track of the profile, by row id."""
    out: dict[str, Track] = {}
    mem = con.execute(
        "SELECT rank, coalesce(device_type, -1) AS dt, coalesce(device_id, -1) AS di, ts_ns, "
        "total_allocated::DOUBLE AS allocated, coalesce(total_reserved, 0)::DOUBLE AS reserved "
        "FROM events WHERE kind = $k AND ts_ns IS NOT NULL AND total_allocated IS NOT NULL "
        "ORDER BY rank, dt, di, ts_ns",
        {"k": EventKind.MEMORY.value},
    ).fetchnumpy()
    if len(mem["ts_ns"]):
        key = np.stack([np.asarray(mem[c], dtype=np.int64) for c in ("rank", "dt", "di")], axis=1)
        starts = np.r_[0, np.flatnonzero(np.any(key[1:] != key[:-1], axis=1)) + 1, len(key)]
        for lo, hi in itertools.pairwise(starts):
            rank, dt, di = (int(x) for x in key[lo])
            where = "CPU" if dt == CPU_DEVICE_TYPE else f"device {di}"
            for series in MEMORY_SERIES:
                value = np.asarray(mem[series][lo:hi], dtype=np.float64)
                if series == "reserved" and not np.any(value > 0):
                    continue  # the CPU allocator (and some traces) report no reserved total
                rid = f"mem/{rank}/{dt}/{di}/{series}"
                out[rid] = Track(
                    id=rid,
                    rank=rank,
                    label=f"{where} memory {series}",
                    unit="bytes",
                    ts_ns=np.asarray(mem["ts_ns"][lo:hi], dtype=np.int64),
                    value=value,
                    device=di if dt != CPU_DEVICE_TYPE else -1,
                    peak=True,
                )
    counters = con.execute(
        "SELECT rank, coalesce(pid, -1) AS pid, coalesce(name, '') AS name, ts_ns, args FROM events "
        "WHERE kind = $k AND ts_ns IS NOT NULL ORDER BY rank, pid, name, ts_ns",
        {"k": EventKind.COUNTER.value},
    ).fetchall()
    curves: dict[tuple[int, int, str, str], tuple[list[int], list[float]]] = {}
    for rank, pid, name, ts, args in counters:
        for k, v in _values(args).items():
            ts_list, val_list = curves.setdefault((int(rank), int(pid), str(name), k), ([], []))
            ts_list.append(int(ts))
            val_list.append(v)
    for (rank, pid, name, k), (ts_list, val_list) in curves.items():
        rid = f"counter/{rank}/{pid}/{quote(name, safe='')}/{quote(k, safe='')}"
        label = name if k in {"", name} else f"{name} · {k}"
        out[rid] = Track(
            rid, rank, label, "", np.asarray(ts_list, np.int64), np.asarray(val_list, np.float64)
        )
    return out


def _values(args: Any) -> dict[str, float]:
    """The numeric series of a counter event's ``args`` (others, such as strings, are not drawn)."""
    if not args:
        return {}
    try:
        parsed = orjson.loads(args)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(parsed, dict):
        return {}
    return {
        str(k): float(v) for k, v in parsed.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }


def window(track: Track, t0: int, t1: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The samples inside ``[t0, t1)`` and the one before (where the curve enters the window)."""
    lo = max(int(np.searchsorted(track.ts_ns, t0, side="right")) - 1, 0)
    hi = int(np.searchsorted(track.ts_ns, t1, side="left"))
    return track.ts_ns[lo:hi], track.value[lo:hi]
