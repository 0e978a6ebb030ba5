"""Collectives across ranks: the same collective on every rank, matched, and each rank's wait for
the slowest to arrive.

The n-th launch of a collective (``collective_of`` its kernel name: AllReduce, SendRecv, ...) on
one rank is the n-th on every other rank: NCCL requires every rank of a communicator to issue its
collectives in one order. An instance counts when every rank in scope that launched that collective
has its n-th launch. Its kernels end together (none can finish before the last peer has joined), so
the ends say how the ranks' clocks differ: each rank's *offset* is the median, over the instances,
of its end minus the instance's median end, and arrivals (starts) are compared after removing it.
A rank's *wait* in an instance is the last rank's arrival minus its own: how long its kernel sat
waiting for the slowest peer; the last to arrive waited 0.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from hyperscope.analysis._common import ALL, COMM_KERNEL_SQL, Scope, Source, Table, device_ops_sql, rows
from hyperscope.analysis._prepared import Prepared, prepared
from hyperscope.analysis.collectives import collective_of

__all__ = ["CollectiveWaitRow", "collective_waits"]


@dataclass(frozen=True, slots=True)
class CollectiveWaitRow:
    rank: int
    collectives: int  # instances matched on every rank
    wait_ns: int  # summed over them
    mean_wait_ns: float
    max_wait_ns: int
    last_arrivals: int  # instances in which this rank arrived last (the others waited for it)
    clock_offset_ns: int  # removed from its starts: its ends' median lead over the others'


def collective_waits(source: Source | Prepared, scope: Scope = ALL) -> Table[CollectiveWaitRow]:
    """Per rank: the collectives matched across ranks, its wait for the slowest, its last arrivals."""
    with prepared(source, scope) as ctx:
        dev = device_ops_sql(ctx.windows, ("kernel",))
        found = rows(
            ctx.con,
            f"SELECT rank, name, ts_ns, ts_ns + dur_ns FROM ({dev}) WHERE {COMM_KERNEL_SQL} "
            "ORDER BY rank, ts_ns",
        )
        notes = list(ctx.notes)
    launches: dict[tuple[str, int], dict[int, tuple[int, int]]] = defaultdict(dict)
    ordinal: dict[tuple[int, str], int] = defaultdict(int)
    ranks_of: dict[str, set[int]] = defaultdict(set)
    for rank, name, start, end in found:
        kind = collective_of(str(name))
        n = ordinal[(int(rank), kind)]
        ordinal[(int(rank), kind)] = n + 1
        launches[(kind, n)][int(rank)] = (int(start), int(end))
        ranks_of[kind].add(int(rank))
    instances = [
        (key, by_rank)
        for key, by_rank in launches.items()
        if len(by_rank) > 1 and set(by_rank) == ranks_of[key[0]]
    ]
    if not instances:
        notes.append("no collective launched on two or more ranks in scope")
        return Table("Wait for the slowest rank", CollectiveWaitRow, (), tuple(notes))
    leads: dict[int, list[int]] = defaultdict(list)
    for _, by_rank in instances:
        mid = float(np.median([e for _, e in by_rank.values()]))
        for r, (_, e) in by_rank.items():
            leads[r].append(int(e - mid))
    offset = {r: int(np.median(v)) for r, v in leads.items()}
    waits: dict[int, list[int]] = defaultdict(list)
    last: dict[int, int] = defaultdict(int)
    for _, by_rank in instances:
        arrive = {r: s - offset[r] for r, (s, _) in by_rank.items()}
        latest = max(arrive.values())
        last[max(arrive, key=lambda r: (arrive[r], -r))] += 1
        for r, a in arrive.items():
            waits[r].append(latest - a)
    out = tuple(
        CollectiveWaitRow(
            r, len(w), int(sum(w)), sum(w) / len(w), int(max(w)), last[r], offset[r]
        )
        for r, w in sorted(waits.items())
    )  # fmt: skip
    notes.append(
        "the n-th launch of a collective on each rank is one instance; starts are compared after "
        "removing each rank's clock offset, read from the kernels' common end"
    )
    return Table("Wait for the slowest rank", CollectiveWaitRow, out, tuple(notes))
