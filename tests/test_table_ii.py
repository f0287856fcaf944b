"""Table II in the study's form and the tolerance at which each SSM kernel changes class, on the bundled H100
mamba2-lm run (the study's Table II: seeds/001, forward 1/2/2 and backward 1/2/6 kernels TensorOnly/VectorOnly/
Tensor+Vector, its backward row without the forward kernels recomputed in backward)."""

import pytest

from ssmprof import bundled
from ssmprof.analysis.limits.tensor_vector import (
    STUDY,
    class_thresholds,
    classify,
    table_ii,
    table_ii_beside_study,
    table_ii_causes,
)
from ssmprof.analysis.summaries.suite import dram_beside_study
from ssmprof.hardware import run_ceilings
from ssmprof.pipeline.loading import load_run


@pytest.fixture(scope="module")
def h100_mamba2():
    return classify(load_run(bundled.REFERENCE / "h100-sxm" / "mamba2-lm").kernels)


# row -> (kernels, TensorOnly, Tensor+Vector, VectorOnly) at today's 1 % tolerance, FLOP classes
H100_TABLE_II = {"forward": (5, "1 kernel, 6.25 %", "2 kernels, 81.87 %", "2 kernels, 11.88 %"),
                 "backward": (9, "2 kernels, 11.44 %", "5 kernels, 80.52 %", "2 kernels, 8.03 %"),
                 "recomputed in backward": (4, "1 kernel, 15.37 %", "1 kernel, 48.71 %", "2 kernels, 35.92 %")}


def test_table_ii_keeps_recomputed_kernels_apart(h100_mamba2):
    table = table_ii(h100_mamba2).set_index("row")
    found = {row: (r["kernels"], r["TensorOnly"], r["Tensor+Vector"], r["VectorOnly"]) for row, r in table.iterrows()}
    assert found == H100_TABLE_II
    assert (table["NoFLOPs"] == "0 kernels, 0.00 %").all()
    assert table.loc["backward", "share_of_phase"] + table.loc["recomputed in backward", "share_of_phase"] == \
        pytest.approx(1.0)
    assert table.loc["recomputed in backward", "share_of_phase"] == pytest.approx(0.1279, abs=1e-4)


@pytest.mark.parametrize(("kernel", "row", "changes_at_pct", "other_side"), [
    ("_bmm_chunk_bwd_kernel", "backward", 0.195, "Tensor+Vector"),
    ("_chunk_scan_bwd_dstates_kernel", "backward", 0.651, "Tensor+Vector"),
    ("_chunk_state_fwd_kernel", "forward", 1.090, "TensorOnly"),
    ("_chunk_scan_fwd_kernel", "forward", 2.245, "TensorOnly"),
    ("_chunk_scan_bwd_ddAcs_stable_kernel", "backward", 7.574, "TensorOnly"),
    ("_bmm_chunk_fwd_kernel", "forward", 0.0, ""),  # pure tensor: never changes
    ("_state_passing_bwd_kernel", "backward", 0.0, ""),
])
def test_each_kernel_changes_class_at_its_own_tolerance(h100_mamba2, kernel, row, changes_at_pct, other_side):
    table = class_thresholds(h100_mamba2).set_index(["kernel_name", "row"])
    assert len(table) == 18
    hit = table.loc[(kernel, row)]
    assert (round(hit["changes_at_pct"], 3), hit["class_other_side"]) == (changes_at_pct, other_side)


def test_the_studys_counts_follow_at_a_tolerance_between_two_kernels_thresholds(h100_mamba2):
    """Between _bmm_chunk_bwd's 0.19 % and _chunk_scan_bwd_dstates' 0.65 %, the counts are the study's: 1/2/2 and
    1/2/6 (dstates, 0.65 % of its FLOPs vector, turns Tensor+Vector)."""
    table = table_ii(h100_mamba2, tolerance=0.005).set_index("row")
    counts = table[["TensorOnly", "VectorOnly", "Tensor+Vector"]].apply(lambda c: c.str.split(" ").str[0].astype(int))
    assert counts.loc["forward"].tolist() == [1, 2, 2] and counts.loc["backward"].tolist() == [1, 2, 6]


def test_table_ii_sits_beside_the_studys_in_its_order(h100_mamba2):
    """The study's columns in its order (TensorOnly | VectorOnly | Tensor+Vector) and its numbers (seeds/001:
    forward 2.40 / 8.55 / 89.03 %, backward 1.26 / 6.86 / 91.87 %) on the row after ssmprof's."""
    table = table_ii_beside_study(h100_mamba2)
    assert list(table.columns) == ["row", "source", "kernels", "TensorOnly", "VectorOnly", "Tensor+Vector"]
    assert list(zip(table["row"], table["source"], strict=True)) == [
        ("forward", "ssmprof"), ("forward", STUDY), ("backward", "ssmprof"), ("backward", STUDY),
        ("recomputed in backward", "ssmprof")]
    study = table[table["source"] == STUDY].set_index("row")
    assert study.loc["forward", ["TensorOnly", "VectorOnly", "Tensor+Vector"]].tolist() == [
        "1 kernel, 2.40 %", "2 kernels, 8.55 %", "2 kernels, 89.03 %"]
    assert study.loc["backward", ["TensorOnly", "VectorOnly", "Tensor+Vector"]].tolist() == [
        "1 kernel, 1.26 %", "2 kernels, 6.86 %", "6 kernels, 91.87 %"]
    ours = table[table["source"] == "ssmprof"].set_index("row")
    assert ours.loc["forward", "TensorOnly"] == "1 kernel, 6.25 %"


def test_the_causes_of_the_difference_carry_their_numbers():
    run = load_run(bundled.REFERENCE / "h100-sxm" / "mamba2-lm")
    causes = table_ii_causes(classify(run.kernels), run.info.workload.config, run.info.versions)
    evidence = " | ".join(causes["evidence"])
    assert "_chunk_scan_bwd_dstates_kernel (backward): 99.35 % tensor FLOPs, TensorOnly at 1 %" in evidence
    assert "at 0.5 % the backward row counts 1 kernel / 2 kernels / 6 kernels" in evidence  # the study's counts
    assert "this run 8; mamba-ssm's default 1" in evidence and "mamba_ssm 2.3.2.post1, Triton 3.6.0" in evidence


def test_the_ssm_dram_use_sits_beside_the_studys_with_its_ceiling():
    """46.6 % time-weighted of Nsight Compute's peak and of the datasheet's 3350 GB/s, 47.7 % of the measured
    ceiling, 52.1 % unweighted over launches, beside the study's 57.5 % (of 3350 GB/s)."""
    run = load_run(bundled.REFERENCE / "h100-sxm" / "mamba2-lm")
    ceilings, _ = run_ceilings(run.info.gpu.name, run.path)
    table = dram_beside_study(run.kernels[run.kernels["category"] == "SSM scan"], ceilings)
    assert table["dram_pct"].round(1).tolist() == [46.6, 47.7, 46.6, 52.1, 57.5]
    assert table["ceiling_gb_s"].round().tolist()[1:] == [3275, 3350, 3350, 3350]
