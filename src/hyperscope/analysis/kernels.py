"""GPU kernels: time and launch counts of all kernels and of the top k, and their numeric precision.

Precision is read from kernel names (and nothing else is guessed): the rules are the one table
``PRECISION_RULES`` below, tried in order, first match wins; a kernel no rule matches is "other".
The order matters because names mention several types: ``..._tf32f32_tf32f32_f32`` is a TF32 GEMM
with FP32 accumulation, ``bf16bf16_bf16f32`` a BF16 GEMM with FP32 accumulation, so the narrower
input type is tried first.

Communication kernels (NCCL/RCCL, the names ``_common.COMM_KERNEL_SQL`` calls communication) are
not a compute precision: ``ncclKernel_SendRecv_..._int8_t`` moves bytes, it does no INT8 math, and
an fp32 AllReduce is no FP32 work. They are their own slice, "communication", tried before every
rule, so a precision's share is the share of kernel time its compute kernels take.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from hyperscope.analysis._common import (
    ALL,
    TYPE_SQL,
    Scope,
    Source,
    Table,
    device_ops_sql,
    rows,
)
from hyperscope.analysis._prepared import Prepared, prepared
from hyperscope.errors import UsageError

PRECISIONS: Final = ("FP8", "INT8", "BF16", "FP16", "TF32", "FP32", "INT32", "FP64", "other", "communication")
#: the slice of communication kernels (not a precision), and the name pattern that makes one
COMMUNICATION: Final = "communication"
COMM_PATTERN: Final = "^(nccl|rccl)"


@dataclass(frozen=True, slots=True)
class PrecisionRule:
    precision: str
    pattern: str  # RE2, case-insensitive, searched anywhere in the kernel name
    why: str


#: Tried in order; first match wins. Tests cover every rule with real kernel names.
PRECISION_RULES: Final[tuple[PrecisionRule, ...]] = (
    PrecisionRule("FP8", r"fp8|e4m3|e5m2|f8f8|__nv_fp8", "FP8 GEMMs (Hopper/Blackwell, Transformer Engine)"),
    PrecisionRule(
        "INT8",
        r"int8|i8i8|s8s8|_imma|<signed char|<unsigned char",
        "integer tensor-core or byte kernels",
    ),
    PrecisionRule("BF16", r"bf16|bfloat16", "cuBLAS/CUTLASS bf16 names, c10::BFloat16 templates"),
    PrecisionRule("FP16", r"fp16|f16f16|half|h884|h1688|h16816|s884gemm_fp16|hgemm|__half", "half precision"),
    PrecisionRule("TF32", r"tf32", "TF32 tensor-core GEMMs and convolutions (FP32 storage)"),
    PrecisionRule("FP64", r"double|dgemm|fp64|f64", "double precision"),
    PrecisionRule("FP32", r"sgemm|scudnn|float|f32|fp32|sgemv", "single precision (CUDA cores)"),
    PrecisionRule(
        "INT32",
        r"<int>|<int,|\bint32|<long>|<long,|int64|<unsigned int",
        "integer index/fill kernels (32 or 64 bit)",
    ),
)


def precision_case_sql(column: str = "name") -> str:
    """A SQL CASE classifying ``column`` by ``PRECISION_RULES`` (first match wins, else 'other');
    communication kernels first, as 'communication'."""
    comm = f"WHEN regexp_matches({column}, '{COMM_PATTERN}', 'i') THEN '{COMMUNICATION}' "
    whens = comm + " ".join(
        f"WHEN regexp_matches({column}, '{r.pattern.replace(chr(39), chr(39) * 2)}', 'i') THEN "
        f"'{r.precision}'"
        for r in PRECISION_RULES
    )
    return f"CASE {whens} ELSE 'other' END"


@dataclass(frozen=True, slots=True)
class KernelRow:
    name: str
    kernel_type: str  # computation | communication
    launches: int
    total_ns: int
    mean_ns: float
    min_ns: int
    max_ns: int
    pct_of_kernel_time: float


@dataclass(frozen=True, slots=True)
class PrecisionRow:
    precision: str
    kernels: int  # distinct kernel names
    launches: int
    total_ns: int
    pct_of_kernel_time: float


def kernel_summary(source: Source | Prepared, scope: Scope = ALL, top_k: int = 15) -> Table[KernelRow]:
    """Top ``top_k`` kernels by total time, then one row "(all kernels)" with the totals.

    A kernel belongs to the scope when it overlaps the window; its full duration counts.
    """
    if top_k < 1:
        raise UsageError(f"top_k {top_k}: expected a positive number of kernels")
    with prepared(source, scope) as ctx:
        con, windows = ctx.con, ctx.windows
        found = rows(
            con,
            f"""WITH k AS (SELECT name, {TYPE_SQL} AS ktype, dur_ns FROM
                ({device_ops_sql(windows, ("kernel",))})),
                tot AS (SELECT sum(dur_ns) AS t FROM k)
                SELECT name, any_value(ktype), count(*), sum(dur_ns), avg(dur_ns), min(dur_ns), max(dur_ns),
                       sum(dur_ns) / (SELECT t FROM tot), count(*) OVER (), sum(sum(dur_ns)) OVER (),
                       sum(count(*)) OVER (), min(min(dur_ns)) OVER (), max(max(dur_ns)) OVER ()
                FROM k GROUP BY name ORDER BY sum(dur_ns) DESC, name LIMIT {int(top_k)}""",
        )
        notes = list(ctx.notes)
    out = [
        KernelRow(str(n), str(t), int(c), int(s), float(m), int(lo), int(hi), round(100 * float(p), 3))
        for n, t, c, s, m, lo, hi, p, *_ in found
    ]
    if found:
        distinct, total, launches = int(found[0][8]), int(found[0][9]), int(found[0][10])
        shortest, longest = int(found[0][11]), int(found[0][12])  # over every kernel, not the top k
        top_time = sum(r.total_ns for r in out)
        out.append(
            KernelRow(
                f"(all {distinct} kernels)", "", launches, total, total / launches, shortest, longest, 100.0
            )
        )
        notes.append(
            f"the top {len(out) - 1} of {distinct} kernels take {100 * top_time / total:.1f}% of kernel time "
            f"and {100 * sum(r.launches for r in out[:-1]) / launches:.1f}% of launches"
        )
    else:
        notes.append("no GPU kernels in scope")
    return Table(f"Top {top_k} GPU kernels by time", KernelRow, tuple(out), tuple(notes))


def kernel_precision(source: Source | Prepared, scope: Scope = ALL) -> Table[PrecisionRow]:
    """Kernel time by numeric precision, classified by ``PRECISION_RULES``."""
    with prepared(source, scope) as ctx:
        con, windows = ctx.con, ctx.windows
        found = rows(
            con,
            f"""WITH k AS (SELECT name, dur_ns FROM ({device_ops_sql(windows, ("kernel",))})),
                n AS (SELECT name, count(*) AS c, sum(dur_ns) AS t FROM k GROUP BY name),
                p AS (SELECT {precision_case_sql()} AS precision, c, t FROM n)
                SELECT precision, count(*), sum(c), sum(t), sum(t) / sum(sum(t)) OVER () FROM p
                    GROUP BY precision""",
        )
        notes = list(ctx.notes)
    by = {str(r[0]): r for r in found}
    out = tuple(
        PrecisionRow(p, int(by[p][1]), int(by[p][2]), int(by[p][3]), round(100 * float(by[p][4]), 3))
        for p in PRECISIONS
        if p in by
    )
    if "other" in by:
        n = int(by["other"][1])
        notes.append(
            f"{n} kernel name{'s' if n != 1 else ''} match{'' if n != 1 else 'es'} no precision rule "
            f"and {'are' if n != 1 else 'is'} counted as 'other'"
        )
    if COMMUNICATION in by:
        n = int(by[COMMUNICATION][1])
        notes.append(
            f"{n} communication kernel name{'s' if n != 1 else ''} (NCCL/RCCL) {'are' if n != 1 else 'is'} "
            "no compute precision: counted as 'communication', not by the data type in the name"
        )
    return Table("GPU kernel time by precision (from kernel names)", PrecisionRow, out, tuple(notes))
