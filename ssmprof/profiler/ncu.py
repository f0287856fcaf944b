"""Nsight Compute command lines for the counter collector (building them is pure; nothing runs here).

What every invocation needs, each learnt on our H100 (gpu-facts.md):
- `--profile-from-start off`: only the iteration the harness brackets with cudaProfilerStart/Stop is
  profiled; warm-up and Triton autotuning (hundreds of benchmark launches) stay out.
- `--nvtx`: without it ncu records no NVTX state, and phases cannot be read back from the report.
- `--clock-control none`: measure the GPU at the clocks it runs training at; never lock or change them.
- `--metrics` with a curated list, not `--set full`: each section adds replay passes.
- NCCL kernels are never replayed (replaying a collective deadlocks or corrupts it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from ssmprof.schema import COUNTER_METRICS

# Kernel names ncu must skip: everything but NCCL (ncu matches names with ECMAScript regexes).
NOT_NCCL = "regex:^(?!nccl)"
MODES = ("sampled", "all")
# Launch configuration of each profiled kernel, to join the report to the timeline.
LAUNCH_METRICS = ("launch__grid_size", "launch__block_size")


def counter_metrics() -> list[str]:
    """The curated metric list: what kernels.parquet has columns for, plus the launch configuration."""
    return [metric for metric, _, _ in COUNTER_METRICS.values()] + list(LAUNCH_METRICS)


def ncu_argv(target: Sequence[str], report: Path, mode: str = "sampled", metrics: Iterable[str] | None = None,
             ncu: str = "ncu") -> list[str]:
    """argv that profiles the cudaProfilerStart/Stop-bracketed iteration of `target` into `report`.

    mode "sampled": the first launch of each launch configuration (kernel, grid, block), weighted back
    to every launch of that configuration by the timeline; mode "all": every launch of the iteration.
    """
    if mode not in MODES:
        raise ValueError(f"counter mode must be one of {MODES}, got {mode!r}")
    argv = [
        ncu,
        "--profile-from-start", "off",
        "--nvtx",
        "--clock-control", "none",
        "--metrics", ",".join(metrics if metrics is not None else counter_metrics()),
        "--kernel-name", NOT_NCCL,
        "--export", str(report),
        "--force-overwrite",
    ]
    if mode == "sampled":
        argv += ["--filter-mode", "per-launch-config", "--launch-count", "1"]
    return argv + list(target)
