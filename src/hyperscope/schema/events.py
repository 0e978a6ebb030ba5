"""The event contract: every layer (capture, import, analysis, server, UI) derives from these tables.

A profile stores one row per trace event. Typed columns hold what analyses query; the few fields that
have no column stay as JSON text in ``args`` (the source's ``args`` object, minus the keys that moved
to typed columns) or ``extra`` (top-level fields of the source event that have no column). Export
merges them back, so nothing the source held is lost.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

import pyarrow as pa

#: Bumped whenever a column is added, removed or changes meaning. Readers refuse newer versions.
SCHEMA_VERSION: Final = 1


class EventKind(enum.StrEnum):
    """What an event is, independent of the tool that recorded it."""

    CPU_OP = "cpu_op"
    PYTHON = "python"
    ANNOTATION = "annotation"
    GPU_ANNOTATION = "gpu_annotation"
    STEP = "step"
    RUNTIME = "runtime"
    DRIVER = "driver"
    KERNEL = "kernel"
    MEMCPY = "memcpy"
    MEMSET = "memset"
    SYNC = "sync"
    MEMORY = "memory"
    INSTANT = "instant"
    FLOW = "flow"
    COUNTER = "counter"
    METADATA = "metadata"
    TRACE = "trace"
    OTHER = "other"


#: Kineto/Chrome-trace category → kind. Phase and name rules in ``kind_sql`` take precedence.
#: Categories as Kineto has written them over the years, and for every device it knows:
#:
#: - today's names (``libkineto::toString(ActivityType)``): ``cpu_op``, ``kernel``, ``gpu_memcpy``,
#:   ``cuda_runtime``, ...; the accelerator-agnostic ``runtime``/``driver`` of the newest Kineto;
#: - PyTorch 1.8-1.10 (the TensorBoard plugin's samples): ``Operator``, ``Runtime``, ``Kernel``,
#:   ``Memcpy``, ``Memset``, ``Memory``, ``Python``, and ``gpu_user_Annotation`` as briefly spelt;
#: - accelerators other than CUDA/ROCm: MTIA (``mtia_ccp_events`` is its device-side work,
#:   ``mtia_runtime`` the host side), XPU (``xpu_runtime``, ``xpu_driver``, ``xpu_sync``),
#:   PrivateUse1 backends (``privateuse1_runtime``/``_driver``; their device ops are ``kernel``,
#:   ``gpu_memcpy``, ``gpu_memset`` as for CUDA), Gaudi (``hpu_op``, host side), Glow.
CATEGORY_KINDS: Final[dict[str, EventKind]] = {
    "cpu_op": EventKind.CPU_OP,
    "operator": EventKind.CPU_OP,
    "Operator": EventKind.CPU_OP,
    "python_function": EventKind.PYTHON,
    "Python": EventKind.PYTHON,
    "user_annotation": EventKind.ANNOTATION,
    "gpu_user_annotation": EventKind.GPU_ANNOTATION,
    "gpu_user_Annotation": EventKind.GPU_ANNOTATION,
    "cuda_runtime": EventKind.RUNTIME,
    "hip_runtime": EventKind.RUNTIME,
    "xpu_runtime": EventKind.RUNTIME,
    "mtia_runtime": EventKind.RUNTIME,
    "privateuse1_runtime": EventKind.RUNTIME,
    "glow_runtime": EventKind.RUNTIME,
    "hpu_op": EventKind.RUNTIME,
    "runtime": EventKind.RUNTIME,
    "Runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.DRIVER,
    "hip_driver": EventKind.DRIVER,
    "xpu_driver": EventKind.DRIVER,
    "privateuse1_driver": EventKind.DRIVER,
    "driver": EventKind.DRIVER,
    "kernel": EventKind.KERNEL,
    "Kernel": EventKind.KERNEL,
    "mtia_ccp_events": EventKind.KERNEL,
    "gpu_memcpy": EventKind.MEMCPY,
    "Memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET,
    "Memset": EventKind.MEMSET,
    "cuda_sync": EventKind.SYNC,
    "xpu_sync": EventKind.SYNC,
    "Memory": EventKind.MEMORY,
    "cpu_instant_event": EventKind.INSTANT,
    "ac2g": EventKind.FLOW,
    "fwdbwd": EventKind.FLOW,
    "Trace": EventKind.TRACE,
}


def categories_of(*kinds: EventKind) -> tuple[str, ...]:
    """The source categories read as one of ``kinds`` (for rules that test the category)."""
    return tuple(cat for cat, kind in CATEGORY_KINDS.items() if kind in kinds)


#: Kinds of device-side work: drawn on a device row, counted by the GPU report.
DEVICE_WORK_KINDS: Final = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)

#: What an unknown category that names device-side work looks like (RE2 and Python ``re`` alike,
#: matched case-insensitively): import warns when events of such a category are left ``other``.
DEVICE_CATEGORY_PATTERN: Final = (
    r"kernel|gpu|device|memcpy|memset|stream|ccp|mtia|xpu|npu|hpu|tpu|dma|cuda|hip|rocm|accel"
    r"|privateuse1"
)

#: Limits on what a trace's header may say, so that every value fits its column (``rank`` is int32;
#: ``ts_ns`` plus a rank's ``baseTimeNanoseconds`` int64). A file beyond them is refused, named.
MAX_RANK: Final = 2**31 - 1
MAX_NODE_CHARS: Final = 255  # a DNS name is at most 253 characters
MAX_NS: Final = 2**63 - 1

#: Phases of the Chrome trace event format. Anything else is rejected on import.
PHASES: Final = frozenset("BEXiICbneSTpFstfPOND MVvRc()".replace(" ", ""))

#: Phases that need no timestamp (metadata events may omit it).
PHASES_WITHOUT_TS: Final = frozenset("M")


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: pa.DataType
    doc: str


@dataclass(frozen=True, slots=True)
class ArgColumn:
    """A typed column filled from one key of the source event's ``args``.

    The mapping is one key to one column so that export can put the value back under its key.
    """

    key: str
    name: str
    type: pa.DataType
    doc: str


_I32 = pa.int32()
_I64 = pa.int64()
_F64 = pa.float64()
_STR = pa.string()

CORE_COLUMNS: Final[tuple[Column, ...]] = (
    Column("rank", _I32, "global rank of the process that recorded the event"),
    Column("node", _STR, "host name of that process ('' when the source does not say)"),
    Column("pid", _I64, "process id, or GPU index for device rows (null when not an integer)"),
    Column("tid", _I64, "thread id, or stream for device rows (null when not an integer)"),
    Column("kind", _STR, "EventKind value"),
    Column("cat", _STR, "category as written by the source (Kineto 'cat')"),
    Column("ph", _STR, "Chrome-trace phase: X complete, i instant, s/f flow, M metadata, ..."),
    Column("name", _STR, "event name"),
    Column("ts_ns", _I64, "start, absolute nanoseconds since the Unix epoch when the source allows"),
    Column("dur_ns", _I64, "duration in nanoseconds (null for events without one)"),
    Column("flow_id", _I64, "id of flow events (s/t/f); equals the correlation for ac2g flows"),
    Column("memcpy_kind", _STR, "HtoD, DtoH, DtoD, HtoH, PtoP for memcpy events, from the name"),
)

ARG_COLUMNS: Final[tuple[ArgColumn, ...]] = (
    ArgColumn("correlation", "correlation", _I64, "links a CPU-side launch to its device-side op"),
    ArgColumn("External id", "external_id", _I64, "links device ops to the CPU op that caused them"),
    ArgColumn("device", "device", _I64, "GPU index (null on host events)"),
    ArgColumn("stream", "stream", _I64, "GPU stream (null on host events)"),
    ArgColumn("context", "context", _I64, "CUDA context"),
    ArgColumn("bytes", "bytes", _I64, "bytes moved by a memcpy or set by a memset"),
    ArgColumn("memory bandwidth (GB/s)", "bandwidth_gbps", _F64, "achieved bandwidth"),
    ArgColumn("grid", "grid", pa.list_(_I64), "kernel grid dimensions"),
    ArgColumn("block", "block", pa.list_(_I64), "kernel block dimensions"),
    ArgColumn("registers per thread", "registers_per_thread", _I64, "kernel registers"),
    ArgColumn("shared memory", "shared_memory_bytes", _I64, "kernel shared memory"),
    ArgColumn("blocks per SM", "blocks_per_sm", _F64, "kernel blocks per SM"),
    ArgColumn("warps per SM", "warps_per_sm", _F64, "kernel warps per SM"),
    ArgColumn("est. achieved occupancy %", "occupancy_pct", _I64, "estimated occupancy"),
    ArgColumn("queued", "queued", _I64, "Kineto queued flag"),
    ArgColumn("cbid", "cbid", _I64, "CUPTI callback id of a runtime call"),
    ArgColumn("Ev Idx", "ev_idx", _I64, "Kineto event index"),
    ArgColumn("Sequence number", "sequence_number", _I64, "autograd sequence number"),
    ArgColumn("Fwd thread id", "fwd_thread_id", _I64, "autograd forward thread"),
    ArgColumn("Record function id", "record_function_id", _I64, "record_function id"),
    ArgColumn("Collective name", "collective", _STR, "collective of a c10d/NCCL op"),
    ArgColumn("dtype", "dtype", _STR, "element type of a collective"),
    ArgColumn("In msg nelems", "in_msg_nelems", _I64, "collective input elements"),
    ArgColumn("Out msg nelems", "out_msg_nelems", _I64, "collective output elements"),
    ArgColumn("Group size", "group_size", _I64, "collective process-group size"),
    ArgColumn("Addr", "addr", _I64, "address of a [memory] allocation event"),
    ArgColumn("Bytes", "alloc_bytes", _I64, "bytes allocated (>0) or freed (<0)"),
    ArgColumn("Total Allocated", "total_allocated", _I64, "allocator total after the event"),
    ArgColumn("Total Reserved", "total_reserved", _I64, "allocator reserved after the event"),
    ArgColumn("Device Type", "device_type", _I64, "memory event device type (0 CPU, 1 CUDA)"),
    ArgColumn("Device Id", "device_id", _I64, "memory event device index"),
    ArgColumn("Python id", "python_id", _I64, "python_function id"),
    ArgColumn("Python parent id", "python_parent_id", _I64, "python_function parent id"),
)

TAIL_COLUMNS: Final[tuple[Column, ...]] = (
    Column("args", _STR, "JSON object: the source args minus keys moved to typed columns"),
    Column("extra", _STR, "JSON object: top-level source fields that have no column"),
)

EVENT_SCHEMA: Final = pa.schema(
    [pa.field(c.name, c.type) for c in CORE_COLUMNS]
    + [pa.field(c.name, c.type) for c in ARG_COLUMNS]
    + [pa.field(c.name, c.type) for c in TAIL_COLUMNS]
)

SAMPLE_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", _I32),
        pa.field("node", _STR),
        pa.field("device", _I32),
        pa.field("metric", _STR),
        pa.field("ts_ns", _I64),
        pa.field("value", _F64),
    ]
)


class SampleMetric(enum.StrEnum):
    """Names in ``samples.metric``: what a sample measures, with its unit in the name.

    ``device`` is -1 for host-wide metrics, the GPU index for ``gpu_*``, and the CPU core for
    ``cpu_core_util_pct``. ``perf_*`` values are counts over one sampling interval of the
    profiled process (user space only where the kernel restricts more).
    """

    CPU_UTIL_PCT = "cpu_util_pct"  # whole host, 0-100
    CPU_CORE_UTIL_PCT = "cpu_core_util_pct"  # one core (device = core index), 0-100
    PROCESS_CPU_UTIL_PCT = "process_cpu_util_pct"  # profiled process, 100 = one core busy
    HOST_MEM_USED_BYTES = "host_mem_used_bytes"
    HOST_MEM_TOTAL_BYTES = "host_mem_total_bytes"
    PROCESS_RSS_BYTES = "process_rss_bytes"
    GPU_UTIL_PCT = "gpu_util_pct"  # NVML: time a kernel ran over the last sample period
    GPU_MEM_UTIL_PCT = "gpu_mem_util_pct"
    GPU_MEM_USED_BYTES = "gpu_mem_used_bytes"
    GPU_MEM_TOTAL_BYTES = "gpu_mem_total_bytes"
    GPU_POWER_W = "gpu_power_w"
    GPU_TEMP_C = "gpu_temp_c"
    GPU_SM_CLOCK_MHZ = "gpu_sm_clock_mhz"
    PERF_CYCLES = "perf_cycles"
    PERF_REF_CYCLES = "perf_ref_cycles"
    PERF_INSTRUCTIONS = "perf_instructions"
    PERF_CACHE_MISSES = "perf_cache_misses"
    PERF_BRANCH_MISSES = "perf_branch_misses"
    PERF_ITLB_MISSES = "perf_itlb_misses"
    PERF_DTLB_MISSES = "perf_dtlb_misses"


#: Columns written with delta encoding (monotone, or nearly, within a track once sorted).
DELTA_COLUMNS: Final = (
    "ts_ns",
    "ev_idx",
    "correlation",
    "external_id",
    "flow_id",
    "sequence_number",
    "record_function_id",
    "python_id",
    "python_parent_id",
    "total_allocated",
    "total_reserved",
)

#: What ``memcpy_kind`` is taken from, in a memcpy's name ("Memcpy HtoD (Pageable -> Device)").
MEMCPY_KINDS: Final = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "DtoA", "AtoD")

#: Sort order of the events table. A track is one kind of event on one thread or stream (as the
#: rows of a timeline: CUDA API calls, CPU ops, kernels, ...), time-sorted within it. Grouping by
#: kind makes consecutive rows alike, which is most of what makes the store small.
SORT_KEY: Final = ("rank", "pid", "tid", "kind", "ts_ns")

#: Columns whose row-group statistics are worth their footer bytes (pruning by rank, time, track).
STATS_COLUMNS: Final = ("rank", "pid", "tid", "kind", "ts_ns", "device", "stream", "correlation")
