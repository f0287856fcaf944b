"""Kernel tables whose work is known by construction, for the analysis and report tests."""

import math
import re

import pandas as pd

from ssmprof.analysis.launches.frame import analysis_frame
from ssmprof.schema import COUNTER_METRICS, RunInfo, check_info, conform_kernels

GEMM_FLOPS = 2.0 * 4096**3
NAN = math.nan
# The counter columns the recorded Nsight Compute fixtures (join-*, calibrate-*) were collected with: the
# pipe, occupancy and instruction-bound counters came later, and `read_report(columns=...)` reads only these from them.
RECORDED_COUNTER_COLUMNS = [c for c in COUNTER_METRICS if c not in
                            ("alu_pipe_pct", "xu_pipe_pct", "lsu_pipe_pct", "issue_active_pct",
                             "achieved_occupancy_pct", "warp_inst_executed", "inst_issue_pct", "shared_wavefronts",
                             "shared_pipe_pct", "shared_bytes")]


def unpadded(markdown: str) -> str:
    """Markdown with its tables' cell padding removed (tabulate pads each column to its widest cell)."""
    return re.sub(r" +\|", " |", re.sub(r"\| +", "| ", markdown))


def kernels(gemm_name: str = "nvjet_hsh_256x128"):
    """(name, phase, duration_ns, bf16 tensor ops, ffma, dram bytes, l2 hit %, ncu duration)."""
    rows = [
        (gemm_name, "forward", 200_000, GEMM_FLOPS, 0, 1e8, 60.0, 200_000),
        ("_chunk_scan_fwd_kernel", "forward", 100_000, 5e9, 5e8, 5e7, 80.0, 100_000),
        ("_chunk_scan_bwd_dx_kernel", "backward", 300_000, 1e3, 5e8, 4e8, 40.0, 300_000),
        ("vectorized_elementwise_kernel", "backward", 1_000_000, 0, 0, 2 * 2**30, 10.0, 1_000_000),
        ("_chunk_state_fwd_kernel", "forward", 50_000, NAN, NAN, NAN, NAN, NAN),  # no counters
    ]
    frame = pd.DataFrame({
        "launch_idx": range(len(rows)), "kernel_name": [r[0] for r in rows], "kernel_name_full": [r[0] for r in rows],
        "phase": [r[1] for r in rows], "launch_op": ["aten::mm", "", "", "aten::copy_", ""], "stream": 7,
        "grid_x": 1, "grid_y": 1, "grid_z": 1, "block_x": 128, "block_y": 1, "block_z": 1, "shared_mem_bytes": 0,
        "launch_shapes": "", "start_ns": range(len(rows)), "duration_ns": [r[2] for r in rows],
        "counter_status": ["measured"] * 4 + ["unmatched"], "counter_lender": [0, 1, 2, 3, -1],
        "tensor_ops_bf16": [r[3] for r in rows], "inst_ffma": [r[4] for r in rows],
        "dram_read_bytes": [r[5] / 2 for r in rows], "dram_write_bytes": [r[5] / 2 for r in rows],
        "l2_hit_rate_pct": [r[6] for r in rows], "ncu_duration_ns": [r[7] for r in rows],
    })
    for column in ("inst_fadd", "inst_fmul", "inst_hadd", "inst_hmul", "inst_hfma", "inst_dadd", "inst_dmul",
                   "inst_dfma", "tensor_ops_fp16", "tensor_ops_tf32", "tensor_ops_fp64", "tensor_ops_fp8"):
        frame[column] = [0.0 if not math.isnan(r[3]) else NAN for r in rows]
    return conform_kernels(frame)


def run_info(workload="mamba2-lm", gpu="NVIDIA H100 80GB HBM3", config=None, counter_fraction=1.0, launches=5):
    """A run.json with every key the contract requires."""
    return {
        "workload": {"name": workload, "preset": "small", "config": config or {"seq_len": 2048}},
        "gpu": {"name": gpu}, "versions": {}, "provenance": {"ssd": "triton-fused"},
        "harness": {"step_ms": 30.0, "throughput": 273284.0, "unit": "tokens"}, "collectors": {},
        "coverage": {"launches": launches, "phase_time_fraction": 1.0, "counter_time_fraction": counter_fraction},
    }


def typed_run_info(**changes) -> RunInfo:
    """`run_info()` with `changes` (whole sections) as the readers take it: a complete run's typed run.json."""
    return check_info({**run_info(), **changes, "schema_version": 2, "status": "complete"})


def analyzed(frame=None):
    """The known-work kernels (or `frame`) as the analyses take them: `analysis_frame`."""
    return analysis_frame(kernels() if frame is None else frame)
