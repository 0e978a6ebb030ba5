"""Profiles with known answers: a deterministic generator whose busy, idle, overlap, step times,
latencies and bytes are known in closed form, at any size (1 thousand to 100 million events).

The events are written straight into a profile directory by DuckDB (``range`` and arithmetic), so
a 100M-event profile takes seconds, and the expected figures come from the construction, not from
running an analysis: a test comparing the two checks the analysis against arithmetic.

Per rank and step ``s`` (all times in ns, step start ``S``):

* ``K`` computation kernels on stream 7: ``[S + LEAD + i·(KD+GAP), … + KD)``;
* one NCCL kernel on stream 20 from the start of kernel ``K-2`` lasting ``2·(KD+GAP) + COMM_TAIL``:
  it hides behind exactly the last two compute kernels, so overlap = ``2·KD`` per step;
* a host-to-device copy (``MEMCPY_BYTES``) ``MEMCPY_GAP`` after the collective, then a memset;
* each device op launched by ``cudaLaunchKernel``/``cudaMemcpyAsync``/``cudaMemsetAsync``
  exactly ``LATENCY`` before it starts, inside a ``cpu_op``;
* ``ProfilerStep#s`` lasting ``STEP + (s mod 3)·STEP_EXTRA`` (so the histogram is known) and one
  ``forward`` annotation.

Options add the bad inputs the analyses must survive, each with its effect on the answers.
``memory=True`` (off by default: nothing else changes) adds the allocator's ``[memory]`` events that
``profile_memory`` records: per rank and step, one block per device op allocated during ``forward``
(``(i mod 5 + 1)`` MiB, at ``S + MEM_AT + i·MEM_EVERY``) on top of ``MEM_BASE`` and all freed, in
order, after the step's last device op, so the peak is ``MEM_BASE`` plus every block of a step.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import duckdb
import pyarrow as pa

from hyperscope.schema.events import EVENT_SCHEMA, SAMPLE_SCHEMA, SORT_KEY
from hyperscope.schema.layout import EVENTS_DIR, META_FILE, SAMPLES_DIR, ProfileMeta, RankMeta
from hyperscope.store.profile import Profile

T0: Final = 1_700_000_000_000_000_000
LEAD: Final = 10_000
KD: Final = 40_000
GAP: Final = 5_000
COMM_TAIL: Final = 20_000
MEMCPY_GAP: Final = 15_000
MEMCPY_DUR: Final = 30_000
MEMCPY_BYTES: Final = 4 << 20
MEMSET_GAP: Final = 1_000
MEMSET_DUR: Final = 2_000
MEMSET_BYTES: Final = 65_536
LATENCY: Final = 8_000
TAIL: Final = 60_000
STEP_EXTRA: Final = 7_000
FORWARD: Final = 100_000
GPU_UTIL_PCT: Final = 75.0
MEM_BASE: Final = 1 << 30  # weights and optimizer state, allocated before the profile starts
MEM_UNIT: Final = 1 << 20
MEM_RESERVE_EXTRA: Final = 64 << 20  # the caching allocator holds this above the peak throughout
MEM_AT: Final = 2_000
MEM_EVERY: Final = 500
MEM_FREE_EVERY: Final = 100
MEM_ADDR: Final = 0x7F00_0000_0000
MEM_ADDR_STRIDE: Final = 1 << 26
_PART_EVENTS: Final = 2_000_000
_ORDER: Final = ", ".join(SORT_KEY)
#: Kernel names cycled over the compute kernels, with the precision the rules must give them.
KERNELS: Final = (
    ("ampere_sgemm_128x64_tn", "FP32"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "BF16"),
    ("my_custom_fused_kernel", "other"),
)
COMM_NAME: Final = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"


@dataclass(frozen=True, slots=True)
class GroundTruthSpec:
    ranks: int = 2
    steps: int = 6
    kernels_per_step: int = 8  # K >= 3
    rank_skew_ns: int = 3_000
    nodes: int = 1
    samples: bool = False  # write gpu_util_pct / cpu_util_pct samples at GPU_UTIL_PCT
    overlapping_kernel: bool = False  # one extra kernel inside kernel 0 of rank 0 step 0, same stream
    open_step: bool = False  # rank 0 gets one more ProfilerStep without a duration
    gpu_less_rank: bool = False  # one more rank with host events and steps but no GPU events
    clock_jump: bool = False  # rank 0 step 0: a kernel that starts before its launch
    memory: bool = False  # allocator [memory] events: one block per device op, freed at the step's end

    def __post_init__(self) -> None:
        if self.kernels_per_step < 3 or self.ranks < 1 or self.steps < 0:
            raise ValueError("GroundTruthSpec: kernels_per_step >= 3, ranks >= 1, steps >= 0")

    @property
    def step_content_ns(self) -> int:
        """Offset of the end of the last device op from the step start."""
        k = self.kernels_per_step
        return LEAD + k * (KD + GAP) + COMM_TAIL + MEMCPY_GAP + MEMCPY_DUR + MEMSET_GAP + MEMSET_DUR

    @property
    def step_ns(self) -> int:
        return self.step_content_ns + TAIL

    def step_dur(self, s: int) -> int:
        return self.step_ns + (s % 3) * STEP_EXTRA

    def step_start(self, rank: int, s: int) -> int:
        extra = STEP_EXTRA * (3 * (s // 3) + (1 if s % 3 == 2 else 0))
        return T0 + rank * self.rank_skew_ns + s * self.step_ns + extra

    @property
    def events_per_rank_step(self) -> int:
        ops = self.kernels_per_step + 3
        return 3 * ops + 2 + (2 * ops if self.memory else 0)

    @property
    def events_per_rank(self) -> int:
        return self.steps * self.events_per_rank_step

    @property
    def peak_allocated_bytes(self) -> int | None:
        """With ``memory``: every rank's peak ``Total Allocated`` (all of a step's blocks alive)."""
        return MEM_BASE + _blocks_mib(self.kernels_per_step + 3) * MEM_UNIT if self.memory else None

    @property
    def peak_reserved_bytes(self) -> int | None:
        peak = self.peak_allocated_bytes
        return None if peak is None else peak + MEM_RESERVE_EXTRA


def _blocks_mib(n: int) -> int:
    """MiB of blocks ``0 .. n-1`` (block ``i`` is ``i mod 5 + 1`` MiB)."""
    return (n // 5) * 15 + (n % 5) * (n % 5 + 1) // 2


@dataclass(frozen=True, slots=True)
class Expected:
    """The answers, per GPU rank (all identical by construction, except where an option says)."""

    busy_ns: dict[int, int]
    compute_ns: dict[int, int]
    communication_ns: dict[int, int]
    memory_ns: dict[int, int]
    overlap_ns: dict[int, int]
    span_ns: dict[int, int]
    step_durs_ns: dict[int, list[int]]
    kernel_launches: dict[str, int]
    kernel_total_ns: dict[str, int]
    memcpy_bytes: int
    memset_bytes: int
    latency_ns: int
    negative_latencies: int
    events: int
    gpu_ranks: list[int] = field(default_factory=list)

    def idle_ns(self, rank: int) -> int:
        return self.span_ns[rank] - self.busy_ns[rank]


def expected(spec: GroundTruthSpec) -> Expected:
    k, n = spec.kernels_per_step, spec.steps
    ranks = list(range(spec.ranks)) if n else []
    per_step_busy = k * KD + (2 * (KD + GAP) + COMM_TAIL - 2 * KD) + MEMCPY_DUR + MEMSET_DUR
    busy = {r: n * per_step_busy for r in ranks}
    compute = {r: n * k * KD for r in ranks}
    launches: dict[str, int] = {}
    totals: dict[str, int] = {}
    for i in range(k):
        name = KERNELS[i % 3][0]
        launches[name] = launches.get(name, 0) + n * spec.ranks
        totals[name] = totals.get(name, 0) + n * spec.ranks * KD
    if n:
        launches[COMM_NAME] = n * spec.ranks
        totals[COMM_NAME] = n * spec.ranks * (2 * (KD + GAP) + COMM_TAIL)
    span = {
        r: spec.step_start(r, n - 1) + spec.step_content_ns - (spec.step_start(r, 0) + LEAD) for r in ranks
    }
    negative = 0
    events = spec.ranks * spec.events_per_rank
    if spec.overlapping_kernel and n:
        launches[KERNELS[0][0]] += 1
        totals[KERNELS[0][0]] += KD // 2
        events += 2
    if spec.clock_jump and n:
        busy[0] += 5_000
        compute[0] += 5_000
        launches[KERNELS[2][0]] += 1
        totals[KERNELS[2][0]] += 5_000
        negative = 1
        events += 2
    if spec.open_step and n:
        events += 1
    if spec.gpu_less_rank and n:
        events += n * 2
    return Expected(
        busy_ns=busy,
        compute_ns=compute,
        communication_ns={r: n * (2 * (KD + GAP) + COMM_TAIL) for r in ranks},
        memory_ns={r: n * (MEMCPY_DUR + MEMSET_DUR) for r in ranks},
        overlap_ns={r: n * 2 * KD for r in ranks},
        span_ns=span,
        step_durs_ns={
            r: [spec.step_dur(s) for s in range(n)] for r in range(spec.ranks + spec.gpu_less_rank)
        },
        kernel_launches=launches,
        kernel_total_ns=totals,
        memcpy_bytes=n * spec.ranks * MEMCPY_BYTES,
        memset_bytes=n * spec.ranks * MEMSET_BYTES,
        latency_ns=LATENCY,
        negative_latencies=negative,
        events=events,
        gpu_ranks=ranks,
    )


def _duck_type(t: pa.DataType) -> str:
    if pa.types.is_list(t):
        return "BIGINT[]"
    return {"int32": "INTEGER", "int64": "BIGINT", "string": "VARCHAR", "double": "DOUBLE"}[str(t)]


def _select(values: dict[str, str]) -> str:
    return ", ".join(
        f"CAST({values.get(f.name, 'NULL')} AS {_duck_type(f.type)}) AS {f.name}" for f in EVENT_SCHEMA
    )


def write_profile(path: Path, spec: GroundTruthSpec, *, threads: int | None = None) -> Profile:
    """Write the profile into ``path`` (a new directory) and open it."""
    path.mkdir(parents=True, exist_ok=False)
    (path / EVENTS_DIR).mkdir()
    k = spec.kernels_per_step
    s0 = spec.step_start(0, 0) - T0  # 0
    step_start = (
        f"({T0} + r * {spec.rank_skew_ns} + s * {spec.step_ns}"
        f" + {STEP_EXTRA} * (3 * (s // 3) + CASE WHEN s % 3 = 2 THEN 1 ELSE 0 END) + {s0})"
    )
    comm_start = f"{LEAD} + {(k - 2) * (KD + GAP)}"
    comm_dur = 2 * (KD + GAP) + COMM_TAIL
    mc = f"{LEAD + k * (KD + GAP) + COMM_TAIL + MEMCPY_GAP}"
    ms = f"{LEAD + k * (KD + GAP) + COMM_TAIL + MEMCPY_GAP + MEMCPY_DUR + MEMSET_GAP}"
    names = "['" + "', '".join(n for n, _ in KERNELS) + "']"
    node = f"'node-' || (r % {max(1, spec.nodes)})"
    ops = f"""
        SELECT r, s, i, {step_start} AS st,
               CASE WHEN i < {k} THEN 'kernel' WHEN i = {k} THEN 'kernel' WHEN i = {k + 1} THEN
                   'memcpy' ELSE 'memset' END AS kind,
               CASE WHEN i < {k} THEN {names}[i % 3 + 1] WHEN i = {k} THEN '{COMM_NAME}'
                    WHEN i = {k + 1} THEN 'Memcpy HtoD (Pinned -> Device)' ELSE 'Memset (Device)' END AS name,
               CASE WHEN i < {k} THEN {LEAD} + i * {KD + GAP} WHEN i = {k} THEN {comm_start}
                    WHEN i = {k + 1} THEN {mc} ELSE {ms} END AS off,
               CASE WHEN i < {k} THEN {KD} WHEN i = {k} THEN {comm_dur}
                    WHEN i = {k + 1} THEN {MEMCPY_DUR} ELSE {MEMSET_DUR} END AS dur,
               CASE WHEN i = {k} THEN 20 ELSE 7 END AS stream,
               CASE WHEN i = {k + 1} THEN {MEMCPY_BYTES} WHEN i = {k + 2} THEN {MEMSET_BYTES} END AS nbytes,
               CASE WHEN i = {k + 1} THEN 'cudaMemcpyAsync' WHEN i = {k + 2} THEN 'cudaMemsetAsync'
                    ELSE 'cudaLaunchKernel' END AS launch,
               1 + s * {k + 3} + i AS corr
        FROM range(@R0, least(@R1, {spec.ranks})) t1(r), range(@S0, @S1) t2(s), range({k + 3}) t3(i)"""
    dev = _select(
        {
            "rank": "r",
            "node": node,
            "pid": "r % 8",
            "tid": "stream",
            "kind": "kind",
            "cat": "CASE kind WHEN 'kernel' THEN 'kernel' WHEN 'memcpy' THEN 'gpu_memcpy' ELSE "
            "'gpu_memset' END",
            "ph": "'X'",
            "name": "name",
            "ts_ns": "st + off",
            "dur_ns": "dur",
            "correlation": "corr",
            "device": "r % 8",
            "stream": "stream",
            "bytes": "nbytes",
            "memcpy_kind": "CASE WHEN kind = 'memcpy' THEN 'HtoD' END",
        }
    )
    rt = _select(
        {
            "rank": "r",
            "node": node,
            "pid": "1000 + r",
            "tid": "1000 + r",
            "kind": "'runtime'",
            "cat": "'cuda_runtime'",
            "ph": "'X'",
            "name": "launch",
            "ts_ns": f"st + off - {LATENCY}",
            "dur_ns": "3000",
            "correlation": "corr",
        }
    )
    cpu = _select(
        {
            "rank": "r",
            "node": node,
            "pid": "1000 + r",
            "tid": "1000 + r",
            "kind": "'cpu_op'",
            "cat": "'cpu_op'",
            "ph": "'X'",
            "name": "'aten::op'",
            "ts_ns": f"st + off - {LATENCY} - 2000",
            "dur_ns": "6000",
        }
    )
    all_ranks = spec.ranks + (1 if spec.gpu_less_rank else 0)
    steps = f"SELECT r, s, {step_start} AS st FROM range(@R0, @R1) t1(r), range(@S0, @S1) t2(s)"
    step = _select(
        {
            "rank": "r",
            "node": node,
            "pid": "1000 + r",
            "tid": "1000 + r",
            "kind": "'step'",
            "cat": "'user_annotation'",
            "ph": "'X'",
            "name": "'ProfilerStep#' || s",
            "ts_ns": "st",
            "dur_ns": f"{spec.step_ns} + (s % 3) * {STEP_EXTRA}",
        }
    )
    ann = _select(
        {
            "rank": "r",
            "node": node,
            "pid": "1000 + r",
            "tid": "1000 + r",
            "kind": "'annotation'",
            "cat": "'user_annotation'",
            "ph": "'X'",
            "name": "'forward'",
            "ts_ns": "st + 1000",
            "dur_ns": f"{FORWARD} + (s % 2) * 10000",
        }
    )
    parts = [
        *(_memory_parts(spec, node) if spec.memory else []),
        f"SELECT {dev} FROM ops",
        f"SELECT {rt} FROM ops",
        f"SELECT {cpu} FROM ops",
        f"SELECT {step} FROM steps",
        f"SELECT {ann} FROM steps WHERE r < {spec.ranks}",
    ]
    if spec.gpu_less_rank:
        gl = _select(
            {
                "rank": "r",
                "node": node,
                "pid": "1000 + r",
                "tid": "1000 + r",
                "kind": "'cpu_op'",
                "cat": "'cpu_op'",
                "ph": "'X'",
                "name": "'aten::op'",
                "ts_ns": "st + 5000",
                "dur_ns": "20000",
            }
        )
        parts.append(f"SELECT {gl} FROM steps WHERE r = {spec.ranks}")
    extras: list[str] = []
    if spec.steps:
        first = spec.step_start(0, 0)
        if spec.overlapping_kernel:
            extras.append(
                _single(first + LEAD + KD // 4, KD // 2, "kernel", KERNELS[0][0], 7, 10**9, node="'node-0'")
            )
            extras.append(
                _single(
                    first + LEAD + KD // 4 - LATENCY,
                    3000,
                    "runtime",
                    "cudaLaunchKernel",
                    0,
                    10**9,
                    node="'node-0'",
                )
            )
        if spec.clock_jump:
            at = first + spec.step_content_ns + 20_000
            extras.append(_single(at, 5_000, "kernel", KERNELS[2][0], 7, 10**9 + 1, node="'node-0'"))
            extras.append(
                _single(at + 3_000, 3000, "runtime", "cudaLaunchKernel", 0, 10**9 + 1, node="'node-0'")
            )
        if spec.open_step:
            extras.append(
                "SELECT "
                + _select(
                    {
                        "rank": "0",
                        "node": "'node-0'",
                        "pid": "1000",
                        "tid": "1000",
                        "kind": "'step'",
                        "cat": "'user_annotation'",
                        "ph": "'X'",
                        "name": f"'ProfilerStep#{spec.steps}'",
                        "ts_ns": str(spec.step_start(0, spec.steps) + 1),
                    }
                )
            )
    # Parts of at most ~2M events, each sorted: DuckDB sorts each within its memory limit, and a
    # profile is a directory of parts anyway (a capture writes one per rank and flush).
    per_rank_step = spec.events_per_rank_step
    chunk = max(1, _PART_EVENTS // per_rank_step)
    if spec.ranks * spec.events_per_rank <= _PART_EVENTS:
        plan = [(0, all_ranks, 0, spec.steps)]
    else:
        plan = [
            (r, r + 1, s0, min(spec.steps, s0 + chunk))
            for r in range(all_ranks)
            for s0 in range(0, spec.steps, chunk)
        ]
    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        con.execute("SET preserve_insertion_order = false")
        con.execute("SET memory_limit = '1GB'")  # 100M events sort by spilling, not by RAM
        con.execute(f"SET temp_directory = '{path / '.tmp'}'")
        for n, (r0, r1, s0, s1) in enumerate(plan):
            union = " UNION ALL ".join(parts + (extras if n == 0 else []))
            sql = f"WITH ops AS ({ops}), steps AS ({steps}) SELECT * FROM ({union}) ORDER BY {_ORDER}"
            for name, value in (("@R0", r0), ("@R1", r1), ("@S0", s0), ("@S1", s1)):
                sql = sql.replace(name, str(value))
            target = path / EVENTS_DIR / f"part-{n:05d}.parquet"
            con.execute(
                f"COPY ({sql}) TO '{target}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 131072)"
            )
        count, lo, hi = con.execute(
            "SELECT count(*), min(ts_ns), max(ts_ns + coalesce(dur_ns, 0)) "
            f"FROM read_parquet('{path / EVENTS_DIR / '*.parquet'}')"
        ).fetchall()[0]
        if spec.samples and spec.steps:
            (path / SAMPLES_DIR).mkdir()
            cols = ", ".join(f.name for f in SAMPLE_SCHEMA)
            con.execute(
                f"""COPY (SELECT CAST(-1 AS INTEGER) AS rank, 'node-' || (n % {max(1, spec.nodes)}) AS node,
                             CAST(CASE WHEN m = 'gpu_util_pct' THEN 0 ELSE -1 END AS INTEGER) AS
                                 device, m AS metric,
                             {lo} + t * 10000 AS ts_ns, CAST({GPU_UTIL_PCT} AS DOUBLE) AS value
                      FROM range({max(1, spec.nodes)}) a(n), (VALUES ('gpu_util_pct'), ('cpu_util_pct')) b(m),
                           range(({hi} - {lo}) // 10000) c(t)) TO
                               '{path / SAMPLES_DIR / "part-00000.parquet"}'
                    (FORMAT parquet)"""
            )
            assert cols
    finally:
        con.close()
        shutil.rmtree(path / ".tmp", ignore_errors=True)
    ranks = [
        RankMeta(rank=r, node=f"node-{r % max(1, spec.nodes)}", clock="epoch_us") for r in range(all_ranks)
    ]
    meta = ProfileMeta(
        profile_id=path.name[:16],
        source="import",
        created_ns=time.time_ns(),
        ranks=ranks,
        events=int(count),
        ts_min_ns=lo,
        ts_max_ns=hi,
    )
    (path / META_FILE).write_text(meta.to_json())
    return Profile.open(path)


def _memory_parts(spec: GroundTruthSpec, node: str) -> list[str]:
    """The ``[memory]`` events over ``ops`` (one row per rank, step and device op ``i``)."""
    n = spec.kernels_per_step + 3
    size = f"((i % 5 + 1) * {MEM_UNIT})"

    def cum(j: str) -> str:  # MiB of blocks 0 .. j-1, as _blocks_mib
        return f"((({j}) // 5) * 15 + (({j}) % 5) * (({j}) % 5 + 1) // 2)"

    reserved = f"{MEM_BASE + _blocks_mib(n) * MEM_UNIT + MEM_RESERVE_EXTRA}"

    def event(ts: str, nbytes: str, total: str) -> str:
        return _select(
            {
                "rank": "r",
                "node": node,
                "pid": "1000 + r",
                "tid": "1000 + r",
                "kind": "'memory'",
                "cat": "'cpu_instant_event'",
                "ph": "'i'",
                "name": "'[memory]'",
                "ts_ns": ts,
                "addr": f"{MEM_ADDR} + i * {MEM_ADDR_STRIDE}",
                "alloc_bytes": nbytes,
                "total_allocated": total,
                "total_reserved": reserved,
                "device_type": "1",
                "device_id": "r % 8",
            }
        )

    alloc = event(f"st + {MEM_AT} + i * {MEM_EVERY}", size, f"{MEM_BASE} + {cum('i + 1')} * {MEM_UNIT}")
    free = event(
        f"st + {spec.step_content_ns + 1_000} + i * {MEM_FREE_EVERY}",
        f"-{size}",
        f"{MEM_BASE} + ({_blocks_mib(n)} - {cum('i + 1')}) * {MEM_UNIT}",
    )
    return [f"SELECT {alloc} FROM ops", f"SELECT {free} FROM ops"]


def _single(ts: int, dur: int, kind: str, name: str, stream: int, corr: int, *, node: str) -> str:
    device = kind != "runtime"
    return "SELECT " + _select(
        {
            "rank": "0",
            "node": node,
            "pid": "0" if device else "1000",
            "tid": str(stream) if device else "1000",
            "kind": f"'{kind}'",
            "cat": "'kernel'" if device else "'cuda_runtime'",
            "ph": "'X'",
            "name": f"'{name}'",
            "ts_ns": str(ts),
            "dur_ns": str(dur),
            "correlation": str(corr),
            "device": "0" if device else "NULL",
            "stream": str(stream) if device else "NULL",
        }
    )
