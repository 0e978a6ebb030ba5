"""Per-rank comparison that points at stragglers.

In synchronous data-parallel training every rank waits in each collective for the slowest one, so
the straggler is the rank that spends the *least* time in communication kernels (it arrives last
and waits for nobody) while the others' communication time is inflated by waiting for it. We flag
a rank as straggler when its communication time is below the median of the ranks by more than
``threshold`` (default 25%) and it is the lowest; and as slow when its mean complete step is above
the median by more than ``threshold``. Each flag says which figure triggered it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from hyperscope.analysis._common import ALL, Level, Scope, Source, Table
from hyperscope.analysis._prepared import Prepared, prepared
from hyperscope.analysis.breakdown import gpu_time
from hyperscope.analysis.steps import step_time_stats, step_times
from hyperscope.errors import UsageError


@dataclass(frozen=True, slots=True)
class RankRow:
    rank: int
    steps: int
    mean_step_ns: float | None
    busy_ns: int
    compute_ns: int
    communication_ns: int
    idle_ns: int
    straggler: bool
    reason: str


def rank_comparison(
    source: Source | Prepared, scope: Scope = ALL, *, threshold: float = 0.25
) -> Table[RankRow]:
    """One row per rank with its step time and GPU time split; stragglers flagged with a reason."""
    if not 0 < threshold < 10:
        raise UsageError(f"threshold {threshold}: expected a fraction such as 0.25")
    with prepared(source, scope) as ctx:
        gpu = gpu_time(ctx, scope, Level.RANK)
        steps = step_times(ctx, scope)
    stats = {r.group: r for r in step_time_stats(steps, level=Level.RANK).rows}
    per_rank: dict[int, list[int]] = {}
    for g in gpu.rows:
        acc = per_rank.setdefault(int(g.group), [0, 0, 0, 0])
        acc[0] += g.busy_ns
        acc[1] += g.compute_ns
        acc[2] += g.communication_ns
        acc[3] += g.idle_ns
    ranks = sorted(set(per_rank) | {int(k) for k in stats})
    comm = {r: v[2] for r, v in per_rank.items()}  # ranks with GPU events only
    means = {r: stats[str(r)].mean_ns for r in ranks if str(r) in stats}
    med_comm = statistics.median(comm.values()) if comm else 0
    med_step = statistics.median(means.values()) if means else 0.0
    lowest = min(comm, key=lambda r: comm[r]) if comm else None
    out = []
    for r in ranks:
        reasons = []
        if len(comm) > 1 and r == lowest and med_comm and comm[r] < (1 - threshold) * med_comm:
            reasons.append(
                f"least communication time ({comm[r] / 1e6:.3f} ms vs median {med_comm / 1e6:.3f} ms): "
                "the other ranks wait for it in collectives"
            )
        if len(means) > 1 and r in means and means[r] > (1 + threshold) * med_step:
            reasons.append(f"mean step {means[r] / 1e6:.3f} ms vs median {med_step / 1e6:.3f} ms")
        busy, compute, c, idle = per_rank.get(r, [0, 0, 0, 0])
        st = stats.get(str(r))
        out.append(
            RankRow(
                r,
                st.steps if st else 0,
                st.mean_ns if st else None,
                busy,
                compute,
                c,
                idle,
                bool(reasons),
                "; ".join(reasons),
            )
        )
    notes = list(gpu.notes)
    if len(ranks) < 2:
        notes.append("one rank: nothing to compare")
    return Table("Ranks compared", RankRow, tuple(out), tuple(dict.fromkeys(notes)))
