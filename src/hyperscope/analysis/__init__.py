"""Analyses: pure functions from a profile (or a DuckDB connection over one) and a scope to typed
tables. The dashboard, ``hyperscope report`` and the web server all call these; HTA-compatible
variants live in :mod:`hyperscope.analysis.hta`.
"""

from hyperscope.analysis import hta
from hyperscope.analysis._common import ALL, Level, Scope, Source, Table, parse_steps
from hyperscope.analysis._prepared import Prepared
from hyperscope.analysis.annotations import AnnotationRow, annotation_histogram, annotation_stats
from hyperscope.analysis.breakdown import GpuTimeRow, TypeSegmentRow, gpu_time, kernel_type_segments
from hyperscope.analysis.collectives import CollectiveRow, collectives
from hyperscope.analysis.compare import (
    CollectiveDeltaRow,
    Comparison,
    DeltaRow,
    MetricRow,
    StepBinRow,
    StepPairRow,
    SummaryRow,
    compare,
)
from hyperscope.analysis.cpu import CpuTimeRow, CpuUtilizationRow, cpu_time, cpu_utilization
from hyperscope.analysis.dashboard import dashboard, to_json
from hyperscope.analysis.gpu import (
    ActivityRow,
    MemoryOpRow,
    UtilizationRow,
    gpu_activity,
    gpu_utilization,
    memory_operations,
)
from hyperscope.analysis.idle import IdleRow, idle_breakdown
from hyperscope.analysis.kernels import (
    PRECISION_RULES,
    KernelRow,
    PrecisionRow,
    kernel_precision,
    kernel_summary,
)
from hyperscope.analysis.latency import (
    LatencyOutlierRow,
    LatencyStatsRow,
    latency_outliers,
    launch_latency,
    launch_latency_histogram,
)
from hyperscope.analysis.memory import MemoryPeakRow, peak_memory
from hyperscope.analysis.operators import OperatorRow, cpu_operators
from hyperscope.analysis.ranks import RankRow, rank_comparison
from hyperscope.analysis.steps import (
    HistogramBin,
    StepRow,
    StepStatsRow,
    step_time_histogram,
    step_time_stats,
    step_times,
)

__all__ = [
    "ALL",
    "PRECISION_RULES",
    "ActivityRow",
    "AnnotationRow",
    "CollectiveDeltaRow",
    "CollectiveRow",
    "Comparison",
    "CpuTimeRow",
    "CpuUtilizationRow",
    "DeltaRow",
    "GpuTimeRow",
    "HistogramBin",
    "IdleRow",
    "KernelRow",
    "LatencyOutlierRow",
    "LatencyStatsRow",
    "Level",
    "MemoryOpRow",
    "MemoryPeakRow",
    "MetricRow",
    "OperatorRow",
    "PrecisionRow",
    "Prepared",
    "RankRow",
    "Scope",
    "Source",
    "StepBinRow",
    "StepPairRow",
    "StepRow",
    "StepStatsRow",
    "SummaryRow",
    "Table",
    "TypeSegmentRow",
    "UtilizationRow",
    "annotation_histogram",
    "annotation_stats",
    "collectives",
    "compare",
    "cpu_operators",
    "cpu_time",
    "cpu_utilization",
    "dashboard",
    "gpu_activity",
    "gpu_time",
    "gpu_utilization",
    "hta",
    "idle_breakdown",
    "kernel_precision",
    "kernel_summary",
    "kernel_type_segments",
    "latency_outliers",
    "launch_latency",
    "launch_latency_histogram",
    "memory_operations",
    "parse_steps",
    "peak_memory",
    "rank_comparison",
    "step_time_histogram",
    "step_time_stats",
    "step_times",
    "to_json",
]
