"""Collectives across ranks on the timeline: the same collective's kernel on every rank, and the
rank that arrived last.

The matching is the dashboard's (``analysis.collective_waits``): NCCL requires every rank of a
communicator to issue its collectives in one order, so the n-th launch of a collective
(``collective_of`` its kernel name: AllReduce, SendRecv, ...) on one rank is the n-th on every
other rank. Communication kernels are the NCCL/RCCL kernels (``COMM_KERNEL_SQL``: kind kernel, name
starting ``nccl`` or ``rccl``, any case), taken on each rank in start order over all its streams.

Here the instances are read from the timeline index (no DuckDB), once per index: the kernels of
every device row whose name is a communication kernel's, a few per step against the millions of
events a tile looks through. "Last to arrive" is the latest start as the timeline draws it (each
rank's own clock, as recorded); the dashboard's waits remove each rank's clock offset first, which
on one host is a few microseconds at most.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from hyperscope.analysis.collectives import collective_of
from hyperscope.timeline.index import KINDS, Index
from hyperscope.timeline.links import _find, _starts

__all__ = ["MAX_INSTANCES", "Instances", "instance_of", "instances", "instances_in"]

KERNEL: Final = KINDS.index("kernel")
#: instances answered for one window at most (each is one event per rank)
MAX_INSTANCES: Final = 500
_PREFIXES: Final = ("nccl", "rccl")

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Instances:
    """Every communication kernel of an index, in the order (collective, n, rank).

    ``pos`` is the kernel's place in the index arrays; an instance is a run of equal ``(coll,
    seq)``: ``first[k]`` is where instance ``k`` begins (one more entry than instances)."""

    collectives: tuple[str, ...]  # collective_of each ``coll`` id
    pos: I64
    rank: I64
    coll: I64
    seq: I64
    first: I64
    #: where each position of the index is in ``pos`` (positions sorted, and their place)
    by_pos: I64
    by_pos_at: I64
    #: ranks launching each collective (an instance is complete when it has them all)
    ranks_of: tuple[frozenset[int], ...]

    def instance_at(self, k: int) -> slice:
        return slice(int(self.first[k]), int(self.first[k + 1]))

    def instance_of_pos(self, i: int) -> int | None:
        """The instance holding index position ``i``, None when it is no communication kernel."""
        j = int(np.searchsorted(self.by_pos, i))
        if j >= len(self.by_pos) or int(self.by_pos[j]) != i:
            return None
        at = int(self.by_pos_at[j])
        return int(np.searchsorted(self.first, at, side="right")) - 1


_CACHE: dict[int, tuple[weakref.ref[Index], Instances]] = {}
_LOCK = threading.Lock()


def instances(index: Index) -> Instances:
    """The communication kernels of ``index`` matched across ranks (computed once per index)."""
    with _LOCK:
        hit = _CACHE.get(id(index))
        if hit is not None and hit[0]() is index:
            return hit[1]
    built = _build(index)
    with _LOCK:
        for key in [k for k, (ref, _) in _CACHE.items() if ref() is None]:
            del _CACHE[key]
        _CACHE[id(index)] = (weakref.ref(index), built)
    return built


def _build(index: Index) -> Instances:
    comm = [i for i, n in enumerate(index.names) if n[:4].lower() in _PREFIXES]
    kind_of_name = {i: collective_of(index.names[i]) for i in comm}
    collectives = tuple(sorted(set(kind_of_name.values())))
    coll_id = {c: k for k, c in enumerate(collectives)}
    wanted = np.asarray(comm, dtype=np.int64)
    found: list[I64] = []
    ranks: list[I64] = []
    for info in index.rows:
        if info.side != "device" or info.stop <= info.start or not len(wanted):
            continue
        sl = slice(info.start, info.stop)
        hit = np.flatnonzero(np.isin(index.name[sl], wanted) & (index.kind[sl] == KERNEL)) + info.start
        found.append(hit.astype(np.int64))
        ranks.append(np.full(len(hit), info.rank, dtype=np.int64))
    pos = np.concatenate(found) if found else np.zeros(0, np.int64)
    rank = np.concatenate(ranks) if ranks else np.zeros(0, np.int64)
    lut = np.full(len(index.names), -1, dtype=np.int64)
    for i, c in kind_of_name.items():
        lut[i] = coll_id[c]
    coll = lut[np.asarray(index.name[pos], dtype=np.int64)] if len(pos) else np.zeros(0, np.int64)
    ts = np.asarray(index.ts[pos], dtype=np.int64) if len(pos) else np.zeros(0, np.int64)
    src = np.asarray(index.src[pos], dtype=np.int64) if len(pos) else np.zeros(0, np.int64)
    # the n-th of each (rank, collective) in start order (ties by event id: the store's order)
    order = np.lexsort((src, ts, coll, rank))
    pos, rank, coll = pos[order], rank[order], coll[order]
    group = np.r_[True, (rank[1:] != rank[:-1]) | (coll[1:] != coll[:-1])] if len(pos) else np.zeros(0, bool)
    starts = np.flatnonzero(group)
    seq = np.arange(len(pos), dtype=np.int64) - np.repeat(starts, np.diff(np.r_[starts, len(pos)]))
    order = np.lexsort((rank, seq, coll))
    pos, rank, coll, seq = pos[order], rank[order], coll[order], seq[order]
    change = np.r_[True, (coll[1:] != coll[:-1]) | (seq[1:] != seq[:-1])] if len(pos) else np.zeros(0, bool)
    first = np.r_[np.flatnonzero(change), len(pos)].astype(np.int64)
    ranks_of = tuple(frozenset(int(r) for r in np.unique(rank[coll == c])) for c in range(len(collectives)))
    by = np.argsort(pos, kind="stable")
    return Instances(collectives, pos, rank, coll, seq, first, pos[by], by.astype(np.int64), ranks_of)


def _events(index: Index, pos: I64) -> list[dict[str, Any]]:
    """``links._event`` of many positions at once: one read of each column, not one per field and
    event (a compressed column's single reads cost tens of microseconds each)."""
    if not len(pos):
        return []
    ts = np.asarray(index.ts[pos], dtype=np.int64).tolist()
    dur = np.asarray(index.dur[pos], dtype=np.int64).tolist()
    name = np.asarray(index.name[pos], dtype=np.int64).tolist()
    kind = np.asarray(index.kind[pos], dtype=np.int64).tolist()
    depth = np.asarray(index.depth[pos], dtype=np.int64).tolist()
    corr = np.asarray(index.corr[pos], dtype=np.int64).tolist()
    src = np.asarray(index.src[pos], dtype=np.int64).tolist()
    rows = (np.searchsorted(_starts(index), pos, side="right") - 1).tolist()
    out = []
    for m in range(len(pos)):
        info = index.rows[rows[m]]
        out.append(
            {"role": "collective", "row": info.id, "id": src[m], "name": index.names[name[m]],
             "kind": KINDS[kind[m]], "ts_ns": ts[m], "dur_ns": dur[m], "depth": depth[m],
             "correlation": corr[m], "rank": info.rank}
        )  # fmt: skip
    return out


def _answers(index: Index, table: Instances, ks: list[int]) -> list[dict[str, Any]]:
    """Instances ``ks``: each with its kernel on each rank (by rank), the first and the last to
    arrive (latest start; ties to the lowest rank)."""
    slices = [table.instance_at(k) for k in ks]
    pos = np.concatenate([table.pos[sl] for sl in slices]) if slices else np.zeros(0, np.int64)
    events = _events(index, pos)
    out, at = [], 0
    for sl in slices:
        members = events[at : at + sl.stop - sl.start]
        at += sl.stop - sl.start
        starts = [int(e["ts_ns"]) for e in members]
        first = min(range(len(members)), key=lambda m: (starts[m], members[m]["rank"]))
        last = max(range(len(members)), key=lambda m: (starts[m], -members[m]["rank"]))
        c = int(table.coll[sl.start])
        out.append(
            {
                "collective": table.collectives[c],
                "seq": int(table.seq[sl.start]),
                "ranks": len(members),
                "complete": {e["rank"] for e in members} == table.ranks_of[c],
                "events": members,
                "first": {"rank": members[first]["rank"], "id": members[first]["id"]},
                "last": {
                    "rank": members[last]["rank"],
                    "id": members[last]["id"],
                    "after_first_ns": starts[last] - starts[first],
                },
            }
        )
    return out


def instance_of(index: Index, event_id: int, row_id: str | None = None) -> dict[str, Any] | None:
    """The collective instance of one event (by its id; ``row_id`` narrows the search), or None
    when the event is not a communication kernel (or not in the index)."""
    info = index.by_id.get(row_id) if row_id is not None else None
    i = _find(index.src, event_id, (info.start, info.stop) if info is not None else None)
    if i is None:
        return None
    table = instances(index)
    k = table.instance_of_pos(i)
    return None if k is None else _answers(index, table, [k])[0]


def instances_in(
    index: Index,
    row_ids: list[str],
    t0: int,
    t1: int,
    limit: int = MAX_INSTANCES,
    check: Callable[[int], None] | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """The instances with a kernel overlapping ``[t0, t1)`` on one of ``row_ids``: how many, and
    the first ``limit`` by their earliest kernel in the window (each with every rank's kernel,
    those outside the rows or the window included: the far end of an arrow).

    ``check`` is given the number of kernels the answer will hold before it is built (the
    server's row cap raises there, before the work)."""
    table = instances(index)
    if not len(table.pos):
        return 0, []
    picked = {r: index.by_id[r] for r in row_ids if r in index.by_id}
    spans = [(info.start, info.stop) for info in picked.values() if info.side == "device"]
    # a row's kernels: a run of the positions sorted (rows are contiguous in the index)
    runs = [
        table.by_pos_at[np.searchsorted(table.by_pos, a) : np.searchsorted(table.by_pos, b)] for a, b in spans
    ]
    at = np.concatenate(runs) if runs else np.zeros(0, np.int64)
    ts = np.asarray(index.ts[table.pos[at]], dtype=np.int64)
    dur = np.asarray(index.dur[table.pos[at]], dtype=np.int64)
    inside = (ts < t1) & (ts + dur >= t0)
    at, ts = at[inside], ts[inside]
    ks = np.searchsorted(table.first, at, side="right") - 1
    # each instance once, at its earliest kernel in the window; then by that start
    by_k = np.lexsort((ts, ks))
    ks, ts = ks[by_k], ts[by_k]
    once = np.r_[True, ks[1:] != ks[:-1]] if len(ks) else np.zeros(0, bool)
    ks, ts = ks[once], ts[once]
    chosen = ks[np.lexsort((ks, ts))][:limit].tolist()
    if check is not None:
        check(sum(int(table.first[k + 1] - table.first[k]) for k in chosen))
    return len(ks), _answers(index, table, chosen)
