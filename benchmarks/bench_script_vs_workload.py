"""A training script with two added lines against the same model profiled as a suite workload (issue #41), on a
GPU: `examples/train_script.py` (mamba2-lm under a plain loop) through `ssmprof profile --script`, and
`ssmprof profile mamba2-lm`, `--repeats` times each, alternating (the workload first in the first repeat). Every
run after the first pins its Triton autotuning choices (`--autotune-from`): each process autotunes anew on noisy
timings, and the script's first H100 runs picked another tile for `_chunk_cumsum_bwd` (grid z 16 against 4).

Prints, for each repeat, whether the two kernel tables hold the same launches in the same order (name, grid,
block, shared memory, phase: `KEY`) and the first difference where not; then the script's total kernel time over
the workload's with the bootstrap interval over the repeats (`analysis.trust.noise.ratio_interval`), the same ratio
between the workload's own repeats (the floor a rerun moves), and the step times' ratio with its verdict. Exits 1
where a launch differs or the kernel time differs beyond noise.

    python benchmarks/bench_script_vs_workload.py --out /tmp/script-vs-workload [--repeats 3] [--preset small]
"""

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

from ssmprof import schema
from ssmprof.analysis.trust.noise import RERUN_SPREAD_PCT, WITHIN_NOISE, ratio_interval, speedup_verdict

ROOT = Path(__file__).resolve().parents[1]
KEY = ["kernel_name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "shared_mem_bytes", "phase"]


def profile(out: Path, name: str, preset: str, script: bool, counters: str, pins: Path | None) -> schema.Run:
    common = ["--out", str(out), "--name", name, "--counters", counters,
              *(["--autotune-from", str(pins)] if pins else [])]
    command = [sys.executable, "-m", "ssmprof.cli", "profile"]
    if script:
        command += ["--script", str(ROOT / "examples" / "train_script.py"), *common, "--",
                    "--preset", preset, "--steps", "30"]
    else:
        command += ["mamba2-lm", "--preset", preset, *common]
    subprocess.run(command, check=True)
    return schema.read_run(out / name)


def launch_differences(script: schema.Run, workload: schema.Run) -> tuple[int, str]:
    """(launches that match in order, the first difference or "")."""
    a, b = script.kernels[KEY].reset_index(drop=True), workload.kernels[KEY].reset_index(drop=True)
    same = (a.head(len(b)) == b.head(len(a))).all(axis=1)
    matched = int(np.cumprod(same.to_numpy(dtype=bool)).sum())
    if matched == len(a) == len(b):
        return matched, ""
    where = matched
    mine = a.iloc[where].astype(str).tolist() if where < len(a) else "none"
    theirs = b.iloc[where].astype(str).tolist() if where < len(b) else "none"
    first = f"launch {where}: script {mine} / workload {theirs}"
    return matched, f"{len(a)} vs {len(b)} launches; {first}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--counters", default="none", help="none (timeline only) or sampled")
    args = parser.parse_args()
    scripts, workloads, ok = [], [], True
    first = args.out / "workload-0"
    for repeat in range(args.repeats):
        order = (False, True) if repeat % 2 == 0 else (True, False)
        runs = {}
        for script in order:
            name = f"{'script' if script else 'workload'}-{repeat}"
            runs[script] = profile(args.out, name, args.preset, script, args.counters,
                                   None if name == first.name else first)
        scripts.append(runs[True])
        workloads.append(runs[False])
        matched, difference = launch_differences(runs[True], runs[False])
        ok &= not difference
        print(f"repeat {repeat}: {matched} of {len(runs[False].kernels)} launches match in order (name, grid, block, "
              f"shared memory, phase){': ' + difference if difference else ''}")
    total = [run.kernels["duration_ns"].sum() / 1e6 for run in scripts]
    base = [run.kernels["duration_ns"].sum() / 1e6 for run in workloads]
    ratio = ratio_interval(total, base)
    rerun = max(base) / min(base)
    print(f"kernel time: script {np.median(total):.3f} ms, workload {np.median(base):.3f} ms; script / workload "
          f"{ratio.value:.4f} ({ratio.pct()}, {ratio.samples} repeats); workload reruns span {100 * (rerun - 1):.1f} %")
    within = ratio.spans(1.0) or abs(ratio.value - 1) * 100 <= max(RERUN_SPREAD_PCT, 100 * (rerun - 1))
    steps = ratio_interval(np.concatenate([r.info.harness.step_times_ms for r in workloads]),
                           np.concatenate([r.info.harness.step_times_ms for r in scripts]))
    print(f"step time: workload / script {steps.value:.4f} ({steps.pct()}): {speedup_verdict(steps)}")
    print(f"kernel time {'within' if within else 'OUTSIDE'} noise; step time verdict "
          f"{'ok' if speedup_verdict(steps) == WITHIN_NOISE else 'differs'}")
    return 0 if ok and within else 1


if __name__ == "__main__":
    sys.exit(main())
