"""Ingest + analyze + report a run of many launches on the CPU. Goal (issue #34): 1,000,000 launches within
30 s and 2 GB peak memory on 2 cores, with an HTML report under 5 MB; exit 1 when a limit is passed.

The run is built by repeating a mamba2-lm-like iteration's kernel mix (SSD chain, GEMMs, norms,
elementwise, optimizer) with counters on every launch, written and read through the real contract.
Each stage reports its wall time and the CPU time of this process (user + system): on a machine whose cores
other work shares, the CPU time says what the stage costs, the wall time what it took there. Peak memory is
the process's maximum resident set size.

    python benchmarks/bench_report.py [--launches 10000]
"""

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ssmprof import schema
from ssmprof.analysis.summaries.run import analyze, warnings_for
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


LIMITS = {"total_s": 30.0, "peak_rss_gb": 2.0, "html_mib": 5.0}


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launches", type=int, default=10_000)
    args = parser.parse_args()
    info = {"workload": {"name": "mamba2-lm", "preset": "paper", "config": {}}, "gpu": {"name": "NVIDIA H100"},
            "versions": {}, "provenance": {}, "harness": {"step_ms": 215.6, "throughput": 38000.0, "unit": "tokens"},
            "collectors": {}, "coverage": {"launches": args.launches, "phase_time_fraction": 1.0,
                                           "counter_time_fraction": 1.0}}
    with tempfile.TemporaryDirectory() as folder:
        run_dir = schema.write_run(Path(folder) / "run", schema.new_run_info(info), synthetic_run(args.launches))
        marks = [_clock()]
        run = load_run(run_dir)  # read, categorized and derived once
        marks.append(_clock())
        summary = analyze(run, Ceilings.from_datasheet(SPECS["h100-sxm"]))
        marks.append(_clock())
        page = render_html([(run.info, summary, warnings_for(run, summary))])
        write_csv(summary.frames(), Path(folder) / "csv", "")
        marks.append(_clock())
    stages = {name: (marks[i + 1][0] - marks[i][0], marks[i + 1][1] - marks[i][1])
              for i, name in enumerate(("ingest", "analyze", "report"))}
    total = (marks[-1][0] - marks[0][0], marks[-1][1] - marks[0][1])
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux
    html_mib = len(page) / 2**20
    measured = {"total_s": total[0], "peak_rss_gb": rss_gb, "html_mib": html_mib}
    over = [f"{name} {measured[name]:.2f} > {limit:g}" for name, limit in LIMITS.items() if measured[name] > limit]
    print(f"{args.launches} launches: " + ", ".join(f"{name} {wall:.2f} s ({cpu:.2f} s CPU)"
                                                   for name, (wall, cpu) in stages.items())
          + f"; total {total[0]:.2f} s ({total[1]:.2f} s CPU); peak RSS {rss_gb:.2f} GB; HTML {html_mib:.1f} MiB "
          f"({'PASS' if not over else 'FAIL: ' + ', '.join(over)}; limits {LIMITS})")
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
