"""Ingest + analyze + report a 10,000-launch run on the CPU (goal: <= 10 s on 2 cores).

The run is built by repeating a mamba2-lm-like iteration's kernel mix (SSD chain, GEMMs, norms,
elementwise, optimizer) with counters on every launch, written and read through the real contract.

    python benchmarks/bench_report.py [--launches 10000]
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ssmprof import schema
from ssmprof.analysis.summary import analyze, warnings_for
from ssmprof.hardware import SPECS, Ceilings
from ssmprof.pipeline.loading import load_run
from ssmprof.reports.render import render_html, write_csv

MIX = [  # (name, launch_op, phase)
    ("_chunk_cumsum_fwd_kernel", "", "forward"), ("_bmm_chunk_fwd_kernel", "", "forward"),
    ("_chunk_state_fwd_kernel", "", "forward"), ("_state_passing_fwd_kernel", "", "forward"),
    ("_chunk_scan_fwd_kernel", "", "forward"), ("nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NNT", "aten::mm", "forward"),
    ("_layer_norm_fwd_1pass_kernel", "", "forward"), ("causal_conv1d_fwd_kernel", "", "forward"),
    ("_chunk_scan_chunk_state_bwd_dx_kernel", "", "backward"), ("_chunk_scan_bwd_dC_kernel", "", "backward"),
    ("nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NNT", "aten::mm", "backward"),
    ("vectorized_elementwise_kernel", "aten::mul", "backward"), ("_layer_norm_bwd_kernel", "", "backward"),
    ("multi_tensor_apply_kernel", "aten::_fused_adamw_", "optimizer"),
]


def synthetic_run(launches: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    picks = [MIX[i % len(MIX)] for i in range(launches)]
    frame = pd.DataFrame({
        "launch_idx": range(launches), "kernel_name": [p[0] for p in picks], "kernel_name_full": [p[0] for p in picks],
        "launch_op": [p[1] for p in picks], "phase": [p[2] for p in picks], "stream": 7,
        "grid_x": 128, "grid_y": 8, "grid_z": 1, "block_x": 256, "block_y": 1, "block_z": 1, "shared_mem_bytes": 0,
        "launch_shapes": "", "counter_status": "measured", "counter_lender": range(launches),
        "start_ns": np.arange(launches) * 10_000, "duration_ns": rng.integers(2_000, 300_000, launches),
    })
    for column in schema.COUNTER_COLUMNS:
        frame[column] = rng.uniform(0, 1e9, launches)
    for column in ("l1_hit_rate_pct", "l2_hit_rate_pct", "dram_throughput_pct"):
        frame[column] = rng.uniform(0, 100, launches)
    frame["ncu_duration_ns"] = frame["duration_ns"]
    return frame


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launches", type=int, default=10_000)
    args = parser.parse_args()
    info = {"workload": {"name": "mamba2-lm", "preset": "paper", "config": {}}, "gpu": {"name": "NVIDIA H100"},
            "versions": {}, "provenance": {}, "harness": {"step_ms": 215.6, "throughput": 38000.0, "unit": "tokens"},
            "collectors": {}, "coverage": {"launches": args.launches, "phase_time_fraction": 1.0,
                                           "counter_time_fraction": 1.0}}
    with tempfile.TemporaryDirectory() as folder:
        run_dir = schema.write_run(Path(folder) / "run", info, synthetic_run(args.launches))
        t0 = time.perf_counter()
        run = load_run(run_dir)  # read, categorized and derived once
        t1 = time.perf_counter()
        tables = analyze(run, Ceilings.from_datasheet(SPECS["h100-sxm"]))
        t2 = time.perf_counter()
        page = render_html([(run.info, tables, warnings_for(run))])
        write_csv(tables, Path(folder) / "csv", "")
        t3 = time.perf_counter()
    print(f"{args.launches} launches: ingest {t1 - t0:.2f} s, analyze {t2 - t1:.2f} s, "
          f"report {t3 - t2:.2f} s ({len(page) / 2**20:.1f} MiB HTML); total {t3 - t0:.2f} s "
          f"({'PASS' if t3 - t0 <= 10 else 'FAIL'}: goal <= 10 s)")


if __name__ == "__main__":
    main()
