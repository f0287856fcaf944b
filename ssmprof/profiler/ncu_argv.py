"""Nsight Compute command lines and metric sets for the counter collector (pure; nothing runs here).

What every invocation needs, each learnt on our H100 (gpu-facts.md):
- `--profile-from-start off`: only the iteration the harness brackets with cudaProfilerStart/Stop is
  profiled; warm-up and Triton autotuning (hundreds of benchmark launches) stay out.
- `--nvtx`: without it ncu records no NVTX state, and phases cannot be read back from the report.
- `--clock-control none`: measure the GPU at the clocks it runs training at; never lock or change them.
- `--cache-control`: Nsight Compute flushes every cache before each replayed pass by default ("flush", ncu's
  `all`), so a kernel's DRAM reads are those of a cold L2, and what an earlier kernel left in L2 (the SSD chain's
  intermediates) is read from DRAM; "keep" (ncu's `none`) leaves the caches as the pass before left them, which
  for the first pass of a launch is as the iteration left them. The mode is recorded in run.json
  (`collectors.counters.cache`), and the SSD data-flow table shows a run of each beside the other.
- `--metrics` with a curated list, not `--set full`: each section adds replay passes.
- NCCL kernels are never replayed (replaying a collective deadlocks or corrupts it).

Sampling (`--counters sampled`) takes two passes over the same iteration. The first profiles the first
launch of every launch configuration (ncu's per-launch-config filter: kernel function name, grid, block and
shared memory). That is each launch's own work only where the configuration determines the problem; it
does not for library kernels whose grid ignores the shapes (cuBLAS's persistent `nvjet` GEMMs run grid 132
for every shape) nor for template instances that share a function name. For those configurations the
collector plans a second, targeted pass: `--kernel-id` with the configurations' function names and the
invocation numbers (ncu counts a function's invocations across all its launch configurations) of the first
launch of each further problem.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from ssmprof.errors import SsmprofError
from ssmprof.schema import COUNTER_METRICS, STALL_METRICS

# Kernel names ncu must skip: everything but NCCL (ncu matches names with ECMAScript regexes).
NOT_NCCL = "regex:^(?!nccl)"
MODES = ("sampled", "all")
# How ncu gathers a launch's metric passes. "kernel": it replays the launch in place, saving and restoring the GPU
# memory the process holds around every pass (through the host once a copy no longer fits beside it on the GPU).
# "application": it reruns the whole profiled process once per metric pass and joins the passes by launch (the
# harness's iteration is deterministic: the same kernels, launch configurations and order in every process), so
# nothing is saved or restored: the way for a process holding more than half the GPU.
REPLAYS = ("kernel", "application")
# `--ncu-cache` -> Nsight Compute's --cache-control (the module's docstring says what each measures)
CACHE_CONTROL = {"flush": "all", "keep": "none"}
FLUSH = "flush"
# Launch attributes read back for the join; ncu records them for every profiled kernel at no extra pass.
LAUNCH_METRICS = ("launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z", "launch__block_dim_x",
                  "launch__block_dim_y", "launch__block_dim_z", "launch__shared_mem_per_block_static",
                  "launch__shared_mem_per_block_dynamic")

# Compute capability -> the chip name Nsight Compute uses for its metric lists.
CHIPS = {"8.0": "ga100", "9.0": "gh100", "10.0": "gb100"}
# Where a chip names a counter differently from Hopper (gh100, the names in schema.COUNTER_METRICS), from
# `ncu --query-metrics --chip CHIP` (shared/ncu): another metric, a sum of metrics ("a+b"), or None where the
# chip has no such counter (the column stays NaN, and run.json lists it). A100 has no fp8 and no wgmma;
# Blackwell's tensor work is tcgen05, not wgmma. (Both split fp16 tensor ops by accumulator type,
# sm__ops_path_tensor_src_fp16_dst_fp16 + _dst_fp32, for when fp16 leaves NOT_ASKED.)
# Warp stalls: only Hopper waits on wgmma; Blackwell lists no immediate-constant-cache stall.
CHIP_OVERRIDES: dict[str, dict[str, str | None]] = {
    "gh100": {},
    "ga100": {"tensor_ops_fp8": None, "tensor_ops_bf16_wgmma": None,
              "tensor_ops_bf16_mma": None, "stall_gmma": None},
    "gb100": {"tensor_ops_fp8": "sm__ops_path_tensor_src_fp4_fp6_fp8_dst_fp16.sum"
                                "+sm__ops_path_tensor_src_fp4_fp6_fp8_dst_fp32.sum",
              "tensor_ops_bf16_wgmma": None, "stall_gmma": None, "stall_imc_miss": None},
}
# Columns no pass asks for on any chip, and why: each costs replay passes on every profiled launch for work the
# workloads never do.
NOT_ASKED = {
    "tensor_ops_fp16": "no workload computes in fp16 (workloads.base.DTYPES: bf16, fp32; 0 fp16 tensor ops in all 14 "
                       "bundled runs); on the H100 it takes 3 replay passes alone and 1 of the set's 8",
}
# The metric groups, one per kind of pass: the counters of every sampled launch, and the warp stalls of the
# kernels that matter (`counters.stall_targets`).
METRIC_GROUPS = {"counters": COUNTER_METRICS, "stalls": STALL_METRICS}


class UnknownMetric(SsmprofError):
    pass


def chip_for(compute_capability: str) -> str:
    chip = CHIPS.get(compute_capability)
    if chip is None:
        raise UnknownMetric(f"no Nsight Compute metric set for compute capability {compute_capability} "
                            f"(known: {', '.join(f'{cc} = {c}' for cc, c in CHIPS.items())}); use --counters none")
    return chip


def column_metrics(chip: str, group: str = "counters") -> dict[str, str | None]:
    """Column of `group` -> the metric expression collected for it on `chip` ("a+b" sums; None: not on this
    chip, or NOT_ASKED)."""
    overrides = CHIP_OVERRIDES[chip]
    return {column: None if column in NOT_ASKED else overrides.get(column, metric)
            for column, (metric, _, _) in METRIC_GROUPS[group].items()}


def counter_metrics(chip: str = "gh100", group: str = "counters") -> list[str]:
    """The metric names passed to ncu on `chip` for `group`: its columns' metrics plus the launch attributes
    (the join needs them in every pass)."""
    names = [name for expression in column_metrics(chip, group).values() if expression
             for name in expression.split("+")]
    return list(dict.fromkeys(names + list(LAUNCH_METRICS)))


def check_metrics(metrics: Iterable[str], available: set[str], chip: str) -> None:
    """Refuse, naming it, any counter metric whose base name `ncu --query-metrics --chip CHIP` does not list:
    ncu would otherwise profile without it and every row would read NaN."""
    unknown = [m for m in metrics if not m.startswith("launch__") and m.split(".")[0] not in available]
    if unknown:
        raise UnknownMetric(f"Nsight Compute does not know {', '.join(unknown)} on {chip}: "
                            "ssmprof's metric set for this chip needs updating (or use --counters none)")


def parse_query_metrics(text: str) -> set[str]:
    """Base metric names from the table `ncu --query-metrics --chip CHIP` prints."""
    names = set()
    for line in text.splitlines():
        first = line.split(maxsplit=1)[0] if line.strip() else ""
        if "__" in first:
            names.add(first)
    return names


def ncu_argv(target: Sequence[str], report: Path, mode: str = "sampled", metrics: Iterable[str] | None = None,
             ncu: str = "ncu", targets: dict[str, list[int]] | None = None,
             names: Iterable[str] | None = None, replay: str = "kernel", cache: str = FLUSH) -> list[str]:
    """argv that profiles the cudaProfilerStart/Stop-bracketed iteration of `target` into `report`, replaying
    each profiled launch in place or the whole `target` once per metric pass (`replay`, REPLAYS).

    mode "sampled": the first launch of each launch configuration; "all": every launch of the iteration.
    `targets` (function name -> 1-based invocation numbers of that function) turns it into
    the second, targeted pass of sampled mode. `names` (function names) profiles only those kernels (the
    `focus` counters of a sweep: the SSM kernels and the longest ones). `cache`: what happens to the caches
    before each replayed pass (CACHE_CONTROL).
    """
    if mode not in MODES:
        raise ValueError(f"counter mode must be one of {MODES}, got {mode!r}")
    if replay not in REPLAYS:
        raise ValueError(f"replay must be one of {REPLAYS}, got {replay!r}")
    if cache not in CACHE_CONTROL:
        raise ValueError(f"cache must be one of {tuple(CACHE_CONTROL)}, got {cache!r}")
    argv = [
        ncu,
        "--profile-from-start", "off",
        "--nvtx",
        "--clock-control", "none",
        "--cache-control", CACHE_CONTROL[cache],
        "--import-sass", "no",
        "--metrics", ",".join(metrics if metrics is not None else counter_metrics()),
        "--export", str(report),
        "--force-overwrite",
    ]
    if replay == "application":
        argv += ["--replay-mode", "application"]
    if targets:
        argv += ["--kernel-id", targeted_kernel_id(targets)]
    else:
        argv += ["--kernel-name", only_named(names) if names is not None else NOT_NCCL]
        if mode == "sampled":
            argv += ["--filter-mode", "per-launch-config", "--launch-count", "1"]
    return argv + list(target)


def only_named(names: Iterable[str]) -> str:
    """`regex:^(NAMES)$` for ncu's --kernel-name: exactly these function names (never NCCL's)."""
    kept = sorted(name for name in set(names) if not name.startswith("nccl"))
    return f"regex:^({'|'.join(re.escape(name) for name in kept)})$"


def targeted_kernel_id(targets: dict[str, list[int]]) -> str:
    """`::regex:NAMES:INVOCATIONS` for ncu's --kernel-id: the named functions, at the union of the invocation
    numbers (ncu counts a function's invocations, whatever their configuration). The union over-selects a
    little where two functions need different numbers; the join places those extra launches like the rest."""
    names = "|".join(re.escape(name) for name in sorted(targets))
    numbers = sorted({n for wanted in targets.values() for n in wanted})
    return f"::regex:^({names})$:^({'|'.join(map(str, numbers))})$"


# Nsight Compute's guided analysis: the sections whose rules judge what limits a kernel, applied as it profiles.
RULE_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "SchedulerStats",
                 "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis")


def rules_argv(target: Sequence[str], report: Path, names: Iterable[str], chip: str = "gh100",
               ncu: str = "ncu") -> list[str]:
    """argv that profiles, in the bracketed iteration of `target`, the first launch of each launch configuration
    of the kernels `names` with RULE_SECTIONS and their rules applied, plus ssmprof's own counter and stall
    metrics, so that ssmprof's verdicts and Nsight Compute's rule results describe the same launches."""
    metrics = list(dict.fromkeys(counter_metrics(chip, "counters") + counter_metrics(chip, "stalls")))
    argv = [ncu, "--profile-from-start", "off", "--nvtx", "--clock-control", "none", "--import-sass", "no"]
    for section in RULE_SECTIONS:
        argv += ["--section", section]
    argv += ["--metrics", ",".join(metrics), "--apply-rules", "yes",
             "--kernel-name", only_named(names), "--filter-mode", "per-launch-config", "--launch-count", "1",
             "--export", str(report), "--force-overwrite"]
    return argv + list(target)


def details_argv(report: Path, ncu: str = "ncu") -> list[str]:
    """argv that prints a report's details page (section metrics and rule results, one row each) as CSV."""
    return [ncu, "--import", str(report), "--page", "details", "--csv"]
