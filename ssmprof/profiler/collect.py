"""`ssmprof profile`: run the harness with the collectors and write one run directory (the data contract).

Order: the timeline run in this process (it also gives the harness numbers), then Nsight Compute on the
same iteration in a child process; the run directory is written only when both succeeded."""

from __future__ import annotations

import datetime as dt
import gc
import json
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from ssmprof import schema
from ssmprof.errors import NoGpu
from ssmprof.kernels import KernelPlan, software_versions
from ssmprof.profiler import autotune
from ssmprof.profiler.counters import attach_counters, child_command, run_ncu, unmatched_profiled
from ssmprof.profiler.harness import Progress, RunResult, run_training
from ssmprof.profiler.markers import NvtxMarker
from ssmprof.profiler.ncu import counter_metrics
from ssmprof.profiler.ncu_extract import read_report
from ssmprof.profiler.timeline import TimelineCapture, kernel_table
from ssmprof.workloads.base import CommonConfig, Workload


def coverage(kernels: pd.DataFrame) -> dict:
    """How much of the iteration's kernel time the collectors account for."""
    total = kernels["duration_ns"].sum()
    phased = kernels.loc[kernels["phase"] != "other", "duration_ns"].sum()
    countered = kernels.loc[kernels["ncu_duration_ns"].notna(), "duration_ns"].sum() if total else 0
    return {
        "launches": len(kernels),
        "kernel_time_ns": int(total),
        "phase_time_fraction": float(phased / total) if total else 0.0,
        "counter_time_fraction": float(countered / total) if total else 0.0,
    }


def run_info(result: RunResult, overrides: dict, collectors: dict, kernels: pd.DataFrame,
             triton_choices: dict) -> dict:
    return {
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "workload": {"name": result.workload, "preset": result.preset, "config": result.config,
                     "overrides": overrides},
        "gpu": {**result.gpu, "clocks": gpu_clocks()},
        "versions": software_versions(),
        "provenance": result.provenance,
        "triton_autotune": triton_choices,
        "harness": {
            "step_ms": result.step_ms,
            "step_times_ms": result.step_times_ms,
            "throughput": result.throughput,
            "unit": result.unit,
            "items_per_step": result.items_per_step,
            "peak_memory_bytes": result.peak_memory_bytes,
            "warmup": result.warmup,
            "final_loss": result.final_loss,
            "seconds": result.harness_seconds,
        },
        "collectors": collectors,
        "coverage": coverage(kernels),
    }


def gpu_clocks() -> dict:
    """SM and memory clocks as found (MHz), read through NVML; never changed."""
    try:
        import pynvml
    except ImportError:
        return {"note": "nvidia-ml-py not installed"}
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return {
            "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "sm_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "memory_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "memory_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
        }
    except pynvml.NVMLError as exc:
        return {"note": f"NVML: {exc}"}


def profile_run(workload: Workload, preset: str, cfg: CommonConfig, plan: KernelPlan, overrides: dict,
                out: Path, steps: int, warmup: int, counters: str = "sampled", allow_fallback: bool = False,
                keep_report: bool = False, ncu_timeout_s: float = 1800, progress: Progress | None = None) -> Path:
    """Profile one training iteration (timeline, then Nsight Compute counters unless `counters` is "none")
    and write the run directory under `out`; returns its path. Nothing is written if a collector fails."""
    if plan.device != "cuda":
        raise NoGpu("profiling characterizes GPU kernels: it needs a CUDA GPU (`ssmprof run --device cpu` "
                    "exercises the CPU reference path)")
    tell = progress or (lambda stage, done, total: None)
    capture = TimelineCapture(cuda=True)
    started = time.perf_counter()
    result = run_training(workload, preset, cfg, plan, steps, warmup, NvtxMarker(), progress, capture=capture)
    kernels = schema.conform_kernels(kernel_table(capture.trace))
    triton_choices = autotune.snapshot()
    collectors = {
        "harness": {"wall_s": time.perf_counter() - started},
        "timeline": {"tool": "torch.profiler", "wall_s": capture.wall_s},
        "counters": {"mode": counters},
    }
    # The child needs the GPU memory this process used for the model.
    gc.collect()
    torch.cuda.empty_cache()
    with tempfile.TemporaryDirectory() as scratch:
        extra = {}
        if counters != "none":
            report_path = Path(scratch) / "counters.ncu-rep"
            choices_path = Path(scratch) / "autotune.json"
            choices_path.write_text(json.dumps(triton_choices))
            configs = kernels.groupby(["kernel_name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"])
            total = configs.ngroups if counters == "sampled" else len(kernels)
            wall = run_ncu(child_command(workload.name, preset, overrides, warmup, allow_fallback, choices_path),
                           report_path, counters, ncu_timeout_s, lambda done: tell("counters (ncu)", done, total))
            measured = read_report(report_path)
            kernels = schema.conform_kernels(attach_counters(kernels, measured, counters))
            collectors["counters"].update({"tool": "ncu", "wall_s": wall, "kernels_profiled": len(measured),
                                           "profiled_not_on_timeline": unmatched_profiled(kernels, measured),
                                           "report_bytes": report_path.stat().st_size, "metrics": counter_metrics()})
            if keep_report:
                extra["counters.ncu-rep"] = report_path
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = Path(out) / f"{workload.name}-{preset}-{stamp}"
        info = run_info(result, overrides, collectors, kernels, triton_choices)
        return schema.write_run(path, info, kernels, extra_files=extra)
