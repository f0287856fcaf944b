"""Nsight Compute's own guided analysis of the SSD kernels, beside ssmprof's verdicts of the same launches.

On a GPU host: repeats the iteration of a bundled run (default: the H100 mamba2-lm paper run; same workload,
preset, overrides and pinned Triton autotuning choices) in `ssmprof.profiler.ncu_child` under one Nsight Compute
run that profiles the first launch of each launch configuration of its SSD kernels (`_chunk_*`, `_bmm_chunk_*`,
`_state_passing_*`: 14 kernels) with the sections of `ncu_argv.RULE_SECTIONS`, `--apply-rules yes`, and ssmprof's own
counter and stall metrics. It then prints the report's details page as CSV (`ncu --import ... --page details
--csv`), reads the rule results and section metrics from it, ssmprof's verdicts from the same report's counters,
and writes under OUT_DIR:

    details.csv     the details page as ncu printed it (for a parser that needs another look)
    rules.csv       one row per rule result: launch, kernel, section, rule, type, message, estimated speedup
    verdicts.csv    ssmprof's verdict of each profiled launch (`analysis.limits.limiters.limiters`)
    agreement.csv   per launch: both verdicts, agree (yes / runner-up / no) and why (`limiters.agreement`)

    .venv/bin/python scripts/ncu_rules.py OUT_DIR [--run RUN_DIR] [--from-report REPORT.ncu-rep]

`--from-report` skips the profiling and reads a report this script wrote before (needs ncu, no GPU).
`--rules-only REPORT` reads a report of the rule sections alone (tests/data/ncu-rules-mamba2-lm-h100): its rule
results through `ncu_report`, ssmprof's verdicts from the run `--run` (the same iteration, profiled in another
process), each kernel and phase's first launch (`recorded_agreement`; `same_config` says whether the two launches
had one grid and block: that report's child autotuned for itself, and chose other tiles for some kernels).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from ssmprof import bundled, schema
from ssmprof.analysis.limits.limiters import VERDICT_COLUMNS, agreement, limiters
from ssmprof.errors import SsmprofError
from ssmprof.hardware import run_ceilings
from ssmprof.pipeline.loading import load_run
from ssmprof.profiler.counters import PROFILED_CHILD_ENV, child_command
from ssmprof.profiler.ncu_argv import chip_for, details_argv, rules_argv
from ssmprof.profiler.ncu_extract import parse_details, read_report, read_rule_results, read_verdict_inputs
from ssmprof.schema import read_run

SSD_PREFIXES = ("_chunk_", "_bmm_chunk_", "_state_passing_")
PROFILE_TIMEOUT_S = 480


def ssd_kernels(kernels: pd.DataFrame) -> list[str]:
    """The SSD chain's kernel names of a run (mamba-ssm's Triton kernels), sorted."""
    names = kernels["kernel_name"].drop_duplicates()
    return sorted(names[names.str.startswith(SSD_PREFIXES)])


def profile(run_dir: Path, out: Path, ncu: str) -> Path:
    """One Nsight Compute run of the bundled run's iteration; returns the report."""
    run = read_run(run_dir)
    workload = run.info.workload
    autotune = schema.write_autotune_pins(run.info.triton_autotune, out)
    target = child_command(workload.name, workload.preset, workload.overrides, run.info.harness.warmup or 0,
                           allow_fallback=False, autotune_file=autotune)
    report = out / "rules.ncu-rep"
    argv = rules_argv(target, report, ssd_kernels(run.kernels), run_chip(run_dir), ncu)
    began = time.time()
    done = subprocess.run(argv, env={**os.environ, **PROFILED_CHILD_ENV}, capture_output=True, text=True,
                          errors="replace", timeout=PROFILE_TIMEOUT_S)
    (out / "ncu.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0 or not report.exists():
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise SsmprofError(f"Nsight Compute failed (exit {done.returncode}): " + " | ".join(tail))
    print(f"profiled in {time.time() - began:.0f} s: {report}")
    return report


def run_chip(run_dir: Path) -> str:
    """Nsight Compute's metric set for the GPU a run was profiled on."""
    capability = read_run(run_dir).info.gpu.compute_capability
    if capability is None:
        raise SsmprofError(f"{run_dir}/run.json records no gpu.compute_capability: profiled on no GPU")
    return chip_for(capability)


LAUNCH_CONFIG = ["kernel_name", "phase", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]


def recorded_agreement(report: Path, run_dir: Path) -> pd.DataFrame:
    """`limiters.agreement` of a rules-only report's launches and the verdicts of `run_dir`'s first launch of the
    same kernel in the same phase, with `same_config` (one grid and block)."""
    metrics, rules = read_rule_results(report)
    launches = read_report(report, columns=()).reset_index(names="launch_id")[["launch_id", *LAUNCH_CONFIG]]
    run = load_run(run_dir)
    ceilings, _ = run_ceilings(run.info.gpu.name, run.path)
    first = limiters(run.kernels, ceilings=ceilings).drop_duplicates(["kernel_name", "phase"])
    joined = launches.merge(first, on=["kernel_name", "phase"], how="left", suffixes=("", "_run"))
    table = agreement(joined, rules, metrics)
    same = (joined[LAUNCH_CONFIG[2:]].to_numpy() == joined[[f"{c}_run" for c in LAUNCH_CONFIG[2:]]].to_numpy())
    return table.assign(same_config=same.all(axis=1))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--run", type=Path, default=bundled.REFERENCE / "h100-sxm" / "mamba2-lm")
    parser.add_argument("--from-report", type=Path)
    parser.add_argument("--rules-only", type=Path)
    args = parser.parse_args(argv)
    if args.rules_only:
        args.out.mkdir(parents=True, exist_ok=True)
        table = recorded_agreement(args.rules_only, args.run)
        table.to_csv(args.out / "agreement.csv", index=False)
        print(table[["kernel_name", "limiter", "runner_up", "ncu_bottleneck", "ncu_top_rule", "agree", "why"]]
              .to_string())
        print(f"agree: {table['agree'].value_counts().to_dict()} over {len(table)} launches")
        return 0
    ncu = shutil.which("ncu")
    if ncu is None:
        print("error: Nsight Compute (ncu) is not on PATH", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        report = args.from_report or profile(args.run, args.out, ncu)
        chip = run_chip(args.run)
        details = subprocess.run(details_argv(report, ncu), capture_output=True, text=True, errors="replace",
                                 timeout=300)
        (args.out / "details.csv").write_text(details.stdout)
        metrics, rules = parse_details(details.stdout)
        verdicts = limiters(read_verdict_inputs(report, chip))
    except (SsmprofError, subprocess.TimeoutExpired) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    rules.to_csv(args.out / "rules.csv", index=False)
    verdicts[["launch_id", "kernel_name", "phase", *VERDICT_COLUMNS]].to_csv(args.out / "verdicts.csv", index=False)
    table = agreement(verdicts, rules, metrics)
    table.to_csv(args.out / "agreement.csv", index=False)
    with pd.option_context("display.width", 250, "display.max_colwidth", 120, "display.max_columns", 20):
        print(table[["kernel_name", "limiter", "runner_up", "ncu_bottleneck", "ncu_top_rule", "agree", "why"]])
    print(f"agree: {table['agree'].value_counts().to_dict()} over {len(table)} launches, "
          f"{table['kernel_name'].nunique()} kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
