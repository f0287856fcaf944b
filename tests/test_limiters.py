"""What limits a kernel: one scenario a row, then the bundled H100 mamba2-lm run."""

import math

import pandas as pd
import pytest

from ssmprof import bundled
from ssmprof.analysis.limiters import limiter_summary, limiters
from ssmprof.pipeline.loading import load_run

BASE = {"ncu_duration_ns": 400e3, "duration_ns": 400_000, "dram_throughput_pct": 30.0, "l2_throughput_pct": 30.0,
        "tensor_pipe_pct": 10.0, "fma_pipe_pct": 10.0, "waves_per_sm": 20.0, "block_x": 128, "block_y": 1,
        "block_z": 1, "occupancy_limit_registers": 8.0, "occupancy_limit_shared_mem": 8.0,
        "occupancy_limit_warps": 16.0, "occupancy_limit_blocks": 32.0, "registers_per_thread": 64.0}


@pytest.mark.parametrize(
    ("scenario", "changes", "limiter"),
    [
        ("nothing busy, enough blocks, half occupancy", {}, "latency (by elimination)"),
        ("a 6 us kernel", {"duration_ns": 6_000}, "launch overhead"),
        ("DRAM at 85 %", {"dram_throughput_pct": 85.0}, "DRAM bandwidth"),
        ("L2 busier than DRAM, both past 60 %", {"dram_throughput_pct": 61.0, "l2_throughput_pct": 70.0},
         "L2 bandwidth"),
        ("tensor pipe at 80 %", {"tensor_pipe_pct": 80.0}, "tensor pipe"),
        ("grid under one wave", {"waves_per_sm": 0.6}, "too few thread blocks"),
        ("246 registers: 2 blocks of 4 warps per SM", {"occupancy_limit_registers": 2.0}, "occupancy (registers)"),
        ("shared memory caps it", {"occupancy_limit_shared_mem": 1.0}, "occupancy (shared memory)"),
        ("no counters", {"ncu_duration_ns": math.nan}, "no counters"),
    ],
)
def test_limiter_rules(scenario, changes, limiter):
    frame = pd.DataFrame([{**BASE, **changes}])
    assert limiters(frame)["limiter"].iloc[0] == limiter, scenario


def test_theoretical_occupancy_from_the_launch_attributes():
    row = limiters(pd.DataFrame([{**BASE, "occupancy_limit_registers": 2.0}])).iloc[0]
    assert row["theoretical_occupancy_pct"] == pytest.approx(100 * 2 * 4 / 64)
    assert "occupancy 12 % theoretical, 64 registers" in row["evidence"]


def test_every_ssd_kernel_of_the_bundled_mamba2_run_has_a_limiter_with_evidence():
    run = load_run(bundled.REFERENCE / "h100-sxm" / "mamba2-lm")
    table = limiter_summary(limiters(run.kernels), category="SSM scan")
    assert len(table) == 18 and table["kernel_name"].nunique() == 14  # 14 kernels, some in both phases
    assert (table["limiter"] != "no counters").all() and table["evidence"].str.contains("busiest unit").all()
    top = table.set_index(["kernel_name", "phase"])["limiter"]
    assert top[("_chunk_scan_fwd_kernel", "forward")] == "occupancy (registers)"
    assert top[("_state_passing_bwd_kernel", "backward")] == "DRAM bandwidth"
