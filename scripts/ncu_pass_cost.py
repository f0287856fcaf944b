"""What a profiled launch costs under Nsight Compute, taken apart on the GPU host (`gpu_check.sh ncu-cost`).

Two questions decide whether the paper suite's counters fit the 10-minute goal (#11), and neither can be
answered without a GPU:
1. Which metric families cost replay passes? Every launch of the counter set took 14 passes in the H100 join
   fixture. Each family of the set is profiled alone on one bf16 GEMM launch and the passes read back from
   ncu's own bookkeeping (`profiler__replayer_passes`).
2. Does a launch cost more when the process holds more memory? Each pass restored all 6.17 GiB the fixture's
   process had allocated. The bundled runs suggest a threshold: on the H100 (80 GB) a profiled launch of the
   transformer or hybrid (37.6-37.7 GiB peak) cost 1.7-1.9 s, of mamba2-lm (35.9 GiB) 0.6 s, and on the
   H200 (141 GB) the same transformer and hybrid launches at most 0.7 s (a whole pass's wall over its
   launches): as if ncu kept its copy on the GPU while it
   fits there and on the host once it does not. The same 20 launches are profiled with the full set, holding
   0, 30 and 45 GiB more (45: a copy no longer fits beside them on an 80 GB GPU), and at 45 GiB again with the
   caching allocator's expandable segments (does ncu save memory mapped that way at all?).

    .venv/bin/python scripts/ncu_pass_cost.py OUT.json [--holds]

The cuts take about 8.5 s each (NCU_COST_ONLY=REGEX measures only the cuts it matches); the holds (--holds)
minutes: 181.9 s at 45 GiB on the H100.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ssmprof.profiler.ncu_argv import counter_metrics

DROPPED = "sm__throughput.avg.pct_of_peak_sustained_elapsed"  # in the set measured on 2026-11-23, not since
FP16 = "sm__ops_path_tensor_src_fp16.sum"  # in the set until 2026-11-24 (ncu.NOT_ASKED): the cuts are of that set
MEASURED_SET = [*counter_metrics("gh100"), FP16]
LAUNCH = ("launch__grid_dim_x",)  # every run asks for one cheap attribute besides its family
# (GiB, PYTORCH_CUDA_ALLOC_CONF). Measured on the H100 (tests/data/ncu-pass-cost-h100): 12.6 s at 0 GiB, 14.7 s
# at 30, 181.9 s at 45; expandable segments at 45 GiB did not fit in the same call, so it goes first now.
HOLDS = ((45, "expandable_segments:True"), (0, ""), (30, ""), (45, ""))
LAUNCHES = 20
# One bf16 GEMM per launch, after a warm-up the bracket leaves out; `hold` GiB allocated and kept.
TARGET = """
import sys, torch
hold = [torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda")] if float(sys.argv[1]) else []
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    a @ a
torch.cuda.synchronize()
torch.cuda.profiler.start()
for _ in range(int(sys.argv[2])):
    a @ a
torch.cuda.synchronize()
torch.cuda.profiler.stop()
"""


def families(metrics: list[str]) -> dict[str, list[str]]:
    """The counter set cut by what each metric measures (prefix), plus the whole set and the stall set."""
    def having(*prefixes: str) -> list[str]:
        return [m for m in metrics if m.startswith(prefixes)]

    sass = having("sm__sass_thread_inst_executed_op_")
    cut = {
        "duration and launch": having("gpu__time_duration", "launch__"),
        "dram": having("dram__"),
        "l2 (lts)": having("lts__"),
        "l1 (l1tex)": having("l1tex__t_"),
        "sass fp32 instructions": [m for m in sass if any(f"_op_f{op}_" in m for op in ("add", "mul", "fma"))],
        "sass fp16 instructions": [m for m in sass if any(f"_op_h{op}_" in m for op in ("add", "mul", "fma"))],
        "sass fp64 instructions": [m for m in sass if any(f"_op_d{op}_" in m for op in ("add", "mul", "fma"))],
        "tensor ops": having("sm__ops_path_tensor"),
        "pipes, issue, warps": having("sm__pipe_", "sm__inst_executed_pipe_", "smsp__issue_active",
                                      "sm__warps_active"),
        "instructions and shared memory": having("smsp__inst_executed", "l1tex__data_pipe_lsu_wavefronts_mem_shared",
                                                 "sm__sass_data_bytes_mem_shared"),
    }
    cut["whole counter set"] = metrics
    cut["whole set without fp64 instructions"] = [m for m in metrics if m not in cut["sass fp64 instructions"]]
    cut["whole set without sass instructions"] = [m for m in metrics if m not in sass]
    cut["stall set"] = counter_metrics("gh100", "stalls")
    # the pipes family ("pipes, issue, warps, sm throughput" then) alone took 10 passes (H100), with sm__throughput
    # in it (a composite of many units' throughputs, dropped from the set since: no analysis read it): which of
    # its metrics cost them
    # and the tensor family (5 passes alone): which of its precisions cost them
    for metric in [*cut["pipes, issue, warps"], DROPPED, *cut["tensor ops"]]:
        cut[f"alone: {metric.split('.')[0]}"] = [metric]
    # the split that would move the pipes to the stall pass (profiled once per function that matters)
    pipes = cut["pipes, issue, warps"]
    cut["whole set without the pipes family"] = [m for m in metrics if m not in pipes]
    cut["stall set with the pipes family"] = cut["stall set"] + pipes
    # what the H200 suite's 672 s (2026-11-23) asks next: one pass for the further problems and the warp stalls
    # (a child process less per workload, about 15 s each), and the fp16 tensor metric's share of the 8 passes
    fp16 = having("sm__ops_path_tensor_src_fp16")
    cut["whole set and the stall set in one pass"] = list(dict.fromkeys(metrics + cut["stall set"]))
    cut["whole set without the fp16 tensor metric"] = [m for m in metrics if m not in fp16]
    cut["whole set without the pipes family and the fp16 tensor metric"] = [m for m in metrics
                                                                            if m not in pipes + fp16]
    # fp16 tensor ops counted as Hopper's two instruction families (as bf16 is): each 1 pass alone, like bf16's?
    split = ["sm__ops_path_tensor_op_hgmma_src_fp16.sum", "sm__ops_path_tensor_op_hmma_src_fp16.sum"]
    for metric in split:
        cut[f"alone: {metric.split('.')[0]}"] = [metric]
    cut["whole set, fp16 as its wgmma and mma.sync parts"] = [m for m in metrics if m not in fp16] + split
    cut["whole set, fp16 split, without the pipes family"] = [m for m in metrics if m not in fp16 + pipes] + split
    # the L2 family took 3 passes: which of its metrics cost them
    for metric in cut["l2 (lts)"]:
        cut[f"alone: {metric}"] = [metric]
        cut[f"whole set, fp16 split, without {metric}"] = [m for m in metrics if m not in fp16 + [metric]] + split
    # the instruction-bound family (`analysis.limits.instruction_bounds`): the passes it adds to the set, and each
    # metric's
    bounds = cut["instructions and shared memory"]
    cut["whole set without the instruction-bound family"] = [m for m in metrics if m not in bounds]
    for metric in bounds:
        cut[f"alone: {metric}"] = [metric]
    return cut


def profile(metrics: list[str], hold_gib: float, launches: int, folder: Path, name: str, alloc_conf: str = "") -> dict:
    report = folder / f"{name}.ncu-rep"
    script = folder / "target.py"
    script.write_text(TARGET)
    argv = ["ncu", "--profile-from-start", "off", "--clock-control", "none", "--metrics",
            ",".join(sorted(set(metrics) | set(LAUNCH))), "--export", str(report), "--force-overwrite",
            sys.executable, str(script), str(hold_gib), str(launches)]
    began = time.perf_counter()
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": alloc_conf} if alloc_conf else None
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:]}
    import ncu_report

    action = ncu_report.load_report(str(report)).range_by_idx(0).action_by_idx(0)

    def value(metric: str) -> float | None:
        found = action.metric_by_name(metric)
        return float(found.as_double()) if found is not None else None

    backed_up = value("profiler__replayer_bytes_mem_backed_up.avg")
    return {"metrics": len(metrics), "passes": value("profiler__replayer_passes"), "wall_s": round(wall, 2),
            "gib_per_pass": round(backed_up / 2**30, 3) if backed_up is not None else None}


def main(out: Path, holds: bool) -> None:
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        wanted = re.compile(os.environ.get("NCU_COST_ONLY", ""))  # a regex picking the cuts to measure
        cuts = {family: metrics for family, metrics in families(MEASURED_SET).items()
                if wanted.search(family)}
        for index, (family, metrics) in enumerate(cuts.items()):
            results[family] = profile(metrics, 0, 1, folder, f"family-{index}")
            print(f"{family:40s} {results[family]}", flush=True)
            out.write_text(json.dumps(results, indent=1))  # what was measured survives a timeout
        for hold, alloc_conf in HOLDS if holds else ():
            key = f"whole set, {LAUNCHES} launches, holding {hold} GiB more {alloc_conf}".strip()
            results[key] = profile(MEASURED_SET, hold, LAUNCHES, folder, f"hold-{hold}-{len(alloc_conf)}",
                                   alloc_conf)
            print(f"{key:40s} {results[key]}", flush=True)
            out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), "--holds" in sys.argv)
