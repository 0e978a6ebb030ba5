"""One side of a comparison, computed on columns: what ``compare`` needs of a (source, scope), with
no Python object per event or per step.

The tables are those of the ordinary analyses (step_times, gpu_time, idle_breakdown,
kernel_summary, cpu_operators, peak_memory, collectives) with the same definitions; what differs is
how they are computed, because a comparison reads two whole profiles at once (10M events a side
took 40 s through the ordinary path): the GPU pass is the column sweep of ``_sweep``, the steps are
numpy arrays (a 10M-event profile holds 285k steps), and kernels and collectives come from one
aggregate per kernel name. tests/analysis/test_compare_side checks each against its analysis.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from hyperscope.analysis._common import (
    ALL,
    STEP_NAME_SQL,
    Level,
    Scope,
    Source,
    Table,
    connection,
    device_ops_sql,
    percentile,
    windows_sql,
)
from hyperscope.analysis._prepared import Prepared
from hyperscope.analysis._sweep import sweep_pass
from hyperscope.analysis.breakdown import GpuTimeRow, gpu_time
from hyperscope.analysis.collectives import CollectiveRow, collective_of
from hyperscope.analysis.idle import idle_breakdown
from hyperscope.analysis.memory import MemoryPeakRow, peak_memory
from hyperscope.analysis.operators import OperatorRow, cpu_operators
from hyperscope.analysis.steps import PARTIAL_RATIO, HistogramBin, StepStatsRow
from hyperscope.store.profile import Profile

I64 = npt.NDArray[np.int64]
_COMM: Final = re.compile(r"(nccl|rccl)", re.IGNORECASE)  # COMM_KERNEL_SQL's '^(nccl|rccl)', 'i'
_NONE: Final = np.iinfo(np.int64).min


@dataclass(frozen=True, slots=True)
class StepColumns:
    """``step_times`` as arrays, in its order (rank, then start): rank, step number, start,
    duration and whether the step is a partial last one; its notes."""

    rank: I64
    step: I64
    start: I64
    dur: I64
    partial: npt.NDArray[np.bool_]
    notes: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.step)

    @property
    def complete(self) -> I64:
        """Durations of the steps the statistics trust (all but partial last steps)."""
        return self.dur[~self.partial]


@dataclass(frozen=True, slots=True)
class KernelTotal:
    name: str
    kernel_type: str  # computation | communication
    launches: int
    total_ns: int


@dataclass(frozen=True, slots=True)
class SideData:
    steps: StepColumns
    gpu: Table[GpuTimeRow]
    idle: dict[str, int]
    kernels: tuple[KernelTotal, ...]
    operators: tuple[OperatorRow, ...]
    memory: Table[MemoryPeakRow]
    collectives: tuple[CollectiveRow, ...]
    notes: tuple[str, ...]

    @property
    def per_step(self) -> int:
        return max(1, len(self.steps))

    @property
    def complete(self) -> I64:
        return self.steps.complete


def compute_side(source: Source, scope: Scope) -> SideData:
    """Every table one side of a comparison needs, on one connection and one resolved scope.

    The GPU tables of a whole stored profile come from its stored dashboard when it has one
    (``stored_gpu_tables``): the GPU pass is most of a side's time (3.6-4.2 s of CPU of ~5 at 10M
    events), and the dashboard that ``import`` and ``profile`` keep already holds its answer."""
    stored = stored_gpu_tables(source, scope)
    with connection(source) as con:
        ctx = Prepared(con, scope)  # not materialized: nothing here reads its relations
        try:
            if stored is None:
                sweep_pass(ctx)  # cached: gpu_time and idle_breakdown read it
                gpu = gpu_time(ctx, scope, Level.JOB)
                idle = {r.cause: r.idle_ns for r in idle_breakdown(ctx, scope, Level.JOB).rows}
            else:
                gpu, idle = stored
            steps = step_columns(ctx)
            kernels, comm = kernel_totals(ctx)
            operators = cpu_operators(ctx, scope)
            memory = peak_memory(ctx, scope)
        finally:
            ctx.close()
    notes = tuple(dict.fromkeys((*steps.notes, *gpu.notes)))
    return SideData(steps, gpu, idle, kernels, operators.rows, memory, comm, notes)


def stored_gpu_tables(source: Source, scope: Scope) -> tuple[Table[GpuTimeRow], dict[str, int]] | None:
    """``gpu_time`` at the job level and the idle time by cause, as the stored dashboard of a whole
    profile holds them (``analysis.stored``: computed by this very analysis code, its digest in the
    file name, so equal to what ``compute_side`` would compute); None for any other scope, for a
    connection, or when nothing usable is stored."""
    from hyperscope.analysis.stored import load_dashboard  # the dashboard imports every analysis

    if scope != ALL or not isinstance(source, Profile):
        return None
    found = load_dashboard(source)
    try:
        job, by_rank = found["gpu_time_job"], found["idle"]  # type: ignore[index]
        gpu = Table(
            str(job["title"]),
            GpuTimeRow,
            tuple(GpuTimeRow(**row) for row in job["rows"]),
            tuple(str(n) for n in job["notes"]),
        )
        idle: dict[str, int] = {}
        for row in by_rank["rows"]:
            idle[str(row["cause"])] = idle.get(str(row["cause"]), 0) + int(row["idle_ns"])
    except (TypeError, KeyError, ValueError):  # none stored, or not in the shape expected
        return None
    return gpu, dict(sorted(idle.items()))


def step_columns(ctx: Prepared) -> StepColumns:
    """``steps.step_times`` of the scope as columns (same marks, flags and notes)."""
    got = ctx.con.execute(
        f"""SELECT e.rank::BIGINT AS rank,
                   coalesce(TRY_CAST(regexp_extract(e.name, '{STEP_NAME_SQL}', 1) AS BIGINT), {_NONE}) AS n,
                   e.ts_ns::BIGINT AS ts, coalesce(e.dur_ns, {_NONE})::BIGINT AS dur
            FROM events e JOIN {windows_sql(ctx.windows)} w ON e.rank = w.rank
            WHERE e.kind = 'step' AND e.ts_ns <= w.hi AND e.ts_ns + coalesce(e.dur_ns, 0) >= w.lo
            ORDER BY e.rank, e.ts_ns"""
    ).fetchnumpy()
    rank, n, ts, dur = (np.asarray(got[c], dtype=np.int64) for c in ("rank", "n", "ts", "dur"))
    notes = list(ctx.notes)
    numbered = n != _NONE
    unnumbered = int((~numbered).sum())
    open_ended = int((numbered & (dur == _NONE)).sum())
    if unnumbered:
        notes.append(f"{unnumbered} step marks without a ProfilerStep#N number were ignored")
    if open_ended:
        notes.append(f"{open_ended} steps have no end (no duration) and are not timed")
    keep = numbered & (dur != _NONE)
    steps = ctx.scope.steps
    if steps is not None:
        keep &= (n >= steps[0]) & (n <= steps[1])
    rank, n, ts, dur = rank[keep], n[keep], ts[keep], dur[keep]
    partial = np.zeros(len(n), dtype=np.bool_)
    repeated: list[tuple[int, int]] = []
    bounds = np.flatnonzero(np.diff(rank)) + 1
    for a, b in zip(np.r_[0, bounds], np.r_[bounds, len(rank)], strict=True):
        if a == b:
            continue
        last = a + int(np.argmax(ts[a:b]))  # the first of the latest starts, as step_times
        others = np.delete(dur[a:b], last - a)
        if len(others) and dur[last] < PARTIAL_RATIO * float(np.median(others)):
            partial[last] = True
        nums = np.sort(n[a:b])
        twice = nums[1:][nums[1:] == nums[:-1]]
        repeated += sorted({(int(rank[a]), int(s)) for s in twice})
    if repeated:
        notes.append(
            "repeated step numbers (each occurrence kept): "
            + ", ".join(f"rank {r} step {s}" for r, s in sorted(repeated)[:10])
        )
    for i in np.flatnonzero(partial):
        notes.append(
            f"rank {int(rank[i])}: last step {int(n[i])} ({int(dur[i]) / 1e6:.3f} ms) is partial, not "
            f"in the statistics"
        )
    if len(n) == 0:
        notes.append("no ProfilerStep#N marks in scope")
    return StepColumns(rank, n, ts, dur, partial, tuple(notes))


def kernel_totals(ctx: Prepared) -> tuple[tuple[KernelTotal, ...], tuple[CollectiveRow, ...]]:
    """Launches and time per kernel name (``kernel_summary``'s rows, all of them) and per
    collective (``collectives``' rows), from one aggregate per kernel name."""
    found = ctx.con.execute(
        f"""SELECT name, count(*), sum(dur_ns)::BIGINT, min(dur_ns)
            FROM ({device_ops_sql(ctx.windows, ("kernel",))}) GROUP BY name"""
    ).fetchall()
    kernels: list[KernelTotal] = []
    acc: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for name, count, total, fastest in found:
        comm = _COMM.match(str(name)) is not None
        kind = "communication" if comm else "computation"
        kernels.append(KernelTotal(str(name), kind, int(count), int(total)))
        if comm:
            slot = acc[collective_of(str(name))]
            slot[0] += int(count)
            slot[1] += int(total)
            slot[2] += int(total) - int(count) * int(fastest)
    comm_rows = tuple(
        CollectiveRow(c, k, t, t / k, w) for c, (k, t, w) in sorted(acc.items(), key=lambda kv: -kv[1][1])
    )
    return tuple(kernels), comm_rows


def stats_row(group: str, durations: I64) -> StepStatsRow | None:
    """``step_time_stats``'s row of these durations (None without any)."""
    if len(durations) == 0:
        return None
    d = np.sort(durations)
    count = len(d)
    fits = int(d.max()) < (1 << 62) // count and int(d.min()) >= 0  # an int64 sum cannot overflow
    total = int(d.sum()) if fits else sum(d.tolist())
    std = 0.0
    if count > 1:  # two passes in float64: the deviations from the mean are small numbers
        dev = d - total / count
        std = math.sqrt(float(np.dot(dev, dev)) / (count - 1))
    p50, p90, p95, p99 = (percentile(d, p) for p in (0.5, 0.9, 0.95, 0.99))  # type: ignore[arg-type]
    return StepStatsRow(group, count, total / count, std, int(d[0]), p50, p90, p95, p99, int(d[-1]))


def histogram_counts(a: I64, b: I64, bins: int) -> list[tuple[HistogramBin, int, int]]:
    """``steps.histogram`` of A's and B's durations together, with each side's count per bin."""
    both = np.concatenate([a, b])
    if len(both) == 0:
        return []
    lo, hi = int(both.min()), int(both.max())
    if lo == hi:
        return [(HistogramBin(lo, hi + 1, len(both)), len(a), len(b))]
    width = -(-(hi - lo + 1) // bins)
    ca = np.bincount(np.minimum((a - lo) // width, bins - 1), minlength=bins)
    cb = np.bincount(np.minimum((b - lo) // width, bins - 1), minlength=bins)
    return [
        (HistogramBin(lo + i * width, lo + (i + 1) * width, int(ca[i] + cb[i])), int(ca[i]), int(cb[i]))
        for i in range(bins)
    ]


def slowest_per_step(steps: StepColumns) -> tuple[I64, I64]:
    """Step numbers in order, and the longest complete duration of each over the side's ranks."""
    keep = ~steps.partial
    n, dur = steps.step[keep], steps.dur[keep]
    if len(n) == 0:
        return n, dur
    order = np.lexsort((dur, n))
    n, dur = n[order], dur[order]
    last = np.r_[np.flatnonzero(np.diff(n)), len(n) - 1]
    return n[last], dur[last]
