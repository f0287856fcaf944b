"""Roofline, tensor-vs-vector classification and cache summaries on kernels with known work."""

import math

import pytest
from known_work import GEMM_FLOPS, analyzed, kernels

from ssmprof.analysis.launches.frame import analysis_frame
from ssmprof.analysis.limits.caches import cache_summary
from ssmprof.analysis.limits.roofline import (
    calibration_defects,
    defects_by_kernel,
    defects_note,
    headroom,
    headroom_summary,
    roofline,
    roofline_summary,
)
from ssmprof.analysis.limits.tensor_vector import class_summary, classify, tensor_instruction
from ssmprof.hardware import SPECS, Ceilings

H100 = Ceilings.from_datasheet(SPECS["h100-sxm"])
# The known scan's compute roof from its own mix: 5e9 tensor FLOPs at 989.4 and 1e9 vector at 67 TFLOP/s
SCAN_MIX_PEAK = 6e9 / (5e9 / 989.4e12 + 1e9 / 67e12)


def with_l2_peak(frame, l2_bytes: float, l2_peak_gb_s: float):
    """`frame` with `l2_bytes` a launch and the L2 counter's % of peak that puts the slices' peak at
    `l2_peak_gb_s` (what Nsight Compute reports beside the bytes)."""
    seconds = frame["ncu_duration_ns"] / 1e9
    return frame.assign(l2_bytes=l2_bytes, l2_throughput_pct=100 * l2_bytes / seconds / (l2_peak_gb_s * 1e9))


def test_roofline_verdicts_and_rates():
    frame = roofline(analyzed(), H100).set_index("kernel_name")
    gemm = frame.loc["nvjet_hsh_256x128"]
    assert gemm["path"] == "tensor" and gemm["verdict"] == "compute-bound"
    assert gemm["ai_dram"] == pytest.approx(GEMM_FLOPS / 1e8)
    assert gemm["flop_per_s"] == pytest.approx(GEMM_FLOPS / 200e-6)
    assert gemm["pct_of_roof"] == pytest.approx(100 * GEMM_FLOPS / 200e-6 / 989.4e12)
    scan = frame.loc["_chunk_scan_fwd_kernel"]
    assert scan["ai_dram"] == pytest.approx((5e9 + 1e9) / 5e7)  # 120 FLOP/B: under the tensor path's 295 ridge,
    assert scan["path"] == "tensor" and scan["peak_flop_per_s"] == 989.4e12
    # but its own mix's roof (300 TFLOP/s) is under the DRAM roof at 120 FLOP/B (402 TFLOP/s)
    assert scan["mix_peak_flop_per_s"] == pytest.approx(SCAN_MIX_PEAK)
    assert scan["verdict"] == "compute-bound" and scan["roof_flop_per_s"] == pytest.approx(SCAN_MIX_PEAK)
    assert gemm["mix_peak_flop_per_s"] == pytest.approx(989.4e12)  # tensor only: the tensor peak
    copy = frame.loc["vectorized_elementwise_kernel"]
    assert copy["verdict"] == "memory-bound" and math.isnan(copy["pct_of_roof"])
    assert copy["pct_of_dram_peak"] == pytest.approx(100 * 2 * 2**30 / 1e-3 / 3.35e12)
    assert frame.loc["_chunk_state_fwd_kernel", "verdict"] == "no counters"
    assert set(frame["ceiling_source"]) == {"datasheet"}


def test_measured_ceilings_replace_the_datasheet():
    measured = Ceilings(3000.0, 9000.0, 800.0, 50.0, "measured by ssmprof calibrate")
    frame = roofline(analyzed(), measured).set_index("kernel_name")
    assert frame.loc["nvjet_hsh_256x128", "ridge_ai"] == pytest.approx(800e12 / 3000e9)
    assert set(frame["ceiling_source"]) == {"measured by ssmprof calibrate"}


def test_roofline_summary_is_time_weighted():
    summary = roofline_summary(roofline(analyzed(), H100)).set_index("category")
    ssm = summary.loc["SSM scan"]
    assert ssm["time_ms"] == pytest.approx(0.45)
    assert ssm["memory_bound_share"] == pytest.approx(0.3 / 0.45)  # the no-counter launch is neither
    assert ssm["compute_bound_share"] == pytest.approx(0.1 / 0.45)  # the scan, under its mix's roof
    assert summary.loc["GEMM", "compute_bound_share"] == 1.0


def test_tensor_vector_classes():
    classified = classify(analyzed()).set_index("kernel_name")["class"]
    assert classified["nvjet_hsh_256x128"] == "TensorOnly"
    assert classified["_chunk_scan_fwd_kernel"] == "Tensor+Vector"  # 5e9 tensor vs 1e9 vector FLOPs
    assert classified["_chunk_scan_bwd_dx_kernel"] == "VectorOnly"  # a thousand stray tensor ops don't count
    assert classified["vectorized_elementwise_kernel"] == "NoFLOPs"
    assert "_chunk_state_fwd_kernel" not in classified.index  # no counters, no class
    summary = class_summary(classify(analyzed())).set_index(["phase", "class"])
    assert summary.loc[("forward", "Tensor+Vector"), "kernels"] == 1
    assert summary.loc[("backward", "VectorOnly"), "time_share"] == 1.0


def test_cache_summary_weights_by_time():
    summary = cache_summary(analyzed()).set_index("category")
    # SSM scan: 80 % over 100 us and 40 % over 300 us (the no-counter launch is left out)
    assert summary.loc["SSM scan", "l2_hit_rate_pct"] == pytest.approx((80 * 100 + 40 * 300) / 400)
    assert summary.loc["memory", "l2_hit_rate_pct"] == 10.0


def test_a_launch_above_a_ceiling_is_a_calibration_defect_and_the_roof_stays():
    # the known GEMM does 2*4096^3 FLOPs in 200 us: 687 TFLOP/s, above a "measured" 600
    low = Ceilings(dram_gb_s=3000.0, l2_gb_s=None, bf16_tensor_tflops=600.0, fp32_tflops=50.0, source="measured")
    defects = calibration_defects(low, analyzed())
    assert defects[["kernel_name", "phase", "rate", "ceiling", "unit"]].values.tolist() == [
        ["nvjet_hsh_256x128", "forward", "tensor FLOP/s", 600.0, "TFLOP/s"]]
    assert defects.loc[0, "achieved"] == pytest.approx(GEMM_FLOPS / 200e-6 / 1e12)
    assert defects.loc[0, "pct_of_ceiling"] == pytest.approx(100 * GEMM_FLOPS / 200e-6 / 600e12)
    note = defects_note(defects_by_kernel(defects))
    assert note.startswith("calibration defect: 1 checked launches of 1 kernels run faster than a ceiling (measured)")
    assert "tensor FLOP/s 687 TFLOP/s by nvjet_hsh_256x128 (forward) against 600" in note
    gemm = roofline(analyzed(), low).set_index("kernel_name").loc["nvjet_hsh_256x128"]
    assert gemm["peak_flop_per_s"] == 600e12 and gemm["pct_of_roof"] > 100  # the roof is not raised
    assert calibration_defects(H100, analyzed()).empty  # the datasheet is above every launch
    assert defects_note(defects_by_kernel(calibration_defects(H100, analyzed()))) is None


@pytest.mark.parametrize(
    ("scenario", "l2_peak_gb_s", "l1_gb_s", "limiter", "gemm_limiter"),
    [
        ("no L2 counter: DRAM bounds the scan", None, None, "DRAM", "compute"),
        ("a slow L2 bounds both below DRAM and compute", 100.0, None, "L2", "L2"),
        ("a fast L2 leaves DRAM the bound", 1e6, None, "DRAM", "compute"),
        ("a slow L1 bounds both below L2, DRAM and compute", 1e6, 50.0, "L1", "L1"),
        ("a fast L1 leaves DRAM the bound", 1e6, 1e7, "DRAM", "compute"),
    ],
)
def test_hierarchical_roof_names_its_limiter(scenario, l2_peak_gb_s, l1_gb_s, limiter, gemm_limiter):
    """The L2 level's peak is the L2 counter's own (`l2_throughput_pct`); the scan does 30 FLOP per DRAM byte
    (a 100 TFLOP/s DRAM roof, under its mix's 300), 15 per L2 byte and 7.5 per L1 byte."""
    ceilings = Ceilings(3350.0, None, 989.4, 67.0, "test", l1_gb_s)
    traffic = kernels().assign(dram_read_bytes=1e8, dram_write_bytes=1e8, l1_bytes=8e8)
    traffic = with_l2_peak(traffic, 4e8, l2_peak_gb_s) if l2_peak_gb_s else traffic.assign(l2_bytes=4e8)
    frame = roofline(analysis_frame(traffic), ceilings).set_index("kernel_name")
    assert frame.loc["_chunk_scan_fwd_kernel", "roof_limiter"] == limiter, scenario
    assert frame.loc["nvjet_hsh_256x128", "roof_limiter"] == gemm_limiter
    assert frame.loc["_chunk_state_fwd_kernel", "roof_limiter"] == ""  # no counters


@pytest.mark.parametrize(
    ("scenario", "tensor", "vector", "phase", "name", "classes", "near", "recomputed"),
    [
        ("99.4 % of FLOPs on tensor cores, but 8 % of compute time on vector units", 994.0, 6.0, "forward",
         "_chunk_scan_fwd_kernel", ("Tensor+Vector", "TensorOnly"), True, False),
        ("a GEMM: tensor only either way", 1000.0, 0.0, "forward", "nvjet_x", ("TensorOnly", "TensorOnly"),
         False, False),
        ("a scan: vector only either way", 0.0, 1000.0, "forward", "selective_scan_fwd_kernel",
         ("VectorOnly", "VectorOnly"), False, False),
        ("the forward chain recomputed in backward", 800.0, 200.0, "backward", "_chunk_state_fwd_kernel",
         ("Tensor+Vector", "Tensor+Vector"), False, True),
    ],
)
def test_classes_on_compute_time_beside_flop_share(scenario, tensor, vector, phase, name, classes, near, recomputed):
    frame = analyzed().iloc[[1]].assign(kernel_name=name, phase=phase, flops_tensor=tensor, flops_vector=vector,
                                        flops=tensor + vector)
    row = classify(frame, H100).iloc[0]
    assert (row["class"], row["flop_class"]) == classes, scenario
    assert row["near_boundary"] == near and row["recomputed"] == recomputed, scenario
    if "compute time" in scenario:
        assert row["tensor_time_share"] == pytest.approx(994 / 989.4 / (994 / 989.4 + 6 / 67))


def test_backward_classes_also_without_the_recomputed_forward_kernels():
    frame = analyzed()
    recomputed = frame["kernel_name"].replace("_chunk_scan_bwd_dx_kernel", "_chunk_scan_fwd_kernel")
    frame = frame.assign(kernel_name=recomputed)
    summary = class_summary(classify(frame, H100))
    assert "backward without recomputed forward" in set(summary["phase"])


def test_headroom_is_the_time_above_the_roof_sorted_by_what_is_reachable():
    saved = headroom(roofline(analyzed(), H100), H100.dram_gb_s).set_index("kernel_name")
    scan = saved.loc["_chunk_scan_fwd_kernel"]  # 6e9 FLOPs under its mix's 300 TFLOP/s roof
    assert scan["roof_ms"] == pytest.approx(6e9 / SCAN_MIX_PEAK * 1e3)
    assert scan["saved_at_roof_ms"] == pytest.approx(0.1 - scan["roof_ms"])
    copy = saved.loc["vectorized_elementwise_kernel"]  # no FLOPs: 2 GiB at DRAM bandwidth
    assert copy["roof_ms"] == pytest.approx(2 * 2**30 / 3.35e12 * 1e3)
    assert math.isnan(saved.loc["_chunk_state_fwd_kernel", "roof_ms"])  # no counters, no roof
    summary = headroom_summary(headroom(roofline(analyzed(), H100), H100.dram_gb_s), by="category")
    assert summary["saved_reachable_ms"].is_monotonic_decreasing


def test_the_roofline_figure_draws_the_l2_level_where_the_l2_counter_was_collected():
    from ssmprof.reports.figures import roofline_scatter

    measured = Ceilings(3000.0, 7000.0, 800.0, 50.0, "measured")
    with_l2 = roofline_scatter(roofline(analysis_frame(with_l2_peak(kernels(), 2e8, 7000.0)), measured), "")
    names = [trace.name for trace in with_l2.data]
    assert "the same kernels at L2 intensity" in names and any(", L2 (measured)" in name for name in names)
    labels = [note.text for note in with_l2.layout.annotations]  # each ceiling's value on the chart itself
    assert {"L2 7.0 TB/s", "DRAM 3.0 TB/s", "tensor peak 800.0 TFLOP/s"} <= set(labels), labels
    without = roofline_scatter(roofline(analyzed(), H100), "")
    assert not any("L2" in str(trace.name) for trace in without.data)
    assert not any(note.text.startswith("L2") for note in without.layout.annotations)


@pytest.mark.parametrize(("scenario", "wgmma", "mma", "family"), [
    ("cuBLAS's persistent GEMM: all wgmma", 1000.0, 0.0, "wgmma"),
    ("a Triton SSD kernel compiled to mma.sync", 0.0, 1000.0, "mma.sync"),
    ("a kernel with both", 600.0, 400.0, "both"),
    ("no bf16 tensor work", 0.0, 0.0, ""),
    ("an A100: the split is not on the chip", math.nan, math.nan, ""),
])
def test_tensor_instruction_family(scenario, wgmma, mma, family):
    frame = analyzed().iloc[[1]].assign(tensor_ops_bf16_wgmma=wgmma, tensor_ops_bf16_mma=mma)
    assert tensor_instruction(frame).iloc[0] == family, scenario


def test_the_bundled_h100_mamba2_run_names_its_ssd_kernels_on_mma_sync():
    from ssmprof.bundled import REFERENCE
    from ssmprof.pipeline.reporting import analyze_runs

    (run,), _ = analyze_runs([REFERENCE / "h100-sxm" / "mamba2-lm"])
    families = run.summary.tensor_instructions.set_index(["category", "tensor_instruction"])
    assert set(families.loc[("SSM scan", "mma.sync"), "names"].split(", ")) == {
        "_chunk_scan_fwd_kernel", "_chunk_scan_chunk_state_bwd_dx_kernel", "_bmm_chunk_bwd_kernel"}
    assert families.loc[("GEMM", "wgmma"), "kernels"] == 7 and ("GEMM", "mma.sync") not in families.index
    finding = run.summary.findings.set_index("kind").loc["tensor instructions"]
    assert finding["value"] == "11 % mma.sync" and "_chunk_scan_fwd_kernel" in finding["finding"]
    assert "tiles of fewer than 64 rows (a wgmma's rows per warpgroup) for _bmm_chunk_bwd_kernel (32), " \
           "_chunk_scan_chunk_state_bwd_dx_kernel (32), _chunk_scan_fwd_kernel (32)." in finding["finding"]
