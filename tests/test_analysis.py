"""Kernel categories and the time breakdown, table-driven."""

import math

import pandas as pd
import pytest

from ssmprof.analysis.launches.categories import CATEGORIES, categorize, category_is, phase_is, with_categories
from ssmprof.analysis.step.breakdown import breakdown, by_category, other_share_warning, top_kernels

# Every Triton kernel of mamba-ssm 2.3.2.post1's ops/triton (names as defined in its source).
MAMBA_SSM_TRITON = {
    "_bmm_chunk_bwd_kernel": "SSM scan", "_bmm_chunk_fwd_kernel": "SSM scan", "_chunk_cumsum_bwd_kernel": "SSM scan",
    "_chunk_cumsum_fwd_kernel": "SSM scan", "_chunk_scan_bwd_dc_kernel": "SSM scan",
    "_chunk_scan_bwd_dcb_kernel": "SSM scan", "_chunk_scan_bwd_dstates_kernel": "SSM scan",
    "_chunk_scan_bwd_dx_kernel": "SSM scan", "_chunk_scan_bwd_dz_kernel": "SSM scan",
    "_chunk_scan_chunk_state_bwd_dx_kernel": "SSM scan", "_chunk_scan_fwd_kernel": "SSM scan",
    "_chunk_state_bwd_db_kernel": "SSM scan", "_chunk_state_bwd_dx_kernel": "SSM scan",
    "_chunk_state_fwd_kernel": "SSM scan", "_chunk_state_varlen_kernel": "SSM scan",
    "_chunk_scan_bwd_ddAcs_stable_kernel": "SSM scan", "_chunk_state_bwd_ddAcs_stable_kernel": "SSM scan",
    "_chunk_scan_bwd_ddAcs_prev_kernel": "SSM scan", "_state_passing_bwd_kernel": "SSM scan",
    "_state_passing_fwd_kernel": "SSM scan", "_selective_scan_update_kernel": "SSM scan",
    "_layer_norm_bwd_kernel": "normalization", "_layer_norm_fwd_1pass_kernel": "normalization",
    "_swiglu_bwd_kernel": "elementwise/activation", "_swiglu_fwd_kernel": "elementwise/activation",
}
# CUDA kernels of causal-conv1d 1.7.0 and mamba-ssm's selective scan (their __global__ functions).
EXTENSIONS = {
    "causal_conv1d_fwd_kernel": "convolution", "causal_conv1d_bwd_kernel": "convolution",
    "causal_conv1d_channellast_fwd_kernel": "convolution", "causal_conv1d_update_kernel": "convolution",
    "selective_scan_fwd_kernel": "SSM scan", "selective_scan_bwd_kernel": "SSM scan",
}


@pytest.mark.parametrize(("name", "category"), sorted({**MAMBA_SSM_TRITON, **EXTENSIONS}.items()))
def test_fused_kernels_of_the_suite(name, category):
    assert categorize(name) == category


@pytest.mark.parametrize(
    ("name", "op", "category"),
    [
        ("nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NNT", "aten::mm", "GEMM"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "aten::addmm", "GEMM"),
        ("splitKreduce_kernel", "aten::mm", "GEMM"),
        ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", "aten::cudnn_convolution",
         "convolution"),
        ("conv_depthwise2d_forward_kernel", "aten::_conv_depthwise2d", "convolution"),
        ("flash_fwd_kernel", "aten::_flash_attention_forward", "attention"),
        ("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", "aten::_flash_attention_backward", "attention"),
        ("multi_tensor_apply_kernel", "aten::_fused_adamw_", "optimizer"),
        ("batch_norm_collect_statistics_kernel", "aten::native_batch_norm", "normalization"),
        ("cunn_SoftMaxForward", "aten::_log_softmax", "reduction/loss"),
        ("nll_loss_forward_reduce_cuda_kernel_2d", "aten::nll_loss_forward", "reduction/loss"),
        ("reduce_kernel", "aten::sum", "reduction/loss"),
        ("vectorized_elementwise_kernel", "aten::copy_", "memory"),
        ("vectorized_elementwise_kernel", "aten::fill_", "memory"),
        ("vectorized_elementwise_kernel", "aten::mul", "elementwise/activation"),
        ("vectorized_elementwise_kernel", "aten::gelu", "elementwise/activation"),
        ("CatArrayBatchedCopy", "aten::cat", "memory"),
        ("indexSelectLargeIndex", "aten::embedding", "memory"),
        ("indexSelectLargeIndex", "aten::index_select", "graph gather/scatter"),
        ("_scatter_gather_elementwise_kernel", "aten::scatter_add_", "graph gather/scatter"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "", "communication"),
        ("some_new_kernel", "", "other"),
    ],
)
def test_library_kernels(name, op, category):
    assert categorize(name, op) == category


# Short names that say nothing, from the H100 suite runs: the full (demangled) name decides.
@pytest.mark.parametrize(
    ("name", "full", "category"),
    [
        ("Kernel2", "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_32x3_tn_align2>"
                    "(cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_32x3_tn_align2::Params)", "GEMM"),
        ("Kernel", "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816dgrad_optimized_bf16_256x64_32x4_"
                   "nhwc_align8>(cutlass_tensorop_bf16_s16816dgrad_optimized_bf16_256x64_32x4_nhwc_align8::Params)",
         "convolution"),
        ("GammaBetaBackwardCUDAKernelTemplate", "void at::native::(anonymous namespace)::GammaBetaBackwardCUDA"
         "KernelTemplate<float, float, 32u, 32u, 256u, false, true, false>(long, long, float const*)", "normalization"),
        ("DeviceRadixSortOnesweepKernel", "void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweep"
         "Kernel<at_cuda_detail::cub::detail::radix::policy_hub<long>::Policy1000>()", "sort/scan"),
        ("tensor_kernel_scan_innermost_dim", "void at::native::tensor_kernel_scan_innermost_dim<float, "
         "std::plus<float> >(float*, float const*, unsigned int, unsigned int, unsigned int, float)", "sort/scan"),
        ("Kernel", "void mystery::Kernel<int>(int)", "other"),
    ],
)
def test_full_name_decides_for_wrapper_kernels(name, full, category):
    assert categorize(name, "", full) == category


def test_rules_only_name_known_categories():
    from ssmprof.analysis.launches.categories import RULES

    assert {category for category, _, _ in RULES} <= set(CATEGORIES)


def kernels():
    rows = [  # (name, op, phase, duration_ns)
        ("_chunk_scan_fwd_kernel", "", "forward", 121_000),
        ("nvjet_hsh_128x256", "aten::mm", "forward", 90_000),
        ("_chunk_scan_chunk_state_bwd_dx_kernel", "", "backward", 310_000),
        ("nvjet_hsh_128x256", "aten::mm", "backward", 180_000),
        ("multi_tensor_apply_kernel", "aten::_fused_adamw_", "optimizer", 60_000),
        ("mystery_kernel", "", "other", 39_000),
    ]
    # the breakdown's part of an analysis frame: the categories (these launches carry no counters)
    return with_categories(pd.DataFrame({"launch_idx": range(len(rows)), "kernel_name": [r[0] for r in rows],
                                         "launch_op": [r[1] for r in rows], "phase": [r[2] for r in rows],
                                         "duration_ns": [r[3] for r in rows]}))


def test_breakdown_by_category_and_phase():
    table = breakdown(kernels())
    assert table["share"].sum() == pytest.approx(1.0)
    row = table[(table["category"] == "SSM scan") & (table["phase"] == "backward")].iloc[0]
    assert row["time_ms"] == pytest.approx(0.31) and row["share"] == pytest.approx(0.31 / 0.8)
    totals = by_category(kernels()).set_index("category")["time_ms"]
    assert totals["GEMM"] == pytest.approx(0.27) and totals.index[0] == "SSM scan"


def test_filters_compose():
    frame = with_categories(kernels())
    backward_gemm = breakdown(frame, lambda k: phase_is("backward")(k) & category_is("GEMM")(k))
    assert backward_gemm["time_ms"].tolist() == pytest.approx([0.18]) and backward_gemm["share"].tolist() == [1.0]


def test_top_kernels_and_other_warning():
    top = top_kernels(kernels(), 2)
    assert top["kernel_name"].tolist() == ["_chunk_scan_chunk_state_bwd_dx_kernel", "nvjet_hsh_128x256"]
    assert other_share_warning(kernels()) is None  # 39 us of 800 us: under 5 %
    louder = kernels().assign(duration_ns=lambda k: k["duration_ns"].where(k["kernel_name"] != "mystery_kernel",
                                                                             200_000))
    assert "mystery_kernel" in other_share_warning(louder)


def test_time_weighted_mean_leaves_out_launches_without_a_value():
    from ssmprof.analysis.launches.frame import time_weighted, time_weighted_by

    values, weights = pd.Series([80.0, 40.0, float("nan")]), pd.Series([100, 300, 1000])
    assert time_weighted(values, weights) == pytest.approx((80 * 100 + 40 * 300) / 400)
    assert math.isnan(time_weighted(pd.Series([float("nan")]), pd.Series([5])))
    frame = pd.DataFrame({"k": ["a", "a", "a", "b"], "rate": [80.0, 40.0, float("nan"), float("nan")],
                          "duration_ns": [100, 300, 1000, 7]})
    table = time_weighted_by(frame, "k", ["rate"]).set_index("k")["rate"]
    assert table["a"] == pytest.approx(50.0) and math.isnan(table["b"])


def test_analysis_frame_is_categorized_and_derived_once():
    from known_work import kernels as known

    from ssmprof.analysis.launches.frame import analysis_frame

    frame = analysis_frame(known())
    assert {"category", "flops", "ai_dram", "flop_per_s", "dram_bytes_per_s"} <= set(frame.columns)
    assert frame.set_index("kernel_name").loc["_chunk_scan_fwd_kernel", "category"] == "SSM scan"


def test_reports_load_no_torch():
    """Analyses name fused kernels through `ssmprof.kernels`, which must import no torch for them."""
    import subprocess
    import sys

    code = "import sys, ssmprof.pipeline.reporting, ssmprof.pipeline.gate; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
