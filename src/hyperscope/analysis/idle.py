"""Why a GPU was idle: each gap between device operations on one GPU, sorted into causes.

* ``host wait``: the operation that ended the gap was launched by the CPU after the GPU had gone
  idle, so the GPU was waiting for the host (data loading, Python overhead, a sync on the CPU);
* ``launch gap``: a gap shorter than ``short_gap_ns`` (default 30 µs, HTA's kernel-wait threshold)
  between operations already queued: launch overhead between back-to-back kernels;
* ``other``: queued work that did not start (a dependency on another stream, an event wait).

The three add up to the GPU's idle time between its first and last operation in scope.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from hyperscope.analysis._common import (
    ALL,
    Level,
    Scope,
    Source,
    Table,
)
from hyperscope.analysis._prepared import Prepared, prepared
from hyperscope.analysis.gpupass import gpu_pass
from hyperscope.errors import UsageError

CAUSES = ("host wait", "launch gap", "other")


@dataclass(frozen=True, slots=True)
class IdleRow:
    group: str
    cause: str
    gaps: int
    idle_ns: int
    pct_of_idle: float


def idle_breakdown(
    source: Source | Prepared, scope: Scope = ALL, level: Level = Level.RANK, *, short_gap_ns: int = 30_000
) -> Table[IdleRow]:
    """GPU idle time between operations by cause, per rank, node or job."""
    if short_gap_ns < 0:
        raise UsageError(f"short_gap_ns {short_gap_ns}: expected a non-negative duration in ns")
    with prepared(source, scope) as ctx:
        result = gpu_pass(ctx, short_gap_ns=short_gap_ns)
        nodes = {w.rank: w.node for w in ctx.windows}
        notes = list(ctx.notes)
    acc: dict[tuple[str, str], list[int]] = {}
    for (rank, _device), causes in result.gaps.items():
        group = str(rank) if level is Level.RANK else (nodes[rank] or "?") if level is Level.NODE else "job"
        for cause, (n, ns) in causes.items():
            slot = acc.setdefault((group, cause), [0, 0])
            slot[0] += n
            slot[1] += ns
    found = [(g, c, n, t) for (g, c), (n, t) in sorted(acc.items())]
    totals: dict[str, int] = defaultdict(int)
    for g, _, _, t in found:
        totals[str(g)] += int(t)
    out = tuple(
        IdleRow(
            str(g), str(c), int(n), int(t), round(100 * int(t) / totals[str(g)], 3) if totals[str(g)] else 0.0
        )
        for g, c, n, t in found
    )
    if not out:
        notes.append("no idle gaps between GPU operations in scope")
    return Table("GPU idle time by cause", IdleRow, out, tuple(notes))
