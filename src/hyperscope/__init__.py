"""hyperscope: profile training on your own GPU machines and keep it alive on Slurm.

The public surface is what ``__all__`` lists; everything else may change without notice.
"""

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
