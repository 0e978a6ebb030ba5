"""GPU time: busy vs idle, compute vs communication vs memory, their overlap, per GPU, node or job.

One sweep per GPU (see intervals.py) answers every question here. The span of a GPU is its scope
window when the caller gave steps or a time window (so idle time at the edges of a step counts),
else first device op start to last device op end, as HTA does. Our busy time is kernels, copies
and sets; a ``cuda_sync`` row is the GPU waiting, so it is idle time here (HTA counts it as busy).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from hyperscope.analysis._common import (
    ALL,
    TYPE_BITS,
    Level,
    Scope,
    Source,
    Table,
)
from hyperscope.analysis._prepared import Prepared, prepared
from hyperscope.analysis.gpupass import GpuSweep, gpu_pass

_COMP, _COMM, _MEM = TYPE_BITS["computation"], TYPE_BITS["communication"], TYPE_BITS["memory"]


@dataclass(frozen=True, slots=True)
class GpuTimeRow:
    """One GPU (level rank) or the sum over the GPUs of a node or the job.

    ``non_compute_ns`` = busy time without any computation kernel (communication and copies not
    hidden under compute), as HTA's non-compute time; ``overlap_pct`` is the share of communication
    time that computation hid (None without communication).
    """

    group: str
    device: int
    gpus: int
    span_ns: int
    busy_ns: int
    idle_ns: int
    compute_ns: int
    communication_ns: int
    memory_ns: int
    non_compute_ns: int
    comm_comp_overlap_ns: int
    idle_pct: float
    compute_pct: float
    non_compute_pct: float
    overlap_pct: float | None


@dataclass(frozen=True, slots=True)
class TypeSegmentRow:
    """Time during which exactly this set of kernel types ran (e.g. "computation + communication")."""

    group: str
    kernel_types: str
    duration_ns: int
    pct_of_busy: float


def sweep_gpus(ctx: Prepared) -> list[GpuSweep]:
    """Per (rank, GPU): time in each state; span = scope window if explicit, else op extent.

    From the GPU pass (gpupass.py), computed once per Prepared for every table that needs it.
    """
    return list(gpu_pass(ctx).sweeps)


def _group(sw: GpuSweep, level: Level) -> str:
    if level is Level.RANK:
        return str(sw.rank)
    return (sw.node or "?") if level is Level.NODE else "job"


#: one title per level: a report prints the per-rank and the whole-job table one above the other
_TITLES: dict[Level, str] = {
    Level.RANK: "GPU time per GPU",
    Level.NODE: "GPU time per node",
    Level.JOB: "GPU time, whole job",
}


def gpu_time(source: Source | Prepared, scope: Scope = ALL, level: Level = Level.RANK) -> Table[GpuTimeRow]:
    """GPU active vs idle and the temporal breakdown, per GPU (rank level), node or job."""
    with prepared(source, scope) as ctx:
        sweeps = sweep_gpus(ctx)
        notes = list(ctx.notes)
        windows = ctx.windows
    without = sorted({w.rank for w in windows} - {s.rank for s in sweeps})
    if without:
        many = len(without) > 1
        notes.append(
            f"rank{'s' if many else ''} {', '.join(map(str, without))} "
            f"{'have' if many else 'has'} no GPU events in scope"
        )
    groups: dict[tuple[str, int], list[GpuSweep]] = defaultdict(list)
    for sw in sweeps:
        groups[(_group(sw, level), sw.device if level is Level.RANK else -1)].append(sw)
    out = []
    for (group, device), members in groups.items():
        span = sum(m.span_ns for m in members)
        st: dict[int, int] = defaultdict(int)
        for m in members:
            for k, v in m.states.items():
                st[k] += v
        busy = sum(v for k, v in st.items() if k)
        compute = sum(v for k, v in st.items() if k & _COMP)
        comm = sum(v for k, v in st.items() if k & _COMM)
        mem = sum(v for k, v in st.items() if k & _MEM)
        both = sum(v for k, v in st.items() if k & _COMP and k & _COMM)
        idle = st[0]
        out.append(
            GpuTimeRow(
                group,
                device,
                len(members),
                span,
                busy,
                idle,
                compute,
                comm,
                mem,
                busy - compute,
                both,
                _pct(idle, span),
                _pct(compute, span),
                _pct(busy - compute, span),
                round(100 * both / comm, 3) if comm else None,
            )
        )
    return Table(_TITLES[level], GpuTimeRow, tuple(out), tuple(notes))


def kernel_type_segments(
    source: Source | Prepared, scope: Scope = ALL, level: Level = Level.JOB
) -> Table[TypeSegmentRow]:
    """Busy time split by which kernel types run together (HTA's ``kernel_type_df``, in ns)."""
    with prepared(source, scope) as ctx:
        sweeps = sweep_gpus(ctx)
        notes = ctx.notes
    acc: dict[tuple[str, int], int] = defaultdict(int)
    busy: dict[str, int] = defaultdict(int)
    for sw in sweeps:
        g = _group(sw, level)
        for state, dur in sw.states.items():
            if state:
                acc[(g, state)] += dur
                busy[g] += dur
    out = [
        TypeSegmentRow(g, _label(state), dur, _pct(dur, busy[g]))
        for (g, state), dur in sorted(acc.items(), key=lambda kv: (kv[0][0], -kv[1]))
    ]
    return Table("GPU busy time by kernel types running together", TypeSegmentRow, tuple(out), tuple(notes))


def _label(state: int) -> str:
    return " + ".join(name for name, bit in TYPE_BITS.items() if state & bit)


def _pct(part: int, whole: int) -> float:
    return round(100 * part / whole, 3) if whole else 0.0
