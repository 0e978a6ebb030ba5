"""The precision rules: one table, each rule exercised by real kernel names (from the traces in
../shared/traces and from PyTorch/cuBLAS/CUTLASS naming), unknown names counted as 'other'."""

from __future__ import annotations

import duckdb
import pytest

from hyperscope.analysis.kernels import PRECISION_RULES, PRECISIONS, precision_case_sql

CASES = [
    ("sm90_xmma_gemm_e4m3e4m3_bf16f32_f32_tn_n_tilesize128x128x128", "FP8"),
    ("void cutlass::Kernel<cutlass_90_tensorop_fp8_s64x128gemm_e5m2_f32>", "FP8"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
    ("void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<signed char>>", "INT8"),
    ("volta_int8_i8816gemm_int8_256x128_ldg16_nn", "INT8"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "BF16"),
    (
        "void at::native::vectorized_elementwise_kernel<4, BinaryFunctor<c10::BFloat16, c10::BFloat16>>",
        "BF16",
    ),
    ("void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>", "BF16"),
    ("volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_tn", "FP16"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda, c10::Half>", "FP16"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16", "TF32"),
    ("void gemv2T_kernel_val<int, int, double, double, double, 128, 16, 4, 4, false>", "FP64"),
    ("volta_sgemm_128x32_nt", "FP32"),
    ("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1", "FP32"),
    (
        "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, func_wrapper_t<float>>>",
        "FP32",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, FillFunctor<int>, at::detail::Array<char*, 1> >",
        "INT32",
    ),
    ("void linearize_index_kernel<long>(at::GenericPackedTensorAccessor<long, 1ul>)", "INT32"),
    ("void cask_cudnn::computeOffsetsKernel<false, false>(cask_cudnn::ComputeOffsetsParams)", "other"),
    ("my_custom_fused_kernel", "other"),
]


def _classify(names: list[str]) -> list[str]:
    con = duckdb.connect()
    con.execute("CREATE TABLE k(name VARCHAR)")
    con.executemany("INSERT INTO k VALUES (?)", [[n] for n in names])
    return [str(r[0]) for r in con.sql(f"SELECT {precision_case_sql()} FROM k").fetchall()]


def test_cases_cover_every_rule() -> None:
    covered = {p for _, p in CASES}
    assert {r.precision for r in PRECISION_RULES} <= covered
    assert covered <= set(PRECISIONS)


@pytest.mark.parametrize(("name", "precision"), CASES)
def test_rule(name: str, precision: str) -> None:
    assert _classify([name]) == [precision]


def test_every_rule_is_reachable() -> None:
    """No rule is shadowed by an earlier one: each has a case that lands on it."""
    landed = set(_classify([n for n, _ in CASES]))
    assert {r.precision for r in PRECISION_RULES} <= landed
