"""Communication per collective: NCCL/RCCL kernels grouped by the collective their name states
(``ncclKernel_AllReduce_RING_LL_Sum_float`` → AllReduce), with the time spent and an estimate of
the part of it that was waiting.

A collective kernel starts when its rank arrives and ends when the slowest peer has too, so its
duration is transfer plus waiting. Without the peers' clocks aligned, the wait is estimated per
kernel name (same collective, algorithm, protocol and type): each launch's duration beyond the
fastest launch of that name in scope. That is exact when the fastest launch waited for nobody and
messages are of one size, and an upper bound otherwise; the note says so.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Final

from hyperscope.analysis._common import ALL, COMM_KERNEL_SQL, Scope, Source, Table, device_ops_sql, rows
from hyperscope.analysis._prepared import Prepared, prepared

_COLLECTIVE: Final = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)


def collective_of(kernel: str) -> str:
    """The collective a communication kernel's name states, else the name up to its arguments."""
    match = _COLLECTIVE.match(kernel)
    return match.group(1) if match else kernel.split("(")[0]


@dataclass(frozen=True, slots=True)
class CollectiveRow:
    collective: str
    launches: int
    total_ns: int
    mean_ns: float
    wait_ns: int  # sum over launches of (duration - fastest launch of the same kernel name)


def collectives(source: Source | Prepared, scope: Scope = ALL) -> Table[CollectiveRow]:
    """Communication kernels per collective: launches, time, and estimated waiting."""
    with prepared(source, scope) as ctx:
        dev = device_ops_sql(ctx.windows, ("kernel",))
        found = rows(
            ctx.con,
            f"""SELECT name, count(*), sum(dur_ns), min(dur_ns) FROM ({dev})
                WHERE {COMM_KERNEL_SQL} GROUP BY name""",
        )
        notes = list(ctx.notes)
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for name, count, total, fastest in found:
        slot = acc[collective_of(str(name))]
        slot[0] += int(count)
        slot[1] += int(total)
        slot[2] += int(total) - int(count) * int(fastest)
    out = tuple(
        CollectiveRow(c, n, t, t / n, w) for c, (n, t, w) in sorted(acc.items(), key=lambda kv: -kv[1][1])
    )
    if out:
        notes.append(
            "wait = each launch's time beyond the fastest launch of the same kernel name: an estimate "
            "(an upper bound where message sizes differ)"
        )
    else:
        notes.append("no communication kernels in scope")
    return Table("Communication per collective", CollectiveRow, out, tuple(notes))
