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


def counter_metrics() -> list[str]:
    """The curated metric list: exactly what kernels.parquet has columns for."""
    return [metric for metric, _, _ in COUNTER_METRICS.values()]


def ncu_argv(target: Sequence[str], report: Path, mode: str = "sampled", metrics: Iterable[str] | None = None,
             ncu: str = "ncu") -> list[str]:
    """argv that profiles the cudaProfilerStart/Stop-bracketed iteration of `target` into `report`.

    mode "sampled": the first launch of each kernel name (`--kernel-id` invocation 1), weighted back to
    every launch by timeline durations; mode "all": every launch of the iteration.
    """
    if mode not in MODES:
        raise ValueError(f"counter mode must be one of {MODES}, got {mode!r}")
    argv = [
        ncu,
        "--profile-from-start", "off",
        "--nvtx",
        "--clock-control", "none",
        "--metrics", ",".join(metrics if metrics is not None else counter_metrics()),
        "--export", str(report),
        "--force-overwrite",
    ]
    if mode == "sampled":
        argv += ["--kernel-id", f"::{NOT_NCCL}:1"]
    else:
        argv += ["--kernel-name", NOT_NCCL]
    return argv + list(target)
