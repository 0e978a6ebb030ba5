"""Two runs side by side: what got slower, where, and by how much of the step time.

``compare(a, b)`` takes two (source, scope) pairs: two profiles of one job, two jobs, two ranks of
one profile (``Scope(ranks=(3,))`` against ``Scope(ranks=(0,))``) or two step ranges. Each side has
the tables of the ordinary analyses, computed on columns (``_compare_side``: one GPU sweep, steps as
arrays; both sides at once); this module only lines the answers up.

Figures are compared **per step**: each side's totals divided by its number of steps (step marks
summed over its ranks, so a per-step figure is that of one rank's step). Two sides with different
step counts or rank counts are then comparable, and a kernel's per-step change is in the same unit
as the change of the median step: its ``share_pct`` is how much of the step-time change it
explains. Kernels can run concurrently, so shares need not add up to 100. A side without steps is
divided by 1 (totals), and a note says so.

Kernels are matched by name, then, among those left, by ``normalise_kernel`` (template arguments,
argument lists and tile sizes stripped); what still has no partner is only in A or only in B.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import duckdb
import numpy as np
import numpy.typing as npt

from hyperscope.analysis._common import Scope, Source, Table
from hyperscope.analysis._compare_side import SideData as _SideData
from hyperscope.analysis._compare_side import (
    compute_side,
    histogram_counts,
    slowest_per_step,
    stats_row,
)
from hyperscope.analysis._diffstats import (
    BOOTSTRAP_RESAMPLES,
    CONFIDENCE,
    MIN_STEPS,
    median_diff_interval,
    normalise_kernel,
)
from hyperscope.analysis.idle import CAUSES
from hyperscope.analysis.steps import StepStatsRow

Side = tuple[Source, Scope]
HIST_BINS: Final = 20


@dataclass(frozen=True, slots=True)
class SummaryRow:
    steps_a: int
    steps_b: int
    median_a_ns: float | None
    median_b_ns: float | None
    change_ns: float | None
    change_pct: float | None
    interval_lo_ns: float | None
    interval_hi_ns: float | None
    beyond_noise: bool | None  # None: too few steps to judge
    test: str
    explained_pct: float | None
    top_kernels: tuple[str, ...]
    line: str


@dataclass(frozen=True, slots=True)
class StepBinRow:
    lo_ns: int
    hi_ns: int
    count_a: int
    count_b: int


@dataclass(frozen=True, slots=True)
class StepPairRow:
    """The i-th step of A beside the i-th step of B (each the slowest of its ranks at that step
    number: the step the job waited for), so the same step of each run is side by side."""

    index: int
    step_a: int | None
    dur_a_ns: int | None
    step_b: int | None
    dur_b_ns: int | None
    delta_ns: int | None


@dataclass(frozen=True, slots=True)
class MetricRow:
    metric: str
    unit: str  # ns | % | bytes
    a: float | None
    b: float | None
    delta: float | None
    a_per_step: float | None
    b_per_step: float | None
    delta_per_step: float | None


@dataclass(frozen=True, slots=True)
class DeltaRow:
    """One kernel (or CPU operator) in A and B; ``share_pct`` is of the change of the median step."""

    name: str
    match: str  # name | normalised | only A | only B
    kernel_type: str  # computation | communication ('' for operators)
    launches_a: int
    launches_b: int
    total_a_ns: int
    total_b_ns: int
    mean_a_ns: float | None
    mean_b_ns: float | None
    delta_launches: int
    delta_total_ns: int
    delta_mean_ns: float | None
    delta_per_step_ns: float
    share_pct: float | None
    names_a: str
    names_b: str


@dataclass(frozen=True, slots=True)
class CollectiveDeltaRow:
    collective: str
    launches_a: int
    launches_b: int
    total_a_ns: int
    total_b_ns: int
    wait_a_ns: int
    wait_b_ns: int
    delta_per_step_ns: float
    delta_wait_per_step_ns: float


@dataclass(frozen=True, slots=True)
class Comparison:
    """The answer of :func:`compare`: the summary and one table per question, all JSON-ready."""

    labels: tuple[str, str]
    summary: SummaryRow
    tables: dict[str, Table[Any]]

    @property
    def kernels(self) -> Table[DeltaRow]:
        table: Table[DeltaRow] = self.tables["kernels"]
        return table

    def only(self, side: str) -> tuple[DeltaRow, ...]:
        """Kernels only in side ``"A"`` or ``"B"``."""
        return tuple(r for r in self.kernels.rows if r.match == f"only {side}")

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            "labels": list(self.labels),
            "summary": asdict(self.summary),
            "tables": {k: t.to_dict() for k, t in self.tables.items()},
        }


def compare(a: Side, b: Side, *, labels: tuple[str, str] = ("A", "B")) -> Comparison:
    """B against A: step time, GPU time, kernels, CPU operators, peak memory, collectives."""
    sa, sb = _both_sides(a, b)
    ma, mb = _median(sa.complete), _median(sb.complete)
    step_change = mb - ma if ma is not None and mb is not None else None
    kernels = _with_shares(_match_kernels(sa, sb), step_change)
    operators = _with_shares(_match_operators(sa, sb), step_change)
    summary = _summary(sa, sb, kernels)
    notes = [f"{labels[0]}: {n}" for n in sa.notes] + [f"{labels[1]}: {n}" for n in sb.notes]
    for label, side in zip(labels, (sa, sb), strict=True):
        if len(side.steps) == 0:
            notes.append(f"{label} has no steps: its totals are compared, not per-step figures")
    tables: dict[str, Table[Any]] = {
        "summary": Table("Summary", SummaryRow, (summary,), tuple(notes)),
        "steps": _step_stats(sa, sb, labels),
        "step_histogram": Table("Step time distribution", StepBinRow, _step_bins(sa, sb)),
        "step_pairs": Table(
            "Steps side by side (slowest rank at each step)", StepPairRow, _step_pairs(sa, sb)
        ),
        "gpu_time": Table(
            "GPU time (all GPUs of each side; per step = per rank's step)",
            MetricRow,
            _gpu_metrics(sa, sb),
            ("idle causes: see idle_breakdown in docs/analysis.md",),
        ),
        "kernels": Table(
            "Kernels, by how much each explains the step-time change",
            DeltaRow,
            kernels,
            ("matched by name, then by the name without template arguments and tile sizes",),
        ),
        "operators": Table(
            "CPU operators, by how much each explains the step-time change",
            DeltaRow,
            operators,
            ("operator durations are inclusive (an operator contains the ones it calls)",),
        ),
        "memory": Table(
            "Peak GPU memory (highest over each side's GPUs)",
            MetricRow,
            _memory(sa, sb),
            tuple(
                f"{label}: {n}"
                for label, side in zip(labels, (sa, sb), strict=True)
                for n in side.memory.notes
                if n not in side.notes
            ),
        ),
        "collectives": Table(
            "Communication per collective",
            CollectiveDeltaRow,
            _collectives(sa, sb),
            ("wait = time beyond the fastest launch of the same kernel name (an estimate)",),
        ),
    }
    return Comparison(labels, summary, tables)


def _both_sides(a: Side, b: Side) -> tuple[_SideData, _SideData]:
    """Both sides at once when each has a connection of its own (a Profile opens one per side):
    their DuckDB scans and numpy sorts release the GIL, so on two cores each side runs on one."""
    if isinstance(a[0], duckdb.DuckDBPyConnection) or isinstance(b[0], duckdb.DuckDBPyConnection):
        return compute_side(*a), compute_side(*b)  # one caller's connection is not shared by threads
    with ThreadPoolExecutor(2, thread_name_prefix="hyperscope-compare") as pool:
        fa, fb = pool.submit(compute_side, *a), pool.submit(compute_side, *b)
        return fa.result(), fb.result()


def _median(values: npt.NDArray[np.int64]) -> float | None:
    return float(np.median(values)) if len(values) else None


def _summary(sa: _SideData, sb: _SideData, kernels: Sequence[DeltaRow]) -> SummaryRow:
    ca, cb = sa.complete, sb.complete
    ma, mb = _median(ca), _median(cb)
    change = mb - ma if ma is not None and mb is not None else None
    pct = 100 * change / ma if change is not None and ma else None
    interval = median_diff_interval(ca, cb)
    test = (
        f"{100 * CONFIDENCE:.0f}% percentile bootstrap interval of median(B) - median(A), "
        f"{BOOTSTRAP_RESAMPLES} resamples"
    )
    beyond = interval.excludes_zero if interval is not None else None
    explained: float | None = None
    picked: list[DeltaRow] = []
    if change:
        ranked = [k for k in kernels if k.delta_per_step_ns * change > 0]
        cum = 0.0
        for k in ranked[:3]:
            picked.append(k)
            cum += 100 * k.delta_per_step_ns / change
            if cum >= 80:
                break
        if picked:
            explained = round(cum, 1)
    top = tuple(k.name for k in picked)
    if change is None:
        busy_a = sum(r.busy_ns for r in sa.gpu.rows) / sa.per_step
        busy_b = sum(r.busy_ns for r in sb.gpu.rows) / sb.per_step
        line = "no complete steps on " + ("both sides" if not len(ca) and not len(cb) else "one side")
        if busy_a:
            line += f"; GPU busy time {100 * (busy_b - busy_a) / busy_a:+.1f} %"
    else:
        noise = {
            True: "beyond noise",
            False: "within noise",
            None: f"fewer than {MIN_STEPS} steps: not judged",
        }
        line = f"step time {pct:+.1f} % ({noise[beyond]})" if pct is not None else "step time n/a"
        if top and explained is not None:
            shown = ", ".join(f"{_short(k.name)} ({_ms(k.delta_per_step_ns)})" for k in picked)
            line += f"; {explained:.0f} % of it from {len(top)} kernel{'s' if len(top) > 1 else ''}: {shown}"
        elif change == 0:
            line += "; no change"
    row = SummaryRow(
        len(ca),
        len(cb),
        ma,
        mb,
        change,
        round(pct, 3) if pct is not None else None,
        interval.lo_ns if interval else None,
        interval.hi_ns if interval else None,
        beyond,
        test,
        explained,
        top,
        line,
    )
    return row


def _short(name: str, width: int = 48) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:+.3f} ms/step"


def _step_stats(sa: _SideData, sb: _SideData, labels: tuple[str, str]) -> Table[StepStatsRow]:
    rows = [stats_row(label, side.complete) for label, side in zip(labels, (sa, sb), strict=True)]
    return Table(
        "Step time (complete steps of all ranks of each side)",
        StepStatsRow,
        tuple(r for r in rows if r is not None),
    )


def _step_bins(sa: _SideData, sb: _SideData) -> tuple[StepBinRow, ...]:
    bins = histogram_counts(sa.complete, sb.complete, HIST_BINS)
    return tuple(StepBinRow(h.lo_ns, h.hi_ns, na, nb) for h, na, nb in bins)


def _step_pairs(sa: _SideData, sb: _SideData) -> tuple[StepPairRow, ...]:
    (na, da), (nb, db) = slowest_per_step(sa.steps), slowest_per_step(sb.steps)
    both, longest = min(len(na), len(nb)), max(len(na), len(nb))
    pad: list[None] = [None] * longest  # the shorter side's missing steps

    def column(values: npt.NDArray[np.int64]) -> list[int | None]:
        found: list[int | None] = values.tolist()
        return found + pad[: longest - len(found)]

    delta = column(db[:both] - da[:both])
    # a row per step of the longer side (35k a side at 10M events): map, not a loop of tuples
    return tuple(map(StepPairRow, range(longest), column(na), column(da), column(nb), column(db), delta))


def _metric(
    name: str, unit: str, a: float | None, b: float | None, na: int = 1, nb: int = 1, per_step: bool = True
) -> MetricRow:
    delta = b - a if a is not None and b is not None else None
    if not per_step or a is None or b is None:
        return MetricRow(name, unit, a, b, delta, None, None, None)
    return MetricRow(name, unit, a, b, delta, a / na, b / nb, b / nb - a / na)


def _gpu_metrics(sa: _SideData, sb: _SideData) -> tuple[MetricRow, ...]:
    def total(side: _SideData, field: str) -> int:
        return sum(int(getattr(r, field)) for r in side.gpu.rows)

    na, nb = sa.per_step, sb.per_step
    out = [
        _metric(label, "ns", total(sa, f), total(sb, f), na, nb)
        for label, f in (
            ("span", "span_ns"),
            ("busy", "busy_ns"),
            ("idle", "idle_ns"),
            ("computation", "compute_ns"),
            ("communication", "communication_ns"),
            ("memory", "memory_ns"),
            ("non-compute", "non_compute_ns"),
            ("communication under computation", "comm_comp_overlap_ns"),
        )
    ]
    out += [_metric(f"idle: {c}", "ns", sa.idle.get(c, 0), sb.idle.get(c, 0), na, nb) for c in CAUSES]
    comm_a, comm_b = total(sa, "communication_ns"), total(sb, "communication_ns")
    ov_a = 100 * total(sa, "comm_comp_overlap_ns") / comm_a if comm_a else None
    ov_b = 100 * total(sb, "comm_comp_overlap_ns") / comm_b if comm_b else None
    out.append(_metric("overlap (% of communication hidden)", "%", ov_a, ov_b, per_step=False))
    return tuple(out)


def _memory(sa: _SideData, sb: _SideData) -> tuple[MetricRow, ...]:
    def peak(side: _SideData, reserved: bool) -> float | None:
        vals = [r.peak_reserved_bytes if reserved else r.peak_allocated_bytes for r in side.memory.rows]
        found = [v for v in vals if v is not None]
        return float(max(found)) if found else None

    return (
        _metric("peak allocated", "bytes", peak(sa, False), peak(sb, False), per_step=False),
        _metric("peak reserved", "bytes", peak(sa, True), peak(sb, True), per_step=False),
    )


@dataclass(slots=True)
class _Acc:
    names: list[str]
    launches: int = 0
    total: int = 0
    kind: str = ""


def _acc(rows: Iterable[tuple[str, int, int, str]]) -> _Acc:
    acc = _Acc([])
    for name, n, t, kind in rows:
        acc.names.append(name)
        acc.launches += n
        acc.total += t
        acc.kind = acc.kind or kind
    return acc


def _delta(name: str, match: str, a: _Acc | None, b: _Acc | None, na: int, nb: int) -> DeltaRow:
    la, lb = (a.launches if a else 0), (b.launches if b else 0)
    ta, tb = (a.total if a else 0), (b.total if b else 0)
    mean_a = ta / la if la else None
    mean_b = tb / lb if lb else None
    return DeltaRow(
        name,
        match,
        (a.kind if a else "") or (b.kind if b else ""),
        la,
        lb,
        ta,
        tb,
        mean_a,
        mean_b,
        lb - la,
        tb - ta,
        mean_b - mean_a if mean_a is not None and mean_b is not None else None,
        tb / nb - ta / na,
        None,
        " | ".join(a.names) if a else "",
        " | ".join(b.names) if b else "",
    )


def _match(
    a: dict[str, tuple[int, int, str]],
    b: dict[str, tuple[int, int, str]],
    na: int,
    nb: int,
    normalise: bool,
) -> list[DeltaRow]:
    out = [_delta(n, "name", _acc([(n, *a[n])]), _acc([(n, *b[n])]), na, nb) for n in a.keys() & b.keys()]
    left_a = {n: v for n, v in a.items() if n not in b}
    left_b = {n: v for n, v in b.items() if n not in a}
    if normalise:
        ga: dict[str, list[str]] = defaultdict(list)
        gb: dict[str, list[str]] = defaultdict(list)
        for n in sorted(left_a):
            ga[normalise_kernel(n)].append(n)
        for n in sorted(left_b):
            gb[normalise_kernel(n)].append(n)
        for key in ga.keys() & gb.keys():
            acc_a = _acc((n, *left_a.pop(n)) for n in ga[key])
            acc_b = _acc((n, *left_b.pop(n)) for n in gb[key])
            out.append(_delta(key, "normalised", acc_a, acc_b, na, nb))
    out += [_delta(n, "only A", _acc([(n, *v)]), None, na, nb) for n, v in left_a.items()]
    out += [_delta(n, "only B", None, _acc([(n, *v)]), na, nb) for n, v in left_b.items()]
    return out


def _match_kernels(sa: _SideData, sb: _SideData) -> list[DeltaRow]:
    a = {k.name: (k.launches, k.total_ns, k.kernel_type) for k in sa.kernels}
    b = {k.name: (k.launches, k.total_ns, k.kernel_type) for k in sb.kernels}
    return _match(a, b, sa.per_step, sb.per_step, normalise=True)


def _match_operators(sa: _SideData, sb: _SideData) -> list[DeltaRow]:
    a = {o.name: (o.calls, o.total_ns, "") for o in sa.operators}
    b = {o.name: (o.calls, o.total_ns, "") for o in sb.operators}
    return _match(a, b, sa.per_step, sb.per_step, normalise=False)


def _with_shares(found: list[DeltaRow], change: float | None) -> tuple[DeltaRow, ...]:
    """Largest contribution in the direction of the step-time change first (by size without one)."""
    sign = 1.0 if not change or change > 0 else -1.0
    ordered = sorted(
        found,
        key=lambda r: (-(sign * r.delta_per_step_ns) if change else -abs(r.delta_per_step_ns), r.name),
    )
    if not change:
        return tuple(ordered)
    from dataclasses import replace

    return tuple(replace(r, share_pct=round(100 * r.delta_per_step_ns / change, 3)) for r in ordered)


def _collectives(sa: _SideData, sb: _SideData) -> tuple[CollectiveDeltaRow, ...]:
    a = {c.collective: c for c in sa.collectives}
    b = {c.collective: c for c in sb.collectives}
    out = []
    for name in sorted(a.keys() | b.keys()):
        ca, cb = a.get(name), b.get(name)
        la, ta, wa = (ca.launches, ca.total_ns, ca.wait_ns) if ca else (0, 0, 0)
        lb, tb, wb = (cb.launches, cb.total_ns, cb.wait_ns) if cb else (0, 0, 0)
        out.append(
            CollectiveDeltaRow(
                name,
                la,
                lb,
                ta,
                tb,
                wa,
                wb,
                tb / sb.per_step - ta / sa.per_step,
                wb / sb.per_step - wa / sa.per_step,
            )
        )
    return tuple(sorted(out, key=lambda r: -abs(r.delta_per_step_ns)))
