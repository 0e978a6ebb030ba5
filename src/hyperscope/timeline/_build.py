"""Building the timeline index (:mod:`hyperscope.timeline.index` describes what it holds): one
query per rank over the profile's Parquet parts, each row's events laid out by nesting level and by
duration class, written column by column into ``.npy`` files as they are filled.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow.parquet as pq

from hyperscope.analysis._common import connection
from hyperscope.store import _creader
from hyperscope.store.profile import Profile
from hyperscope.timeline.index import (
    CLASSES,
    HOST_KINDS,
    I64,
    KINDS,
    MAX_DEPTH,
    NOT_MARKS,
    Index,
    RowInfo,
    _parts,
)


def _sq(text: str) -> str:
    return text.replace("'", "''")


def _int_type(lo: int, hi: int, *candidates: type[np.integer[Any]]) -> np.dtype[Any]:
    """The first of ``candidates`` that holds every value in ``[lo, hi]`` (else int64)."""
    for c in candidates:
        info = np.iinfo(c)
        if info.min <= lo and hi <= info.max:
            return np.dtype(c)
    return np.dtype(np.int64)


def _reserve(path: Path) -> None:
    """Give the (sparse) file behind a fresh memory map its disk blocks now. A page of a memory
    map that the disk has no room for is not an error but SIGBUS when it is first written, the
    death of the process (the server, the launcher); reserved here, a full disk is ``OSError``
    (ENOSPC) before a byte is written through the map."""
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            _write_zeros(fd, size)  # a filesystem without fallocate: plain writes reserve as well
    finally:
        os.close(fd)


def _write_zeros(fd: int, size: int) -> None:
    chunk = bytes(1 << 20)
    done = 0
    while done < size:
        done += os.pwrite(fd, chunk[: min(len(chunk), size - done)], done)


class _Columns:
    """The index's columns as they are filled: ``.npy`` files under ``out`` (else arrays in
    memory). The files are written with ``pwrite``, not through a memory map: a map's written
    pages count in the process's memory until it is unmapped (40 bytes an event: 236 MB of a 1 GB
    import's 5.9M events), the page cache's do not. ``depth``, whose range is only known row by
    row, starts as uint8 and is rewritten as uint16 when a row first goes deeper than 255 levels."""

    def __init__(self, out: Path | None, shapes: dict[str, tuple[int, np.dtype[Any]]]) -> None:
        self.out = out
        self.shapes = dict(shapes)
        self.arrays: dict[str, Any] = {}  # out is None
        self.offsets: dict[str, int] = {}  # where each file's data starts
        for c, (n, dt) in shapes.items():
            self._alloc(c, n, dt)

    def _alloc(self, column: str, n: int, dtype: np.dtype[Any], suffix: str = "") -> None:
        if self.out is None:
            self.arrays[column] = np.empty(n, dtype=dtype)
            return
        path = self.out / f"{column}{suffix}.npy"
        header = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(n,))  # sized, unwritten
        self.offsets[column] = header.offset
        del header
        _reserve(path)

    def put(self, column: str, start: int, values: npt.NDArray[Any]) -> None:
        dtype = self.shapes[column][1]
        if len(values) and dtype.itemsize < 8:
            info = np.iinfo(dtype)
            if int(values.min()) < info.min or int(values.max()) > info.max:
                dtype = _int_type(int(values.min()), int(values.max()), np.uint16, np.int32)
                self._widen(column, dtype)
        data = np.ascontiguousarray(values, dtype=dtype)
        if self.out is None:
            self.arrays[column][start : start + len(data)] = data
        else:
            _pwrite(self.out / f"{column}.npy", data, self.offsets[column] + start * dtype.itemsize)

    def _widen(self, column: str, dtype: np.dtype[Any]) -> None:
        n, old = self.shapes[column]
        self.shapes[column] = (n, dtype)
        if self.out is None:
            self.arrays[column] = self.arrays[column].astype(dtype)
            return
        start = self.offsets[column]
        self._alloc(column, n, dtype, suffix=".wider")
        path, step = self.out / f"{column}.npy", 1 << 22
        fd = os.open(path, os.O_RDONLY)
        try:
            for k in range(0, n, step):
                raw = os.pread(fd, min(step, n - k) * old.itemsize, start + k * old.itemsize)
                wider = np.frombuffer(raw, dtype=old).astype(dtype)
                _pwrite(self.out / f"{column}.wider.npy", wider, self.offsets[column] + k * dtype.itemsize)
        finally:
            os.close(fd)
        os.replace(self.out / f"{column}.wider.npy", path)

    def finish(self) -> dict[str, Any]:
        """The filled columns: the arrays, or the files mapped read-only (nothing read yet)."""
        if self.out is None:
            return self.arrays
        return {c: np.load(self.out / f"{c}.npy", mmap_mode="r") for c in self.shapes}


def _pwrite(path: Path, data: npt.NDArray[Any], offset: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        view = data.reshape(-1).view(np.uint8).data
        while view:
            done = os.pwrite(fd, view, offset)
            view, offset = view[done:], offset + done
    finally:
        os.close(fd)


def build(
    profile: Profile, out: Path | None = None, progress: Callable[[float], None] | None = None
) -> Index:
    """Read the profile's drawable events and instants and arrange them (module docstring).

    One rank at a time (rows never span ranks, and the store's row groups are sorted by rank, so
    each query reads only that rank's): memory stays that of the largest rank, not the profile's.
    With ``out``, the columns are written there as ``.npy`` files as they are filled; ``progress``
    hears the share of events laid out after each rank (0 to 1).
    """
    parts = _parts(profile)
    counts = [pq.ParquetFile(p).metadata.num_rows for p in parts]
    offsets = [0, *np.cumsum(counts, dtype=np.int64).tolist()]
    kinds_sql = ", ".join(f"'{k}'" for k in KINDS)
    host_sql = ", ".join(f"'{k}'" for k in HOST_KINDS)
    not_marks = ", ".join(f"'{k}'" for k in NOT_MARKS)
    kind_case = " ".join(f"WHEN '{k}' THEN {i}" for i, k in enumerate(KINDS))
    on_device = "device IS NOT NULL AND stream IS NOT NULL"
    with connection(profile) as con:
        con.execute("SET memory_limit = '128MB'")
        if parts:
            files = ", ".join(f"'{_sq(str(p))}'" for p in parts)
            con.execute(
                "CREATE TEMP TABLE fid AS SELECT * FROM (VALUES "
                + ", ".join(f"('{_sq(str(p))}', {off})" for p, off in zip(parts, offsets, strict=False))
                + ") t(filename, base)"
            )
            source = f"read_parquet([{files}], filename = true, file_row_number = true)"
        else:
            con.execute("CREATE TEMP TABLE fid (filename VARCHAR, base BIGINT)")
            source = "(SELECT *, '' AS filename, 0::BIGINT AS file_row_number FROM events)"
        con.execute(
            f"""CREATE TEMP VIEW ev AS
            SELECT CASE WHEN kind IN ({host_sql}) THEN 'host' ELSE 'device' END AS side, rank,
                   coalesce(node, '') AS node,
                   coalesce(CASE WHEN kind IN ({host_sql}) THEN pid ELSE coalesce(device, pid) END, -1) AS a,
                   coalesce(CASE WHEN kind IN ({host_sql}) THEN tid ELSE coalesce(stream, tid) END, -1) AS b,
                   CASE kind {kind_case} END AS kind, coalesce(name, '') AS name, ts_ns,
                   greatest(coalesce(dur_ns, 0), 0) AS dur, coalesce(correlation, -1) AS corr,
                   base + file_row_number::BIGINT AS src
            FROM {source} JOIN fid USING (filename)
            WHERE kind IN ({kinds_sql}) AND ph = 'X' AND ts_ns IS NOT NULL"""
        )
        con.execute(
            f"""CREATE TEMP TABLE inst AS
            SELECT CASE WHEN {on_device} THEN 'device' ELSE 'host' END AS side, rank,
                   coalesce(node, '') AS node,
                   coalesce(CASE WHEN {on_device} THEN device ELSE pid END, -1) AS a,
                   coalesce(CASE WHEN {on_device} THEN stream ELSE tid END, -1) AS b,
                   coalesce(name, '') AS name, ts_ns, base + file_row_number::BIGINT AS src
            FROM {source} JOIN fid USING (filename)
            WHERE ph IN ('i', 'I') AND kind NOT IN ({not_marks}) AND ts_ns IS NOT NULL"""
        )
        # progress: the scans below are the first PREP of the build, the rows (sorted and filled
        # rank by rank, each rank's share by its events) the rest
        prep = 0.15

        def report(share: float) -> None:
            if progress is not None:
                progress(min(1.0, max(0.0, share)))

        report(0.01)
        found = con.execute(
            "SELECT side, rank, any_value(node), a, b, count(*), min(ts_ns), max(ts_ns + dur), "
            "min(corr), max(corr) FROM ev GROUP BY side, rank, a, b"
        ).fetchall()
        report(prep * 0.5)
        marks = con.execute(
            "SELECT side, rank, any_value(node), a, b, count(*), min(ts_ns), max(ts_ns) "
            "FROM inst GROUP BY side, rank, a, b"
        ).fetchall()
        report(prep * 0.7)
        con.execute(
            "CREATE TEMP TABLE nm AS SELECT name, (row_number() OVER (ORDER BY name) - 1)::INT AS nid "
            "FROM (SELECT DISTINCT name FROM ev UNION SELECT DISTINCT name FROM inst)"
        )
        names = [str(n) for (n,) in con.execute("SELECT name FROM nm ORDER BY nid").fetchall()]
        rows: dict[tuple[int, str, int, int], dict[str, Any]] = {}
        for side, rank, node, a, b, n, lo, hi, *_ in found:
            key = (int(rank), str(side), int(a), int(b))
            rows[key] = {"node": str(node), "n": int(n), "m": 0, "lo": int(lo), "hi": int(hi)}
        for side, rank, node, a, b, n, lo, hi in marks:
            key = (int(rank), str(side), int(a), int(b))
            r = rows.setdefault(key, {"node": str(node), "n": 0, "lo": int(lo), "hi": int(hi)})
            r["m"], r["lo"], r["hi"] = int(n), min(r["lo"], int(lo)), max(r["hi"], int(hi))
        total = int(sum(r["n"] for r in rows.values()))
        corr_lo = min((int(f[8]) for f in found), default=-1)
        corr_hi = max((int(f[9]) for f in found), default=-1)
        widest = max((r["n"] for r in rows.values()), default=0)
        name_type = _int_type(0, len(names) - 1, np.uint16, np.int32)
        src_type = _int_type(0, offsets[-1], np.uint32)
        cols = _Columns(
            out,
            {
                "ts": (total, np.dtype(np.int64)),
                "cum": (total + 1, np.dtype(np.int64)),
                "name": (total, name_type),
                "kind": (total, np.dtype(np.int8)),
                "corr": (total, _int_type(corr_lo, corr_hi, np.int32)),
                "depth": (total, np.dtype(np.uint8)),
                "src": (total, src_type),
                "perm": (total, _int_type(0, widest, np.uint32)),
                "pts": (total, np.dtype(np.int64)),
            },
        )
        m = con.execute(
            "SELECT nm.nid, inst.ts_ns, inst.src FROM inst JOIN nm USING (name) "
            "ORDER BY inst.rank, inst.side, inst.a, inst.b, inst.ts_ns, inst.src"
        ).fetchnumpy()
        m_arrays = {
            "m_ts": np.asarray(m["ts_ns"], dtype=np.int64),
            "m_name": np.asarray(m["nid"]).astype(name_type),
            "m_src": np.asarray(m["src"]).astype(src_type),
        }
        del m
        report(prep)
        infos: list[RowInfo] = []
        start, m_start, busy = 0, 0, 0
        for rank in sorted({k[0] for k in rows}):
            keys = sorted(k for k in rows if k[0] == rank)  # (side, a, b), as the query orders them
            got = con.execute(
                "SELECT nm.nid, ev.kind::TINYINT AS kind, ev.ts_ns, ev.dur, ev.corr, "
                "ev.src FROM ev JOIN nm USING (name) WHERE ev.rank = $rank "
                "ORDER BY ev.side, ev.a, ev.b, ev.ts_ns, ev.dur DESC, ev.src",
                {"rank": rank},
            ).fetchnumpy()
            rank_start, rank_n = start, int(sum(rows[k]["n"] for k in keys))

            def at(filled: int, rank_start: int = rank_start, rank_n: int = rank_n) -> float:
                """the share done once `filled` of the rank's events are filled: its sort (the
                query above) about half of its time, filling its rows the rest"""
                return float(prep + (1 - prep) * (rank_start + rank_n / 2 + filled / 2) / max(1, total))

            report(at(0))
            offset = 0
            for key in keys:
                _, side, a, b = key
                r = rows[key]
                n = r["n"]
                row_id = f"host/{rank}/{a}/{b}" if side == "host" else f"stream/{rank}/{a}/{b}"
                sl = slice(offset, offset + n)
                depth_starts, class_starts, busy = _fill_row(cols, start, got, sl, busy)
                infos.append(
                    RowInfo(
                        row_id, side, rank, r["node"], a, b, start, start + n, depth_starts, class_starts,
                        r["lo"], r["hi"], m_start, m_start + r["m"],
                    )
                )  # fmt: skip
                start += n
                offset += n
                m_start += r["m"]
                report(at(offset))
            del got
            report(at(rank_n))
        cols.put("cum", total, np.array([busy], dtype=np.int64))
        arrays = {**cols.finish(), **m_arrays}
        if out is not None:
            for c, arr in m_arrays.items():
                np.save(out / f"{c}.npy", arr)
            meta: dict[str, Any] = {
                "rows": [{f: getattr(r, f) for f in RowInfo.__slots__} for r in infos],
                "names": names,
                "parts": [p.name for p in parts],
                "offsets": offsets,
            }
            (out / "meta.json").write_text(json.dumps(meta))
    return Index(
        rows=tuple(infos), names=tuple(names), parts=tuple(p.name for p in parts), offsets=tuple(offsets),
        **arrays,
    )  # fmt: skip


def _fill_row(
    cols: _Columns, start: int, got: dict[str, Any], sl: slice, busy: int
) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """One row's events, sorted by (start, longer first), laid out by (depth, start) at ``start``:
    its depth and class starts, and the durations summed up to its end."""
    ts = np.asarray(got["ts_ns"][sl], dtype=np.int64)
    dur = np.asarray(got["dur"][sl], dtype=np.int64)
    n = len(ts)
    if n == 0:  # a row of instants only: one (empty) level
        return (start, start), (start,) * (CLASSES + 1), busy
    depth = _depths(ts, dur)
    cls = np.zeros(n, dtype=np.int64)
    pos = dur > 0
    cls[pos] = np.frexp(dur[pos].astype(np.float64))[1] - 1
    by_class = np.argsort(cls, kind="stable")  # (class, ts)
    order = np.argsort(depth, kind="stable")  # (depth, ts)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(n)
    ts, dur, depth = ts[order], dur[order], depth[order]
    cum = np.cumsum(dur) - dur + busy
    cols.put("ts", start, ts)
    cols.put("cum", start, cum)
    cols.put("depth", start, depth)
    for column, key in (("name", "nid"), ("kind", "kind"), ("corr", "corr"), ("src", "src")):
        cols.put(column, start, np.asarray(got[key][sl])[order])
    perm = inverse[by_class]
    cols.put("perm", start, perm)
    cols.put("pts", start, ts[perm])
    depth_starts = np.searchsorted(depth, np.arange(int(depth[-1]) + 2)) + start
    class_starts = np.searchsorted(np.sort(cls), np.arange(CLASSES + 1)) + start
    return (
        tuple(int(x) for x in depth_starts),
        tuple(int(x) for x in class_starts),
        int(cum[-1] + dur[-1]),
    )


def _depths(ts: I64, dur: I64) -> I64:
    """Each event's lane: the first whose previous event has ended, in order of (start, longer
    first). For properly nested events that is the nesting depth, computed without a loop (the
    events still open at each start); where events overlap without nesting (some host threads, a
    kernel overlapping another on its stream) lanes are packed one event at a time, so that events
    of one lane never overlap: what makes a column's busy time exact.
    """
    n = len(ts)
    ends = ts + dur
    open_ = np.arange(n) - np.searchsorted(np.sort(ends), ts, side="right")
    depth: I64 = np.clip(open_, 0, MAX_DEPTH).astype(np.int64)
    if n < 2 or _disjoint_lanes(ts, ends, depth):
        return depth
    packed = _creader.pack_lanes(ts, ends)
    lanes: I64 = _first_fit(ts, ends) if packed is None else packed
    return np.minimum(lanes, MAX_DEPTH)


def _first_fit(ts: I64, ends: I64) -> I64:
    """``_creader.pack_lanes`` in Python, where no C compiler built it."""
    n = len(ts)
    lanes: list[int] = []  # end of the last event of each lane
    out = np.empty(n, dtype=np.int64)
    step = 1 << 16  # Python ints a block at a time: a whole row's cost 56 bytes an event at once
    for lo in range(0, n, step):
        block = zip(ts[lo : lo + step].tolist(), ends[lo : lo + step].tolist(), strict=True)
        for i, (t, e) in enumerate(block, lo):
            for lane, end in enumerate(lanes):
                if end <= t:
                    lanes[lane] = e
                    out[i] = lane
                    break
            else:
                out[i] = len(lanes)
                lanes.append(e)
    return out


def _disjoint_lanes(ts: I64, ends: I64, depth: I64) -> bool:
    """Whether no two events of one lane overlap."""
    order = np.argsort(depth, kind="stable")
    d, t, e = depth[order], ts[order], ends[order]
    same = d[1:] == d[:-1]
    return not bool(np.any(same & (t[1:] < e[:-1])))
