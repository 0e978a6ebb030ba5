"""The ground-truth profile of :mod:`hyperscope.analysis.groundtruth` written by numpy and pyarrow
instead of DuckDB: the same events in the same parts, for the sizes where DuckDB's plan (a union
of five selects over a cross join, sorted within a 1 GB limit by spilling) costs minutes on a small
shared machine (100M events: ~100 s quiet, over half an hour at a load of 15-27).

Each part's events are laid out by broadcasting (rank × step × device op) and sorted by the
store's key with one ``lexsort``, so memory is a part's (~2M events) whatever the profile's size.
Only the plain shape is written here: a spec with any option (memory, samples, the bad inputs)
is written by :func:`groundtruth.write_profile`, whose events these are (a test holds the two
equal, part by part, at a size that spans several parts).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from hyperscope.analysis import groundtruth as gt
from hyperscope.schema.events import EVENT_SCHEMA
from hyperscope.schema.layout import EVENTS_DIR, META_FILE, ProfileMeta, RankMeta
from hyperscope.store.profile import Profile

__all__ = ["plain", "write_profile"]

I64 = npt.NDArray[np.int64]
#: the kinds in the store's sort order (strings compare as bytes), with their categories
_KINDS = ("annotation", "cpu_op", "kernel", "memcpy", "memset", "runtime", "step")
_CATS = {
    "kernel": "kernel",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "runtime": "cuda_runtime",
    "cpu_op": "cpu_op",
    "step": "user_annotation",
    "annotation": "user_annotation",
}


def plain(spec: gt.GroundTruthSpec) -> bool:
    """Whether ``spec`` asks for none of the options (what this module writes)."""
    return not (
        spec.samples
        or spec.overlapping_kernel
        or spec.open_step
        or spec.gpu_less_rank
        or spec.clock_jump
        or spec.memory
    )


def write_profile(path: Path, spec: gt.GroundTruthSpec) -> Profile:
    """Write the profile into ``path`` (a new directory) and open it, as
    :func:`groundtruth.write_profile` does (delegated to it for a spec with options, or no steps)."""
    if not plain(spec) or not spec.steps:
        return gt.write_profile(path, spec)
    path.mkdir(parents=True, exist_ok=False)
    (path / EVENTS_DIR).mkdir()
    per_rank_step = spec.events_per_rank_step
    if spec.ranks * spec.events_per_rank <= gt._PART_EVENTS:
        plan = [(0, spec.ranks, 0, spec.steps)]
    else:
        chunk = max(1, gt._PART_EVENTS // per_rank_step)
        plan = [
            (r, r + 1, s0, min(spec.steps, s0 + chunk))
            for r in range(spec.ranks)
            for s0 in range(0, spec.steps, chunk)
        ]
    count, lo, hi = 0, None, None
    for n, (r0, r1, s0, s1) in enumerate(plan):
        table = _part(spec, r0, r1, s0, s1)
        if table.num_rows:
            ts = table.column("ts_ns").to_numpy()
            ends = ts + table.column("dur_ns").to_numpy()
            lo = int(ts.min()) if lo is None else min(lo, int(ts.min()))
            hi = int(ends.max()) if hi is None else max(hi, int(ends.max()))
        count += table.num_rows
        pq.write_table(
            table,
            path / EVENTS_DIR / f"part-{n:05d}.parquet",
            compression="zstd",
            row_group_size=131072,
            store_schema=False,
        )
    nodes = max(1, spec.nodes)
    meta = ProfileMeta(
        profile_id=path.name[:16],
        source="import",
        created_ns=time.time_ns(),
        ranks=[RankMeta(rank=r, node=f"node-{r % nodes}", clock="epoch_us") for r in range(spec.ranks)],
        events=count,
        ts_min_ns=lo,
        ts_max_ns=hi,
    )
    (path / META_FILE).write_text(meta.to_json())
    return Profile.open(path)


def _part(spec: gt.GroundTruthSpec, r0: int, r1: int, s0: int, s1: int) -> pa.Table:
    """The events of ranks ``[r0, r1)`` and steps ``[s0, s1)``, sorted by the store's key."""
    k = spec.kernels_per_step
    r = np.arange(r0, r1, dtype=np.int64)[:, None]
    s = np.arange(s0, s1, dtype=np.int64)[None, :]
    st = gt.T0 + r * spec.rank_skew_ns + s * spec.step_ns + gt.STEP_EXTRA * (3 * (s // 3) + (s % 3 == 2))
    rr, ss, st = (np.broadcast_to(a, st.shape).ravel() for a in (r, s, st))  # (rank, step)
    # device ops per (rank, step): k kernels, the collective, a memcpy, a memset
    i = np.arange(k + 3, dtype=np.int64)
    off = np.where(i < k, gt.LEAD + i * (gt.KD + gt.GAP), 0)
    off[k] = gt.LEAD + (k - 2) * (gt.KD + gt.GAP)
    off[k + 1] = gt.LEAD + k * (gt.KD + gt.GAP) + gt.COMM_TAIL + gt.MEMCPY_GAP
    off[k + 2] = off[k + 1] + gt.MEMCPY_DUR + gt.MEMSET_GAP
    dur = np.full(k + 3, gt.KD, dtype=np.int64)
    dur[k], dur[k + 1], dur[k + 2] = 2 * (gt.KD + gt.GAP) + gt.COMM_TAIL, gt.MEMCPY_DUR, gt.MEMSET_DUR
    kind = np.array([2] * (k + 1) + [3, 4], dtype=np.int64)  # codes in _KINDS
    fixed = [gt.KERNELS[j % 3][0] for j in range(k)] + [
        gt.COMM_NAME,
        "Memcpy HtoD (Pinned -> Device)",
        "Memset (Device)",
    ]
    fixed += ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync", "aten::op", "forward"]
    dev_name = np.arange(k + 3, dtype=np.int64)
    launch = np.array([k + 3] * (k + 1) + [k + 4, k + 5], dtype=np.int64)
    stream = np.where(i == k, 20, 7)
    nbytes = np.zeros(k + 3, dtype=np.int64)
    nbytes[k + 1], nbytes[k + 2] = gt.MEMCPY_BYTES, gt.MEMSET_BYTES
    m = len(st)
    o_r, o_st, o_s = np.repeat(rr, k + 3), np.repeat(st, k + 3), np.repeat(ss, k + 3)
    o_i = np.tile(i, m)
    corr = 1 + o_s * (k + 3) + o_i
    at = o_st + off[o_i]
    host = 1000 + o_r
    step_name = len(fixed) + np.arange(m, dtype=np.int64)  # one name per (rank, step) entry
    # None: the column's null; arrays or scalars broadcast over each group's events
    groups: list[dict[str, Any]] = [
        {  # device ops
            "rank": o_r,
            "pid": o_r % 8,
            "tid": stream[o_i],
            "kind": kind[o_i],
            "name": dev_name[o_i],
            "ts_ns": at,
            "dur_ns": dur[o_i],
            "correlation": corr,
            "device": o_r % 8,
            "stream": stream[o_i],
            "bytes": nbytes[o_i],
            "bytes?": o_i > k,
            "memcpy_kind?": o_i == k + 1,
        },
        {  # their launches
            "rank": o_r,
            "pid": host,
            "tid": host,
            "kind": 5,
            "name": launch[o_i],
            "ts_ns": at - gt.LATENCY,
            "dur_ns": 3000,
            "correlation": corr,
        },
        {  # the operators around them
            "rank": o_r,
            "pid": host,
            "tid": host,
            "kind": 1,
            "name": k + 6,
            "ts_ns": at - gt.LATENCY - 2000,
            "dur_ns": 6000,
        },
        {  # the steps
            "rank": rr,
            "pid": 1000 + rr,
            "tid": 1000 + rr,
            "kind": 6,
            "name": step_name,
            "ts_ns": st,
            "dur_ns": spec.step_ns + (ss % 3) * gt.STEP_EXTRA,
        },
        {  # and the forward annotation of each
            "rank": rr,
            "pid": 1000 + rr,
            "tid": 1000 + rr,
            "kind": 0,
            "name": k + 7,
            "ts_ns": st + 1000,
            "dur_ns": gt.FORWARD + (ss % 2) * 10000,
        },
    ]
    sizes = [len(g["rank"]) for g in groups]
    total = sum(sizes)

    def col(name: str, dtype: Any = np.int64, default: Any = 0) -> Any:
        return np.concatenate(
            [
                np.broadcast_to(np.asarray(g.get(name, default), dtype=dtype), (n,))
                for g, n in zip(groups, sizes, strict=True)
            ]
        )

    def valid(name: str) -> Any:  # where a group has the column (or its own mask of it)
        return np.concatenate(
            [np.broadcast_to(g.get(f"{name}?", name in g), (n,)) for g, n in zip(groups, sizes, strict=True)]
        )

    c = {name: col(name) for name in ("rank", "pid", "tid", "kind", "ts_ns", "correlation")}
    order = _order(c)
    rank_np = c["rank"][order]
    kinds = c["kind"][order]
    names = fixed + [f"ProfilerStep#{x}" for x in ss.tolist()]
    nodes = max(1, spec.nodes)
    values: dict[str, Any] = {
        "rank": pa.array(rank_np.astype(np.int32)),
        "node": _strings([f"node-{j}" for j in range(nodes)], rank_np % nodes),
        "pid": pa.array(c["pid"][order]),
        "tid": pa.array(c["tid"][order]),
        "kind": _strings(list(_KINDS), kinds),
        "cat": _strings([_CATS[x] for x in _KINDS], kinds),
        "ph": _strings(["X"], np.zeros(total, dtype=np.int64)),
        "name": _strings(names, col("name")[order]),
        "ts_ns": pa.array(c["ts_ns"][order]),
        "dur_ns": pa.array(col("dur_ns")[order]),
    }
    kind_ok = valid("memcpy_kind")[order]
    values["memcpy_kind"] = _strings(["HtoD"], np.zeros(total, dtype=np.int64), ~kind_ok)
    for name in ("correlation", "device", "stream", "bytes"):
        values[name] = pa.array(col(name)[order], mask=~valid(name)[order])
    nulls: dict[pa.DataType, pa.Array] = {}  # one all-null array per type, shared by its columns
    return pa.table(
        [values.get(f.name) or nulls.setdefault(f.type, pa.nulls(total, f.type)) for f in EVENT_SCHEMA],
        names=EVENT_SCHEMA.names,
    )


def _order(c: dict[str, Any]) -> Any:
    """The order of the store's key (rank, pid, tid, kind, ts_ns), ties by correlation: one stable
    sort of (row, start) packed in an int64. This shape's rows in key order: per rank, its device's
    stream 7 (kernels, memcpys, memsets), stream 20, then its host thread by kind; each group was
    laid out by (step, op), so ties keep the correlation's order."""
    device = c["pid"] < 1000
    sub = np.where(device, np.where(c["tid"] == 20, 4, c["kind"] - 2), 8 + c["kind"])
    ts = c["ts_ns"]
    lo, span = int(ts.min()), int(ts.max() - ts.min())
    if span >= 1 << 40 or not bool(
        np.all(np.where(device, c["pid"] == c["rank"] % 8, c["pid"] == 1000 + c["rank"]))
    ):
        return np.lexsort((c["correlation"], ts, c["kind"], c["tid"], c["pid"], c["rank"]))
    return np.argsort(((c["rank"] * 16 + sub) << 40) + (ts - lo), kind="stable")


def _strings(words: list[str], codes: Any, null: Any = None) -> pa.Array:
    """Strings ``words[codes]``, null where ``null``: dictionary-encoded as Parquet stores them (read
    back as plain strings: the file keeps no Arrow schema, as the store's own parts)."""
    indices = pa.array(np.asarray(codes, dtype=np.int32), mask=null)
    return pa.DictionaryArray.from_arrays(indices, pa.array(words, type=pa.string()))
