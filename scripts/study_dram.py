"""The SSM kernels' memory use under the study's definitions and Nsight Compute settings (#54): what the study's
57.5 % mean DRAM bandwidth could have measured, beside what ssmprof measures.

On a GPU host: repeats the iteration of a run (default: the bundled H100 mamba2-lm paper run, whose SSM block has the
shapes the study cites: d_model 4096, d_state 128, headdim 64, 8 groups, chunk 256, sequence 4096) in
`ssmprof.profiler.ncu_child`, once per cache setting, under Nsight Compute profiling the first launch of each launch
configuration of the run's SSM kernels with the memory metrics of `MEMORY_METRICS`: DRAM alone, the SpeedOfLight
section's "Memory Throughput" (the largest of the memory units' throughputs) and the units beside it. Caches are
flushed before each replayed pass (Nsight Compute's default, and ssmprof's) or kept. The clocks are left as the
GPU runs them (`--clock-control none`): Nsight Compute's default locks them to base, which these hosts do not
permit (a figure for that setting cannot be measured here and is labelled so). Writes under OUT_DIR:

    ssm-memory.csv   one row per setting and profiled launch: kernel, grid, block, the run's launches of that
                     configuration, duration and the metrics (`SSM_MEMORY_METRICS`)
    ncu-<setting>.log    Nsight Compute's output

    .venv/bin/python scripts/study_dram.py OUT_DIR [--run RUN_DIR]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from ssmprof import bundled, schema
from ssmprof.analysis.launches.categories import SSM
from ssmprof.analysis.summaries.suite import ssm_memory_table
from ssmprof.errors import SsmprofError
from ssmprof.pipeline.loading import load_run
from ssmprof.profiler.counters import PROFILED_CHILD_ENV, child_command
from ssmprof.profiler.ncu_argv import CACHE_CONTROL, only_named

PROFILE_TIMEOUT_S = 300
# The metrics read for the SSM kernels under the study's definitions (Nsight Compute's names): DRAM alone, the
# SpeedOfLight section's "Memory Throughput" (the busiest of the memory units: DRAM, L2, L1, shared memory) and the
# units beside it, the launch's duration and the SM clock it ran at.
SSM_MEMORY_METRICS = {"duration_ns": "gpu__time_duration.sum", "dram_bytes": "dram__bytes.sum",
                      "dram_throughput_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                      "memory_throughput_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
                      "l2_throughput_pct": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
                      "l1_throughput_pct": "l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
                      "sm_clock_hz": "gpc__cycles_elapsed.avg.per_second"}
GRID = ["grid_x", "grid_y", "grid_z"]
BLOCK = ["block_x", "block_y", "block_z"]


def ssm_launches(run_dir: Path) -> pd.DataFrame:
    """The run's SSM launch configurations (kernel, grid, block) with how many launches each had."""
    kernels = load_run(run_dir).kernels
    ssm = kernels[kernels["category"] == SSM]
    return ssm.groupby(["kernel_name", *GRID, *BLOCK]).size().rename("launches").reset_index()


def profile(run_dir: Path, out: Path, cache: str, names: list[str], ncu: str) -> Path:
    """One Nsight Compute run of the run's iteration with the caches `cache` (flush or keep); returns the report."""
    info = schema.read_run_info(run_dir)
    autotune = schema.write_autotune_pins(info.triton_autotune, out)
    target = child_command(info.workload.name, info.workload.preset, info.workload.overrides,
                           info.harness.warmup or 0, allow_fallback=False, autotune_file=autotune)
    report = out / f"{cache}.ncu-rep"
    argv = [ncu, "--profile-from-start", "off", "--clock-control", "none", "--cache-control", CACHE_CONTROL[cache],
            "--metrics", ",".join(SSM_MEMORY_METRICS.values()), "--kernel-name", only_named(names),
            "--filter-mode", "per-launch-config", "--launch-count", "1", "--export", str(report),
            "--force-overwrite", *target]
    began = time.time()
    done = subprocess.run(argv, env={**os.environ, **PROFILED_CHILD_ENV}, capture_output=True, text=True,
                          errors="replace", timeout=PROFILE_TIMEOUT_S)
    (out / f"ncu-{cache}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0 or not report.exists():
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise SsmprofError(f"Nsight Compute failed (exit {done.returncode}): " + " | ".join(tail))
    print(f"{cache}: profiled in {time.time() - began:.0f} s")
    return report


def raw_rows(report: Path, ncu: str) -> pd.DataFrame:
    """The report's launches as `ncu --page raw --csv` prints them: kernel, grid, block and the metrics, in base
    units, renamed to SSM_MEMORY_METRICS' keys."""
    printed = subprocess.run([ncu, "--import", str(report), "--page", "raw", "--csv", "--print-units", "base",
                              "--print-kernel-base", "function"], capture_output=True, text=True, errors="replace",
                             timeout=120, check=True).stdout
    table = pd.read_csv(io.StringIO(printed), dtype=str)
    table = table[pd.to_numeric(table["ID"], errors="coerce").notna()]  # the row of units
    rows = pd.DataFrame({"kernel_name": table["Kernel Name"]})
    for axes, column in ((GRID, "Grid Size"), (BLOCK, "Block Size")):
        rows[axes] = table[column].str.strip("()").str.split(",", expand=True).astype(int).to_numpy()
    for key, metric in SSM_MEMORY_METRICS.items():
        rows[key] = pd.to_numeric(table[metric].str.replace(",", ""), errors="coerce").to_numpy()
    return rows.reset_index(drop=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--run", type=Path, default=bundled.REFERENCE / "h100-sxm" / "mamba2-lm")
    args = parser.parse_args(argv)
    ncu = shutil.which("ncu")
    if ncu is None:
        print("error: Nsight Compute (ncu) is not on PATH", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    launches = ssm_launches(args.run)
    names = sorted(launches["kernel_name"].unique())
    tables = []
    try:
        for cache in CACHE_CONTROL:
            rows = raw_rows(profile(args.run, args.out, cache, names, ncu), ncu)
            tables.append(rows.merge(launches, on=["kernel_name", *GRID, *BLOCK], how="left").assign(cache=cache))
    except (SsmprofError, subprocess.SubprocessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    measured = pd.concat(tables, ignore_index=True)
    measured.to_csv(args.out / "ssm-memory.csv", index=False)
    with pd.option_context("display.width", 200):
        print(ssm_memory_table(measured).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
