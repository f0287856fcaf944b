"""Self-checks of each launch's counters: table-driven, one scenario a row."""

import math

import pandas as pd
import pytest

from ssmprof.analysis.checks import Peaks, check_counters, gemm_flops
from ssmprof.schema import conform_kernels

H100 = Peaks(dram_bytes=3.35e12, bf16_flops=989.4e12, tf32_flops=494.7e12, fp32_flops=67e12)
MM = "[[8192,4096],[4096,16384]]"
MM_FLOPS = 2 * 8192 * 4096 * 16384


def launch(**values):
    """One launch with counters that pass every check unless a scenario changes them."""
    row = {"launch_idx": 0, "kernel_name": "k", "kernel_name_full": "k", "phase": "forward", "launch_op": "",
           "launch_shapes": "", "stream": 7, "grid_x": 1, "grid_y": 1, "grid_z": 1, "block_x": 128, "block_y": 1,
           "block_z": 1, "shared_mem_bytes": 0, "start_ns": 0, "duration_ns": 100_000, "counter_status": "measured",
           "counter_lender": 0, "ncu_duration_ns": 100_000.0, "dram_read_bytes": 1e8, "dram_write_bytes": 1e8,
           "l2_hit_rate_pct": 60.0, "l1_hit_rate_pct": 10.0, "l2_throughput_pct": 40.0, "inst_fadd": 0.0,
           "inst_fmul": 0.0, "inst_ffma": 1e6}
    row.update(values)
    return row


@pytest.mark.parametrize(
    ("scenario", "changes", "status"),
    [
        ("own counters, agreeing durations", {}, "measured"),
        ("lent within tolerance (1.4x)", {"counter_status": "lent", "duration_ns": 71_500}, "lent"),
        ("lent from another problem (a 360 us launch with a 4 ms GEMM's counters)",
         {"counter_status": "lent", "duration_ns": 360_000, "ncu_duration_ns": 4_154_080.0}, "rejected: duration"),
        ("tiny kernel: ncu's overhead under the 4 us floor", {"duration_ns": 1_400, "ncu_duration_ns": 3_000.0,
                                                        "dram_read_bytes": 1e3, "dram_write_bytes": 1e3},
         "measured"),
        ("tiny kernel beyond the floor and the ratio", {"duration_ns": 1_000, "ncu_duration_ns": 6_000.0},
         "rejected: duration"),
        ("DRAM bytes past the datasheet peak", {"dram_read_bytes": 3e8, "dram_write_bytes": 1e8},
         "rejected: rate above peak"),
        ("tensor FLOP/s past the peak", {"tensor_ops_bf16": 1e11}, "rejected: rate above peak"),
        ("L2 above 100 % of ncu's peak", {"l2_throughput_pct": 104.0}, "rejected: rate above peak"),
        ("hit rate a hair over 100 (clipped)", {"l2_hit_rate_pct": 100.2}, "measured"),
        ("hit rate of 101.3 %", {"l2_hit_rate_pct": 101.3}, "rejected: hit rate"),
        ("GEMM doing 2MNK", {"launch_op": "aten::mm", "launch_shapes": MM, "tensor_ops_bf16": float(MM_FLOPS),
                             "duration_ns": 4_000_000, "ncu_duration_ns": 4_000_000.0}, "measured"),
        ("GEMM with 12x its work", {"launch_op": "aten::mm", "launch_shapes": MM,
                                    "tensor_ops_bf16": 12.0 * MM_FLOPS, "duration_ns": 20_000_000,
                                    "ncu_duration_ns": 20_000_000.0}, "rejected: GEMM FLOPs"),
        ("no counters: nothing to check", {"counter_status": "unmatched", "ncu_duration_ns": math.nan,
                                                        "dram_read_bytes": math.nan}, "unmatched"),
    ],
)
def test_check_counters(scenario, changes, status):
    kernels = conform_kernels(pd.DataFrame([launch(**changes)]))
    checked, summary = check_counters(kernels, H100)
    assert checked["counter_status"].iloc[0] == status, scenario
    assert checked["dram_read_bytes"].isna().iloc[0] == (status not in ("measured", "lent")), scenario
    assert checked["l2_hit_rate_pct"].max() <= 100 or status != "measured"
    if status.startswith("rejected"):
        assert summary["rejected"][0]["check"] == status.removeprefix("rejected: ")


def test_summary_gives_time_shares_peaks_and_gemm_ratio_per_phase():
    rows = [launch(launch_idx=0, launch_op="aten::mm", launch_shapes=MM, tensor_ops_bf16=1.02 * MM_FLOPS,
                   duration_ns=4_000_000, ncu_duration_ns=4_000_000.0),
            launch(launch_idx=1, phase="backward", launch_op="aten::mm", launch_shapes=MM, counter_status="lent",
                   tensor_ops_bf16=1.02 * MM_FLOPS, duration_ns=4_000_000, ncu_duration_ns=4_000_000.0),
            launch(launch_idx=2, counter_status="lent", duration_ns=2_000_000)]  # lent across problems
    checked, summary = check_counters(conform_kernels(pd.DataFrame(rows)), H100)
    assert summary["gemm_flops"]["forward"]["ratio"] == pytest.approx(1.02)
    assert summary["gemm_flops"]["backward"]["launches"] == 1
    assert summary["status_time_fraction"]["rejected"] == pytest.approx(0.2)
    assert 0 < summary["max_fraction_of_peak"]["tensor"] < 1
    assert summary["status_launches"] == {"measured": 1, "lent": 1, "rejected: duration": 1}


@pytest.mark.parametrize(
    ("op", "shapes", "flops"),
    [
        ("aten::mm", "[[8,4],[4,16]]", 2 * 8 * 4 * 16),
        ("aten::addmm", "[[16],[8,4],[4,16],[],[]]", 2 * 8 * 4 * 16),
        ("aten::bmm", "[[3,8,4],[3,4,16]]", 2 * 3 * 8 * 4 * 16),
        ("aten::mm", "[[8,4],[5,16]]", math.nan),  # inner dimensions disagree
        ("aten::add", "[[8,4],[8,4]]", math.nan),
        ("aten::mm", "", math.nan),
    ],
)
def test_gemm_flops_from_recorded_shapes(op, shapes, flops):
    assert gemm_flops(op, shapes) == pytest.approx(flops, nan_ok=True)


def stalled(**values):
    """A launch with a warp-stall profile that passes: 4.0 warps per issue cycle, 3.0 + 0.6 + 0.4 by reason."""
    return launch(**{"stall_lender": 0.0, "stall_duration_ns": 100_000.0, "stall_warps_per_issue": 4.0,
                     "stall_long_scoreboard": 3.0, "stall_barrier": 0.6, "stall_selected": 0.4, **values})


@pytest.mark.parametrize(
    ("scenario", "changes", "kept", "check"),
    [
        ("reasons add up, durations agree", {}, True, None),
        ("reasons 8 % short of the total (a reason the chip lacks)", {"stall_barrier": 0.28}, True, None),
        ("reasons half the total", {"stall_long_scoreboard": 1.0}, False, "reasons do not add up"),
        ("stall pass measured another problem", {"stall_duration_ns": 400_000.0}, False, "duration"),
    ],
)
def test_stall_checks(scenario, changes, kept, check):
    checked, summary = check_counters(conform_kernels(pd.DataFrame([stalled(**changes)])), H100)
    assert checked["stall_long_scoreboard"].notna().iloc[0] == kept, scenario
    assert checked["counter_status"].iloc[0] == "measured", scenario  # the other counters stand on their own
    stalls = summary["stalls"]
    assert stalls["launches"] == 1 and stalls["time_fraction"] == (1.0 if kept else 0.0), scenario
    assert sum(stalls["rejected"].values()) == (0 if kept else 1) and (kept or stalls["rejected"][check] == 1)
