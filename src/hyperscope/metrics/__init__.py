"""Prometheus metrics of the fleet (``hyperscope metrics``): nodes, jobs, goodput, the agent's
actions and this host's GPUs."""

from hyperscope.metrics.exporter import DEFAULT_PORT, Exporter, serve
from hyperscope.metrics.families import GpuStat, cluster_families, gpu_families, step_times

__all__ = ["DEFAULT_PORT", "Exporter", "GpuStat", "cluster_families", "gpu_families", "serve", "step_times"]
