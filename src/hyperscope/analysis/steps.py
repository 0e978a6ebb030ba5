"""Step time: each ``ProfilerStep#N`` (kind ``step``: torch.profiler's marks, and hyperscope's own),
their distribution, and the steps a distribution must not trust.

Two things make raw step marks lie. A profiler that stops mid-step leaves a last step that is
only a stub (the AMD trace's last step is 49 µs after steps of 9 ms); we flag the last step of a
rank as ``partial`` when it is shorter than half the median of that rank's other steps, and leave
partial steps out of the statistics (HTA drops the last step unconditionally, complete or not). And
a step number can appear twice on one rank (a restarted schedule); each occurrence is a real
interval, so both are kept and flagged ``repeated``. A step without an end (no duration) cannot be
timed: it is counted in the notes, never guessed.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from hyperscope.analysis._common import (
    ALL,
    STEP_NAME_SQL,
    Level,
    Scope,
    Source,
    Table,
    percentile,
    rows,
    windows_sql,
)
from hyperscope.analysis._prepared import Prepared, prepared
from hyperscope.errors import UsageError

#: A last step shorter than this share of the rank's median step is a profiler stub.
PARTIAL_RATIO = 0.5


@dataclass(frozen=True, slots=True)
class StepRow:
    rank: int
    node: str
    step: int
    start_ns: int
    dur_ns: int
    repeated: bool
    partial: bool


@dataclass(frozen=True, slots=True)
class StepStatsRow:
    group: str
    steps: int
    mean_ns: float
    std_ns: float
    min_ns: int
    p50_ns: float
    p90_ns: float
    p95_ns: float
    p99_ns: float
    max_ns: int


@dataclass(frozen=True, slots=True)
class HistogramBin:
    lo_ns: int
    hi_ns: int
    count: int


def step_times(source: Source | Prepared, scope: Scope = ALL) -> Table[StepRow]:
    """Every step mark in scope, flagged ``repeated`` / ``partial``."""
    with prepared(source, scope) as ctx:
        if "steps" in ctx.cache:
            cached: Table[StepRow] = ctx.cache["steps"]
            return cached
        con, windows = ctx.con, ctx.windows
        found = rows(
            con,
            f"""SELECT e.rank, w.node, TRY_CAST(regexp_extract(e.name, '{STEP_NAME_SQL}', 1) AS BIGINT) AS n,
                       e.ts_ns, e.dur_ns
                FROM events e JOIN {windows_sql(windows)} w ON e.rank = w.rank
                WHERE e.kind = 'step' AND e.ts_ns <= w.hi AND e.ts_ns + coalesce(e.dur_ns, 0) >= w.lo
                ORDER BY e.rank, e.ts_ns""",
        )
        notes = list(ctx.notes)
    unnumbered = sum(1 for r in found if r[2] is None)
    open_ended = sum(1 for r in found if r[2] is not None and r[4] is None)
    if unnumbered:
        notes.append(f"{unnumbered} step marks without a ProfilerStep#N number were ignored")
    if open_ended:
        notes.append(f"{open_ended} steps have no end (no duration) and are not timed")
    timed = [r for r in found if r[2] is not None and r[4] is not None]
    if scope.steps is not None:
        timed = [r for r in timed if scope.steps[0] <= int(r[2]) <= scope.steps[1]]
    per_rank: dict[int, list[tuple[int, str, int, int, int]]] = defaultdict(list)
    for rank, node, n, ts, dur in timed:
        per_rank[int(rank)].append((int(rank), str(node), int(n), int(ts), int(dur)))
    out: list[StepRow] = []
    for _, marks in sorted(per_rank.items()):
        counts: dict[int, int] = defaultdict(int)
        for m in marks:
            counts[m[2]] += 1
        last = max(range(len(marks)), key=lambda i: marks[i][3])
        others = [m[4] for i, m in enumerate(marks) if i != last]
        partial_last = bool(others) and marks[last][4] < PARTIAL_RATIO * statistics.median(others)
        for i, (r, node, n, ts, dur) in enumerate(marks):
            out.append(StepRow(r, node, n, ts, dur, counts[n] > 1, partial_last and i == last))
    repeated = sorted({(r.rank, r.step) for r in out if r.repeated})
    if repeated:
        notes.append(
            "repeated step numbers (each occurrence kept): "
            + ", ".join(f"rank {r} step {s}" for r, s in repeated[:10])
        )
    for row in out:
        if row.partial:
            notes.append(
                f"rank {row.rank}: last step {row.step} ({row.dur_ns / 1e6:.3f} ms) is partial, not "
                f"in the statistics"
            )
    if not out:
        notes.append("no ProfilerStep#N marks in scope")
    table = Table("Steps", StepRow, tuple(out), tuple(notes))
    ctx.cache["steps"] = table  # rank_comparison and the step tables of a dashboard share it
    return table


def step_time_stats(
    source: Source | Table[StepRow], scope: Scope = ALL, level: Level = Level.JOB
) -> Table[StepStatsRow]:
    """Percentiles of complete steps' durations per rank, node or for the job."""
    steps = source if isinstance(source, Table) else step_times(source, scope)
    groups: dict[str, list[int]] = defaultdict(list)
    for r in steps.rows:
        if not r.partial:
            key = str(r.rank) if level is Level.RANK else (r.node or "?") if level is Level.NODE else "job"
            groups[key].append(r.dur_ns)
    out = []
    for key, durs in sorted(groups.items()):
        durs.sort()
        out.append(
            StepStatsRow(
                key,
                len(durs),
                statistics.fmean(durs),
                statistics.stdev(durs) if len(durs) > 1 else 0.0,
                durs[0],
                percentile(durs, 0.5),
                percentile(durs, 0.9),
                percentile(durs, 0.95),
                percentile(durs, 0.99),
                durs[-1],
            )
        )
    title = {
        Level.RANK: "Step time per rank",
        Level.NODE: "Step time per node",
        Level.JOB: "Step time, whole job",
    }
    return Table(title[level], StepStatsRow, tuple(out), steps.notes)


def step_time_histogram(
    source: Source | Table[StepRow], scope: Scope = ALL, bins: int = 20
) -> Table[HistogramBin]:
    """Equal-width histogram of complete steps' durations (all ranks of the scope together)."""
    if bins < 1:
        raise UsageError(f"bins {bins}: expected a positive number of histogram bins")
    steps = source if isinstance(source, Table) else step_times(source, scope)
    return Table(
        "Step time histogram",
        HistogramBin,
        histogram([r.dur_ns for r in steps.rows if not r.partial], bins),
        steps.notes,
    )


def histogram(values: list[int], bins: int) -> tuple[HistogramBin, ...]:
    """Equal-width integer bins [lo, hi) covering min..max (the last bin includes max)."""
    if not values:
        return ()
    lo, hi = min(values), max(values)
    if lo == hi:
        return (HistogramBin(lo, hi + 1, len(values)),)
    width = math.ceil((hi - lo + 1) / bins)
    counts = [0] * bins
    for v in values:
        counts[min((v - lo) // width, bins - 1)] += 1
    return tuple(HistogramBin(lo + i * width, lo + (i + 1) * width, c) for i, c in enumerate(counts))
