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


class _Writer:
    """Writes events one per line, as Kineto's separators, and keeps the ids that link them."""

    def __init__(self, fh: IO[bytes], pid: int, device: int) -> None:
        self.fh, self.pid, self.device = fh, pid, device
        self.count = 0
        self.correlation = 0

    def emit(self, event: dict[str, object]) -> None:
        self.fh.write((b",\n  " if self.count else b"  ") + orjson.dumps(event))
        self.count += 1

    def host(self, cat: str, name: str, ts: int, dur: int, args: dict[str, object]) -> None:
        self.emit(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self.pid,
                "tid": self.pid,
                "ts": _us(ts),
                "dur": _us(dur),
                "args": args,
            }
        )

    def launch(self, name: str, ts: int, dur: int, cbid: int, args: dict[str, object]) -> int:
        """A runtime call and the start of its ac2g flow; returns the correlation id."""
        self.correlation += 1
        corr = self.correlation
        self.host("cuda_runtime", name, ts, dur, {**args, "cbid": cbid, "correlation": corr})
        self.emit(
            {
                "ph": "s",
                "id": corr,
                "pid": self.pid,
                "tid": self.pid,
                "ts": _us(ts),
                "cat": "ac2g",
                "name": "ac2g",
            }
        )
        return corr

    def device_op(
        self, cat: str, name: str, stream: int, ts: int, dur: int, corr: int, args: dict[str, object]
    ) -> None:
        """A kernel, memcpy or memset on a stream, and the end of its launch's flow."""
        self.emit(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self.device,
                "tid": stream,
                "ts": _us(ts),
                "dur": _us(dur),
                "args": {**args, "device": self.device, "stream": stream, "correlation": corr},
            }
        )
        self.emit(
            {
                "ph": "f",
                "id": corr,
                "pid": self.device,
                "tid": stream,
                "ts": _us(ts),
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )


def _us(ns: int) -> orjson.Fragment:
    whole, frac = divmod(ns, 1000)
    return orjson.Fragment(f"{whole}.{frac:03d}".encode())


def _write(fh: IO[bytes], spec: SynthSpec, rank: int) -> int:
    rng = random.Random(spec.seed * 1_000_003 + rank)
    device = rank % 8
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
    w = _Writer(fh, 1000 + rank, device)
    w.correlation = 10_000 * (rank + 1)
    t = spec.start_us * 1000 + rank * 1_500_000 + rng.randrange(1_000_000)  # ns
    gpu_free = t
    for name, pid, args in (
        ("process_name", w.pid, {"name": "python"}),
        ("thread_name", w.pid, {"name": "thread 0 (python)"}),
        ("process_labels", device, {"labels": f"GPU {device}"}),
    ):
        w.emit(
            {
                "name": name,
                "ph": "M",
                "ts": _us(t),
                "pid": pid,
                "tid": 0 if pid == device else pid,
                "args": args,
            }
        )
    ext = 0
    for step in range(spec.steps):
        step_start = t
        t += 5_000
        for op in range(spec.ops_per_step):
            k = rng.randrange(len(_KERNELS))
            kname, kdur = _KERNELS[k]
            kdur = kdur // 10 + rng.randrange(kdur // 5 + 1)
            op_dur = 8_000 + rng.randrange(12_000)
            ext += 1
            w.host("cpu_op", _OPS[k], t, op_dur, {"External id": ext, "Ev Idx": op})
            launch = t + 2_000 + rng.randrange(1_000)
            corr = w.launch(
                "cudaLaunchKernel", launch, 3_000 + rng.randrange(4_000), 211, {"External id": ext}
            )
            start = max(gpu_free, launch + 4_000 + rng.randrange(20_000))
            w.device_op(
                "kernel",
                kname,
                7,
                start,
                kdur,
                corr,
                {
                    "External id": ext,
                    "registers per thread": 64,
                    "shared memory": 16384,
                    "grid": [132, 4, 1],
                    "block": [256, 1, 1],
                    "est. achieved occupancy %": 50,
                },
            )
            gpu_free = start + kdur
            t += op_dur + 1_000
        # gradients: an all-reduce on the NCCL stream, then the copy of the next batch and a memset
        corr = w.launch("cudaLaunchKernel", t, 6_000, 211, {})
        ar = max(gpu_free - 200_000, t + 10_000)
        ar_dur = 300_000 + rng.randrange(200_000)
        w.device_op(
            "kernel",
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
            20,
            ar,
            ar_dur,
            corr,
            {"grid": [2, 1, 1], "block": [512, 1, 1]},
        )
        corr = w.launch("cudaMemcpyAsync", t + 8_000, 5_000, 41, {})
        copy = max(ar + ar_dur, t + 20_000)
        w.device_op(
            "gpu_memcpy",
            "Memcpy HtoD (Pinned -> Device)",
            7,
            copy,
            180_000,
            corr,
            {"bytes": 4 << 20, "memory bandwidth (GB/s)": 23.3},
        )
        corr = w.launch("cudaMemsetAsync", t + 14_000, 4_000, 51, {})
        w.device_op(
            "gpu_memset",
            "Memset (Device)",
            7,
            copy + 190_000,
            2_000,
            corr,
            {"bytes": 65536, "memory bandwidth (GB/s)": 32.768},
        )
        gpu_free = copy + 192_000
        t = max(t + 30_000, gpu_free + 10_000)
        w.host("user_annotation", f"ProfilerStep#{step}", step_start, t - step_start, {"External id": 0})
    fh.write(b'\n  ],\n  "traceName": "synthetic",\n  "displayTimeUnit": "ms"\n}\n')
    return w.count
