"""Every dashboard table in one call, on one connection: what ``hyperscope report`` prints and the
web server will serve. Each entry is an ordinary analysis; this module only picks the defaults.
"""

from __future__ import annotations

from typing import Any, Final

from hyperscope.analysis._common import ALL, Level, Scope, Source, Table, connection
from hyperscope.analysis._prepared import Prepared
from hyperscope.analysis.annotations import annotation_stats
from hyperscope.analysis.breakdown import gpu_time, kernel_type_segments
from hyperscope.analysis.cpu import cpu_time, cpu_utilization
from hyperscope.analysis.gpu import _bucket_ns, gpu_activity, gpu_utilization, memory_operations
from hyperscope.analysis.gpupass import gpu_pass
from hyperscope.analysis.idle import idle_breakdown
from hyperscope.analysis.kernels import kernel_precision, kernel_summary
from hyperscope.analysis.latency import latency_outliers, launch_latency, launch_latency_histogram
from hyperscope.analysis.ranks import rank_comparison
from hyperscope.analysis.steps import step_time_histogram, step_time_stats, step_times

#: The dashboard's defaults (the UI's and the stored dashboard's): kernels and annotations listed,
#: buckets of the utilization charts.
TOP_K: Final = 15
BUCKETS: Final = 50


def dashboard(
    source: Source, scope: Scope = ALL, *, top_k: int = TOP_K, buckets: int = BUCKETS
) -> dict[str, Table[Any]]:
    """All analyses for ``scope``, keyed by a stable name (the JSON keys of ``report --json``)."""
    with connection(source) as con:
        ctx = Prepared(con, scope, materialize=True)
        try:
            return _tables(ctx, top_k, buckets)
        finally:
            ctx.close()


def _tables(ctx: Prepared, top_k: int, buckets: int) -> dict[str, Table[Any]]:
    scope = ctx.scope
    if ctx.windows:  # one GPU pass, at the utilization chart's bucket width, for four tables
        span = max(w.hi_ns for w in ctx.windows) - min(w.lo_ns for w in ctx.windows)
        gpu_pass(ctx, width_ns=_bucket_ns(span, buckets, None))
    steps = step_times(ctx, scope)
    return {
        "gpu_time": gpu_time(ctx, scope, Level.RANK),
        "gpu_time_job": gpu_time(ctx, scope, Level.JOB),
        "kernel_types": kernel_type_segments(ctx, scope, Level.JOB),
        "idle": idle_breakdown(ctx, scope, Level.RANK),
        "kernels": kernel_summary(ctx, scope, top_k),
        "precision": kernel_precision(ctx, scope),
        "gpu_activity": gpu_activity(ctx, scope),
        "memory_ops": memory_operations(ctx, scope),
        "launch_latency": launch_latency(ctx, scope, Level.RANK),
        "latency_outliers": latency_outliers(ctx, scope, 5),
        "latency_histogram": launch_latency_histogram(ctx, scope, bins=20, log=True),
        "steps": step_time_stats(steps, level=Level.RANK),
        "steps_job": step_time_stats(steps, level=Level.JOB),
        "step_histogram": step_time_histogram(steps, bins=10),
        "annotations": annotation_stats(ctx, scope, top_k=top_k),
        "cpu_time": cpu_time(ctx, scope, Level.RANK),
        "gpu_utilization": gpu_utilization(ctx, scope, Level.RANK, buckets=buckets),
        "gpu_utilization_nodes": gpu_utilization(ctx, scope, Level.NODE, buckets=buckets),
        "cpu_utilization": cpu_utilization(ctx, scope, buckets=buckets),
        "ranks": rank_comparison(ctx, scope),
    }


def to_json(tables: dict[str, Table[Any]]) -> dict[str, Any]:
    """The dashboard as plain JSON: {name: {title, columns, rows, notes}}."""
    return {k: t.to_dict() for k, t in tables.items()}
