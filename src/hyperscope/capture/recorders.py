"""What records a capture beside hyperscope's own marks, chosen from its config: the framework's
profiler (PyTorch's Kineto, TensorFlow's or JAX's) and the system sampler.

Each is optional and each may be missing or fail to start on a given machine (no GPU, no perf
counters, a framework without a profiler): the capture then goes on without it and says why in its
notes, since the steps and annotations need neither.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from hyperscope.capture.config import ProfilerConfig
from hyperscope.capture.context import DistContext
from hyperscope.capture.writer import RankWriter

#: how a recorder that failed says so: once in the notes, once in the log
Note = Callable[[str], None]


def framework_profiler(config: ProfilerConfig, notes: list[str], note: Note) -> Any:
    """The profiler of the framework this process trains with, started window by window by the
    session (``start``/``stop``/``rows``); None when it has nothing to record here."""
    from hyperscope.capture.xla_backend import FRAMEWORKS, framework_in_use

    framework = framework_in_use()
    if framework in FRAMEWORKS:
        assert framework is not None
        return _xla_profiler(framework, config, notes, note)
    from hyperscope.capture.torch_backend import KinetoSession, wanted_activities

    activities = wanted_activities(cpu_ops=config.records_cpu_ops, device=config.device)
    if config.device and not activities.cuda:
        notes.append("no device activity: CUDA is not available to PyTorch here")
    if not activities.any:
        return None
    try:
        return KinetoSession(
            activities,
            record_shapes=config.record_shapes,
            memory=config.memory,
            python_stacks=config.python_stacks,
        )
    except Exception as exc:
        note(f"no PyTorch profiler activity: {exc}")
        return None


def _xla_profiler(framework: str, config: ProfilerConfig, notes: list[str], note: Note) -> Any:
    """TensorFlow's or JAX's own profiler, for what PyTorch's records in a PyTorch run."""
    from hyperscope.capture.xla_backend import XlaSession, has_gpu

    gpu = config.device and has_gpu(framework)
    if config.device and not gpu:
        notes.append(f"no device activity: {framework} sees no GPU here")
    if not (gpu or config.records_cpu_ops):
        return None
    try:
        return XlaSession(
            framework, cpu_ops=config.records_cpu_ops, device=gpu, python_stacks=config.python_stacks
        )
    except Exception as exc:
        note(f"no {framework} profiler activity: {exc}")
        return None


def system_sampler(config: ProfilerConfig, ctx: DistContext, writer: RankWriter, note: Note) -> Any:
    """The system sampler, started, its tables handed to the writer; None when sampling is off or
    it cannot start here."""
    if config.sample_interval_s == 0:
        return None
    from hyperscope.capture.sampler import SystemSampler

    def sink(table: pa.Table) -> None:
        writer.submit(lambda: ("samples", table))

    kwargs: dict[str, Any] = {}
    if not config.perf_counters:
        kwargs["perf_events"] = ()
    try:
        sampler = SystemSampler(
            interval_s=config.sample_interval_s,
            rank=ctx.rank,
            node=ctx.node,
            sink=sink,
            gpus=ctx.local_rank == 0,  # one rank per node samples the node's GPUs
            **kwargs,
        )
        sampler.start()
        return sampler
    except Exception as exc:
        note(f"no system samples: {exc}")
        return None


def device_properties() -> list[dict[str, Any]]:
    """The GPUs this process sees, as Kineto describes them in its traces' ``deviceProperties``."""
    if "torch" not in sys.modules:  # a TensorFlow or JAX run: never import torch for this
        return []
    try:
        import torch

        if not torch.cuda.is_available():
            return []
        out = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out.append(
                {
                    "id": i,
                    "name": p.name,
                    "totalGlobalMem": p.total_memory,
                    "computeMajor": p.major,
                    "computeMinor": p.minor,
                    "numSms": p.multi_processor_count,
                }
            )
        return out
    except Exception:
        return []
