"""The GPU pass of gpupass.py computed on columns: one read of the scoped device operations into
numpy, one sort of their start and end points, and array arithmetic for every segment.

``gpu_pass`` runs the sweep as a DuckDB window over a materialized relation that carries each
operation's launch time (a join of every device op with every runtime call). A comparison needs
the pass of two whole profiles, and at 10M events a side the join and the window took most of its
time, so here the sweep is the same arithmetic without them: the points are packed into one int64
key per point (GPU, time, kind of point: ends before starts at equal times, as the SQL orders them)
and sorted once; the running sum of the packed units is a cumulative sum; a segment is the gap
between two neighbouring points of one GPU. Only the operations that end an idle gap need their
launch time, so only those are looked up (a semi-join in DuckDB), not all of them.

The answer is the ``GpuPass`` that ``gpupass._compute`` gives for the same scope, width and
threshold (tests/analysis/test_sweep compares them), and it is put into the scope's cache, where
``gpu_time`` and ``idle_breakdown`` find it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from hyperscope.analysis._common import BIT_SQL, TYPE_BITS, scoped_events_sql
from hyperscope.analysis._prepared import Prepared
from hyperscope.analysis.gpupass import SHORT_GAP_NS, GpuPass, GpuSweep, bucket_origin

I64 = npt.NDArray[np.int64]
_BITS = list(TYPE_BITS.values())  # computation, communication, memory: units 1, 2^20, 2^40
_MASK = (1 << 20) - 1
_NO_CORR = np.iinfo(np.int64).min
CAUSES = ("host wait", "launch gap", "other")


def _device_columns(ctx: Prepared) -> dict[str, Any]:
    """rank, device, kind index (0..2 of ``_BITS``), clipped start/end and correlation per op."""
    idx = " ".join(f"WHEN {b} THEN {i}" for i, b in enumerate(_BITS))
    ops = scoped_events_sql(
        ctx.windows,
        "e.kind IN ('kernel', 'memcpy', 'memset')",
        "e.rank, coalesce(e.device, e.pid, -1) AS device, e.kind, e.name, e.correlation",
    )
    return dict(
        ctx.con.execute(
            f"""SELECT rank::BIGINT AS rank, device::BIGINT AS device,
                       (CASE {BIT_SQL} {idx} END)::BIGINT AS k, s::BIGINT AS s, t_end::BIGINT AS t_end,
                       coalesce(correlation, {_NO_CORR})::BIGINT AS corr
                FROM ({ops}) WHERE t_end > s"""
        ).fetchnumpy()
    )


def _first_launches(ctx: Prepared, rank: I64, corr: I64) -> I64:
    """Earliest runtime/driver call in scope with each (rank, correlation); ``_NO_CORR`` if none.

    The calls are read as columns into a table by (rank, correlation) (``_dense_table``), or where
    the ids are too sparse for one, sorted by (rank, correlation) once, each wanted pair then a
    binary search (a DuckDB join of a million pairs against every call cost twice as much)."""
    out = np.full(len(rank), _NO_CORR, dtype=np.int64)
    want = np.flatnonzero(corr != _NO_CORR)
    if len(want) == 0:
        return out
    launches = scoped_events_sql(
        ctx.windows,
        "e.kind IN ('runtime', 'driver') AND e.correlation IS NOT NULL",
        "e.rank, e.correlation, e.ts_ns AS launch_ts",
    )
    got = ctx.con.execute(
        f"SELECT rank::BIGINT AS r, correlation::BIGINT AS c, launch_ts::BIGINT AS t FROM ({launches})"
    ).fetchnumpy()
    lr, lc, lt = (np.asarray(got[x], dtype=np.int64) for x in ("r", "c", "t"))
    if len(lr) == 0:
        return out
    wr, wc = rank[want], corr[want]
    table = _dense_table(lr, lc, lt, wr, wc)
    if table is not None:
        out[want] = table
        return out
    lc, wc = _dense(lc, wc, 40)
    lr, wr = _dense(lr, wr, 22)
    lk, wk = (lr << 40) | lc, (wr << 40) | wc  # (rank, correlation) packed into one int64 key
    order = np.argsort(lk, kind="stable")
    lk, lt = lk[order], lt[order]
    first = np.flatnonzero(np.r_[True, lk[1:] != lk[:-1]])
    keys, earliest = lk[first], np.minimum.reduceat(lt, first)  # a run's earliest call
    at = np.minimum(np.searchsorted(keys, wk), len(keys) - 1)
    found = keys[at] == wk
    out[want[found]] = earliest[at[found]]
    return out


def _dense_table(lr: I64, lc: I64, lt: I64, wr: I64, wc: I64) -> I64 | None:
    """The earliest call of each wanted (rank, correlation) through a table indexed by both (no
    sort: correlation ids are small counters, so the table is about as long as the calls); None
    where the ids are too sparse for one."""
    r0, c0 = int(lr.min()), int(lc.min())
    rn, cn = int(lr.max()) - r0 + 1, int(lc.max()) - c0 + 1
    if rn * cn > 4 * len(lr) + (1 << 20):
        return None
    none = np.iinfo(np.int64).max
    earliest = np.full(rn * cn, none, dtype=np.int64)
    np.minimum.at(earliest, (lr - r0) * cn + (lc - c0), lt)
    inside = (wr >= r0) & (wr < r0 + rn) & (wc >= c0) & (wc < c0 + cn)
    found = np.full(len(wr), _NO_CORR, dtype=np.int64)
    at = np.flatnonzero(inside)
    got = earliest[(wr[at] - r0) * cn + (wc[at] - c0)]
    found[at] = np.where(got == none, _NO_CORR, got)
    return found


def _dense(have: I64, want: I64, bits: int) -> tuple[I64, I64]:
    """Both as offsets from their common minimum when they fit in ``bits``, else as dense codes
    (correlation ids are small counters in every trace seen; this keeps the packed key exact)."""
    lo = min(int(have.min()), int(want.min()))
    if max(int(have.max()), int(want.max())) - lo < (1 << bits):
        return have - lo, want - lo
    codes = np.unique(np.concatenate([have, want]), return_inverse=True)[1].reshape(-1).astype(np.int64)
    return codes[: len(have)], codes[len(have) :]


def _groups(rank: I64, device: I64) -> tuple[I64, list[tuple[int, int]]]:
    """A dense id per (rank, device), numbered in (rank, device) order, and the pairs."""
    r0, d0 = int(rank.min()), int(device.min())
    dn = int(device.max()) - d0 + 1
    packed = (rank - r0) * dn + (device - d0)
    if int(packed.max()) < (1 << 24):  # ranks × devices: a table, no sort (np.unique hashes slowly)
        present = np.bincount(packed) > 0
        keys = np.flatnonzero(present)
        inverse = (np.cumsum(present) - 1)[packed]
    else:
        keys, inverse = np.unique(packed, return_inverse=True)
    pairs = [(int(kk) // dn + r0, int(kk) % dn + d0) for kk in keys]
    return inverse.reshape(-1).astype(np.int64, copy=False), pairs


#: the signed unit of a point by its kind code (see _sorted_points): ends of memory, communication,
#: computation ops, then their starts, so that ends sort before starts at equal times
_UNIT_OF_CODE = np.array([-(1 << 40), -(1 << 20), -1, 1, 1 << 20, 1 << 40], dtype=np.int64)


def _sorted_points(g: I64, s: I64, t_end: I64, k: I64) -> tuple[I64, I64, I64, I64]:
    """The 2n points (i < n: start of op i; else its end) sorted by GPU, time, then kind of point:
    their order (point indices), GPU ids, times and signed units."""
    n = len(s)
    t0 = min(int(s.min()), int(t_end.min()))
    t1 = max(int(s.max()), int(t_end.max()))
    if t1 - t0 < (1 << 47) and int(g.max()) < (1 << 12):
        # one int64 key a point, built in place and decoded after the sort (arrays of 2n points
        # are 100 MB at 6M ops: every temporary costs its page faults)
        key = np.empty(2 * n, dtype=np.int64)
        head, tail = key[:n], key[n:]
        np.subtract(s, t0, out=head)
        np.subtract(t_end, t0, out=tail)
        key <<= 3
        head |= k + 3
        tail |= 2 - k
        high = g << 50
        head |= high
        tail |= high
        del high, head, tail
        order = np.argsort(key, kind="stable")
        ks = np.take(key, order, out=key)
        d = _UNIT_OF_CODE[ks & 7]
        t = ks >> 3
        t &= (1 << 47) - 1
        t += t0
        ks >>= 50
        return order, ks, t, d
    t = np.concatenate([s, t_end])
    code = np.concatenate([3 + k, 2 - k])
    gg = np.concatenate([g, g])
    order = np.lexsort((code, t, gg))
    return order, gg[order], t[order], _UNIT_OF_CODE[code[order]]


def sweep_pass(ctx: Prepared, *, width_ns: int | None = None, short_gap_ns: int | None = None) -> GpuPass:
    """The GPU pass of this scope (as ``gpupass.gpu_pass``), cached in ``ctx.cache``."""
    if width_ns is None:
        span = max((w.hi_ns for w in ctx.windows), default=1) - bucket_origin(ctx)
        width_ns = max(1, -(-span // 100))
    short = SHORT_GAP_NS if short_gap_ns is None else short_gap_ns
    key = f"gpu_pass:{width_ns}:{short}"
    if isinstance(ctx.cache.get(key), GpuPass):
        return ctx.cache[key]  # type: ignore[no-any-return]
    result = _compute(ctx, width_ns, short)
    ctx.cache[key] = result
    return result


def _compute(ctx: Prepared, width: int, short: int) -> GpuPass:
    lo = bucket_origin(ctx)
    cols = _device_columns(ctx)
    rank = np.asarray(cols["rank"], dtype=np.int64)
    n = len(rank)
    if n == 0:
        return GpuPass(width, short, (), {}, {})
    device = np.asarray(cols["device"], dtype=np.int64)
    k = np.asarray(cols["k"], dtype=np.int64)
    s = np.asarray(cols["s"], dtype=np.int64)
    t_end = np.asarray(cols["t_end"], dtype=np.int64)
    g, pairs = _groups(rank, device)
    order, gp, t, d = _sorted_points(g, s, t_end, k)
    c = np.cumsum(d)  # each GPU's points end at zero
    # segment i: from point i to point i + 1, of no length where the next point is another GPU's
    groups = len(pairs)
    bounds = np.searchsorted(gp, np.arange(groups + 1))  # gp is sorted: where each GPU's points begin
    # per point, the segment it starts (the last point's: none); an array per point is 50 MB at
    # 3M ops, and what the sweep costs is mostly first touching such arrays: one scratch buffer
    # serves the passes below
    full = np.zeros(len(t), dtype=np.int64)
    np.subtract(t[1:], t[:-1], out=full[:-1])
    full[bounds[1:-1] - 1] = 0
    length, sc, sg = full[:-1], c[:-1], gp[:-1]
    # the bincount slot of (GPU, state): the OR of the kinds with a count above zero
    scratch = np.bitwise_and(sc, _MASK)
    state = (scratch != 0).view(np.uint8)
    for i in (1, 2):  # communication, then memory (its count is the top bits: sc >= 0)
        np.right_shift(sc, 20 * i, out=scratch)
        if i == 1:
            scratch &= _MASK
        state |= (scratch != 0).view(np.uint8) << i
    slot = np.multiply(sg, 8, out=scratch)
    slot += state
    by_state = np.bincount(slot, weights=length, minlength=groups * 8).reshape(groups, 8)
    del slot, state, scratch
    idle = np.flatnonzero((sc == 0) & (length > 0))
    nxt = order[idle + 1]  # the point that ends each idle gap: a start (an op's)
    la = np.full(len(idle), _NO_CORR, dtype=np.int64)
    starts = nxt < n
    if starts.any():
        ops = nxt[starts]
        la[starts] = _first_launches(ctx, rank[ops], np.asarray(cols["corr"], dtype=np.int64)[ops])
    gap_t, gap_len = t[idle], length[idle]
    cause = np.where((la != _NO_CORR) & (la > gap_t), 0, np.where(gap_len < short, 1, 2))
    gid = sg[idle] * 3 + cause
    gap_n = np.bincount(gid, minlength=groups * 3).reshape(groups, 3)
    gap_ns = np.bincount(gid, weights=gap_len, minlength=groups * 3).reshape(groups, 3)
    length[sc == 0] = 0  # what is left of it is busy time (the idle gaps were read above)
    busy = _buckets(bounds, t, full, groups, lo, width)
    return _answer(ctx, pairs, by_state, gap_n, gap_ns, busy, width, short)


def _buckets(
    bounds: I64, t: I64, busy_len: I64, groups: int, lo: int, width: int
) -> dict[int, dict[int, int]]:
    """Busy ns per GPU and bucket start, from the busy time before each point: the busy time up to
    a bucket edge is that before the last point at or before it, plus the part of its segment
    (a few hundred binary searches, not one division per segment). ``busy_len``: per point, the
    busy length of the segment it starts."""
    before = np.zeros(len(busy_len) + 1, dtype=np.int64)  # busy time before point i (offsets cancel)
    np.cumsum(busy_len, out=before[1:])
    out: dict[int, dict[int, int]] = {}
    for gi in range(groups):
        a, b = int(bounds[gi]), int(bounds[gi + 1])
        first = (int(t[a]) - lo) // width
        last = (int(t[b - 1]) - 1 - lo) // width
        edges = lo + width * np.arange(first, last + 2, dtype=np.int64)
        at = np.searchsorted(t[a:b], edges, side="right") - 1 + a
        inside = at >= a
        at = np.maximum(at, a)
        upto = before[at] - before[a] + np.where(busy_len[at] > 0, edges - t[at], 0)
        upto = np.where(inside, upto, 0)
        per = np.diff(upto)
        keep = np.flatnonzero(per > 0)
        if len(keep):
            out[gi] = {int(e): int(v) for e, v in zip(edges[keep], per[keep], strict=True)}
    return out


def _answer(
    ctx: Prepared,
    pairs: list[tuple[int, int]],
    by_state: npt.NDArray[Any],
    gap_n: npt.NDArray[Any],
    gap_ns: npt.NDArray[Any],
    busy: dict[int, dict[int, int]],
    width: int,
    short: int,
) -> GpuPass:
    win = {w.rank: w for w in ctx.windows}
    sweeps = []
    gaps: dict[tuple[int, int], dict[str, tuple[int, int]]] = {}
    for i, (rank, device) in enumerate(pairs):
        states = {st: int(ns) for st, ns in enumerate(by_state[i]) if ns}
        extent = sum(states.values())
        span = win[rank].hi_ns - win[rank].lo_ns if ctx.explicit else extent
        states[0] = states.get(0, 0) + (span - extent)
        sweeps.append(GpuSweep(rank, win[rank].node, device, span, states))
        found = {c: (int(gap_n[i, j]), int(gap_ns[i, j])) for j, c in enumerate(CAUSES) if gap_n[i, j]}
        if found:
            gaps[(rank, device)] = found
    busy_by = {pairs[i]: slots for i, slots in sorted(busy.items())}
    return GpuPass(width, short, tuple(sweeps), gaps, busy_by)


__all__ = ["sweep_pass"]
