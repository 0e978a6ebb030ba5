"""A deterministic generator of Kineto traces shaped like torch.profiler's, for demos, tests and benchmarks.

Each rank's trace holds what a real data-parallel training step shows: ``ProfilerStep#N`` annotations,
CPU operators launching kernels through ``cudaLaunchKernel`` (linked by correlation ids and ``ac2g``
flows), host-to-device copies, memsets, and an NCCL all-reduce on a separate stream. The same
arguments always give the same bytes, so tests can assert exact counts and sizes.
"""

from __future__ import annotations

import gzip
import random
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

import orjson

_KERNELS: Final = (
    ("ampere_sgemm_128x64_tn", 180_000),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", 25_000),
    ("void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>", 140_000),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", 40_000),
    ("volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_tn", 160_000),
    ("void at::native::layer_norm_kernel<float>", 30_000),
)
_OPS: Final = ("aten::linear", "aten::gelu", "aten::matmul", "aten::sum", "aten::addmm", "aten::layer_norm")


@dataclass(frozen=True, slots=True)
class SynthSpec:
    ranks: int = 4
    steps: int = 6
    ops_per_step: int = 40
    seed: int = 0
    start_us: int = 1_700_000_000_000_000
    node: str = "node-0"


def write_rank(path: Path, spec: SynthSpec, rank: int) -> int:
    """Write one rank's trace (``.json`` or ``.json.gz``); returns the number of events."""
    if path.name.endswith(".gz"):
        with gzip.open(path, "wb", compresslevel=6) as gz:
            return _write(gz, spec, rank)  # type: ignore[arg-type]
    with path.open("wb") as fh:
        return _write(fh, spec, rank)


def write_job(out_dir: Path, spec: SynthSpec, *, compress: bool = False) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(spec.ranks):
        path = out_dir / f"rank{rank}.pt.trace.json{'.gz' if compress else ''}"
        write_rank(path, spec, rank)
        paths.append(path)
    return paths


def _write(fh: IO[bytes], spec: SynthSpec, rank: int) -> int:
    rng = random.Random(spec.seed * 1_000_003 + rank)
    pid, tid, device = 1000 + rank, 1000 + rank, rank % 8
    header = {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": d,
                "name": "NVIDIA H100 80GB HBM3",
                "totalGlobalMem": 85_045_870_592,
                "computeMajor": 9,
                "computeMinor": 0,
                "numSms": 132,
                "warpSize": 32,
            }
            for d in range(8)
        ],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": spec.ranks},
        "host_name": spec.node,
    }
    head = orjson.dumps(header, option=orjson.OPT_INDENT_2)
    fh.write(head[:-2] + b',\n  "traceEvents": [\n')
    count = 0
    corr = 10_000 * (rank + 1)
    ext = 0
    t = spec.start_us * 1000 + rank * 1_500_000 + rng.randrange(1_000_000)  # ns
    gpu_free = t
    first = True

    def emit(event: dict[str, object]) -> None:
        nonlocal count, first
        if not first:
            fh.write(b",\n")
        fh.write(b"  " + orjson.dumps(event))
        first = False
        count += 1

    def us(ns: int) -> orjson.Fragment:
        whole, frac = divmod(ns, 1000)
        return orjson.Fragment(f"{whole}.{frac:03d}".encode())

    for meta_name, args in (
        ("process_name", {"name": "python"}),
        ("thread_name", {"name": "thread 0 (python)"}),
    ):
        emit({"name": meta_name, "ph": "M", "ts": us(t), "pid": pid, "tid": tid, "args": args})
    emit(
        {
            "name": "process_labels",
            "ph": "M",
            "ts": us(t),
            "pid": device,
            "tid": 0,
            "args": {"labels": f"GPU {device}"},
        }
    )
    for step in range(spec.steps):
        step_start = t
        ops_start = count
        t += 5_000
        for _ in range(spec.ops_per_step):
            k = rng.randrange(len(_KERNELS))
            kname, kdur = _KERNELS[k]
            kdur = kdur // 10 + rng.randrange(kdur // 5 + 1)
            op_dur = 8_000 + rng.randrange(12_000)
            ext += 1
            corr += 1
            emit(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": _OPS[k],
                    "pid": pid,
                    "tid": tid,
                    "ts": us(t),
                    "dur": us(op_dur),
                    "args": {"External id": ext, "Ev Idx": count - ops_start},
                }
            )
            launch = t + 2_000 + rng.randrange(1_000)
            ldur = 3_000 + rng.randrange(4_000)
            emit(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": pid,
                    "tid": tid,
                    "ts": us(launch),
                    "dur": us(ldur),
                    "args": {"External id": ext, "cbid": 211, "correlation": corr},
                }
            )
            emit(
                {
                    "ph": "s",
                    "id": corr,
                    "pid": pid,
                    "tid": tid,
                    "ts": us(launch),
                    "cat": "ac2g",
                    "name": "ac2g",
                }
            )
            start = max(gpu_free, launch + 4_000 + rng.randrange(20_000))
            emit(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": kname,
                    "pid": device,
                    "tid": 7,
                    "ts": us(start),
                    "dur": us(kdur),
                    "args": {
                        "External id": ext,
                        "device": device,
                        "stream": 7,
                        "correlation": corr,
                        "registers per thread": 64,
                        "shared memory": 16384,
                        "grid": [132, 4, 1],
                        "block": [256, 1, 1],
                        "est. achieved occupancy %": 50,
                    },
                }
            )
            emit(
                {
                    "ph": "f",
                    "id": corr,
                    "pid": device,
                    "tid": 7,
                    "ts": us(start),
                    "cat": "ac2g",
                    "name": "ac2g",
                    "bp": "e",
                }
            )
            gpu_free = start + kdur
            t += op_dur + 1_000
        # gradients: an all-reduce on the NCCL stream, and a copy of the next batch
        corr += 1
        emit(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": pid,
                "tid": tid,
                "ts": us(t),
                "dur": us(6_000),
                "args": {"cbid": 211, "correlation": corr},
            }
        )
        ar = max(gpu_free - 200_000, t + 10_000)
        ar_dur = 300_000 + rng.randrange(200_000)
        emit(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
                "pid": device,
                "tid": 20,
                "ts": us(ar),
                "dur": us(ar_dur),
                "args": {
                    "device": device,
                    "stream": 20,
                    "correlation": corr,
                    "grid": [2, 1, 1],
                    "block": [512, 1, 1],
                },
            }
        )
        corr += 1
        nbytes = 4 << 20
        emit(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaMemcpyAsync",
                "pid": pid,
                "tid": tid,
                "ts": us(t + 8_000),
                "dur": us(5_000),
                "args": {"cbid": 41, "correlation": corr},
            }
        )
        cp = max(ar + ar_dur, t + 20_000)
        emit(
            {
                "ph": "X",
                "cat": "gpu_memcpy",
                "name": "Memcpy HtoD (Pinned -> Device)",
                "pid": device,
                "tid": 7,
                "ts": us(cp),
                "dur": us(180_000),
                "args": {
                    "device": device,
                    "stream": 7,
                    "correlation": corr,
                    "bytes": nbytes,
                    "memory bandwidth (GB/s)": 23.3,
                },
            }
        )
        corr += 1
        emit(
            {
                "ph": "X",
                "cat": "gpu_memset",
                "name": "Memset (Device)",
                "pid": device,
                "tid": 7,
                "ts": us(cp + 190_000),
                "dur": us(2_000),
                "args": {
                    "device": device,
                    "stream": 7,
                    "correlation": corr,
                    "bytes": 65536,
                    "memory bandwidth (GB/s)": 32.768,
                },
            }
        )
        gpu_free = cp + 192_000
        t = max(t + 30_000, gpu_free + 10_000)
        emit(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": pid,
                "tid": tid,
                "ts": us(step_start),
                "dur": us(t - step_start),
                "args": {"External id": 0},
            }
        )
    fh.write(b'\n  ],\n  "traceName": "synthetic",\n  "displayTimeUnit": "ms"\n}\n')
    return count
