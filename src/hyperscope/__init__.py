"""hyperscope: profile training on your own GPU machines and keep it alive on Slurm.

The public surface is what ``__all__`` lists; everything else may change without notice. Its names
are loaded on first use, so that ``python -m hyperscope.health`` (Slurm runs it on every node
before every job) does not pay for PyArrow and NumPy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hyperscope.capture.api import (
        annotate,
        annotation_begin,
        annotation_end,
        start_profiling,
        step,
        stop_profiling,
    )
    from hyperscope.capture.config import ProfilerConfig
    from hyperscope.errors import HyperscopeError, JobNotFound, StoreError, TraceFormatError, UsageError
    from hyperscope.store.catalog import Job, JobStatus
    from hyperscope.store.store import ImportReport, Store

__version__ = "0.1.0"

__all__ = [
    "HyperscopeError",
    "ImportReport",
    "Job",
    "JobNotFound",
    "JobStatus",
    "ProfilerConfig",
    "Store",
    "StoreError",
    "TraceFormatError",
    "UsageError",
    "__version__",
    "annotate",
    "annotation_begin",
    "annotation_end",
    "start_profiling",
    "step",
    "stop_profiling",
]

_WHERE = {
    **dict.fromkeys(
        ("annotate", "annotation_begin", "annotation_end", "start_profiling", "step", "stop_profiling"),
        "hyperscope.capture.api",
    ),
    "ProfilerConfig": "hyperscope.capture.config",
    **dict.fromkeys(
        ("HyperscopeError", "JobNotFound", "StoreError", "TraceFormatError", "UsageError"),
        "hyperscope.errors",
    ),
    "Job": "hyperscope.store.catalog",
    "JobStatus": "hyperscope.store.catalog",
    "ImportReport": "hyperscope.store.store",
    "Store": "hyperscope.store.store",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'hyperscope' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # once: later lookups are plain attribute reads (hs.step on the hot path)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
