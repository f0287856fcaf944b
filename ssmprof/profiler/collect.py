"""`ssmprof profile`: run the harness with the collectors and write one run directory (the data contract).

Order: the timeline run in this process (it also gives the harness numbers), then Nsight Compute on the
same iteration in a child process (two passes in sampled mode where one launch configuration holds several
problems, see `ncu`), the join (`counters`), and the self-checks of every launch's counters
(`analysis.checks`, recorded in run.json `checks`); the run directory is written only when all succeeded.

Counter modes: `sampled` (no pass profiles the functions under `counters.PASS_1_MIN_SHARE` of the kernel
time: not collected), `all`, `none`, and `focus`: sampled's first pass on the kernels the timeline
shows matter (`counters.focus_kernels`: the fused SSM kernels and the longest others) and no second pass;
the other launches keep no counters (`not collected`), and coverage says how much time that leaves out.
A sweep of twenty points pays that instead of twenty full samplings."""

from __future__ import annotations

import datetime as dt
import gc
import gzip
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import pandas as pd
import torch

from ssmprof import schema
from ssmprof.errors import NoGpu
from ssmprof.kernels import KernelPlan, is_fused_kernel, software_versions
from ssmprof.profiler import autotune
from ssmprof.profiler.counters import (
    NcuPass,
    SamplingPlan,
    attach_counters,
    attach_stalls,
    available_metrics,
    child_command,
    focus_kernels,
    pass_seconds,
    replay_through_host,
    stall_targets,
)
from ssmprof.profiler.harness import Progress, RunResult, run_training
from ssmprof.profiler.markers import NvtxMarker
from ssmprof.profiler.ncu import METRIC_GROUPS, NOT_ASKED, check_metrics, chip_for, column_metrics, counter_metrics
from ssmprof.profiler.ncu_extract import read_report
from ssmprof.profiler.nvml import gpu_clocks
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
        "host": host_info(),
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
            "peak_reserved_bytes": result.peak_reserved_bytes,
            "warmup": result.warmup,
            "final_loss": result.final_loss,
            "seconds": result.harness_seconds,
        },
        "gpu_sharing": result.gpu_sharing,
        "collectors": collectors,
        "coverage": coverage(kernels),
    }


def host_info() -> dict:
    """The CPU that launches the kernels: a step partly bound by the host differs between hosts with one GPU."""
    model = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "")
    except OSError:
        pass
    return {"cpu": model or platform.processor() or "unknown", "cpu_count": os.cpu_count(),
            "hostname": platform.node(), "python": platform.python_version()}


# Launches per timing of `host_launch_us`: well below the ~1,000 a CUDA stream queues, so the host never waits
HOST_LAUNCHES = 500


def host_launch_us(repeats: int = 5) -> float:
    """Host time to launch one tiny kernel through PyTorch, in us: the median of `repeats` timings of
    HOST_LAUNCHES in-place adds enqueued without waiting (after one warm-up timing). It bounds a host-bound
    step, and hosts of one CPU description differ in it: graph-mamba's step took 66.4 and 50.5 ms on two H100
    hosts of one description, with the same kernel time."""
    x = torch.zeros(1, device="cuda")
    timings = []
    for _ in range(repeats + 1):
        torch.cuda.synchronize()
        began = time.perf_counter()
        for _ in range(HOST_LAUNCHES):
            x.add_(1)
        timings.append((time.perf_counter() - began) / HOST_LAUNCHES * 1e6)
    torch.cuda.synchronize()
    return statistics.median(timings[1:])


# The self-checks of the joined counters: (kernel table, GPU name) -> (checked table, run.json `checks`).
# They are pure analyses (`analysis.checks`); the pipeline hands them in, so the profiler imports no analysis.
CounterCheck = Callable[[pd.DataFrame, str], tuple[pd.DataFrame, dict]]


class StartedPass(Protocol):
    """A counter pass, started: `finish` lets it run (where it waits), waits for it and returns the wall time it
    added; `cancel` stops one that will not get its turn."""

    def finish(self, on_kernel: Callable[[int], None]) -> float: ...

    def cancel(self) -> None: ...


# start_pass(report, mode, metrics, targeted invocations, function names or None, ahead): one Nsight Compute pass
# over the profiled iteration, started now; `ahead`: its turn comes after the pass now running, so it may prepare
# meanwhile (touching no GPU). A single process runs the child under ncu; a parallel run wraps one rank of its
# launch, at its turn.
StartPass = Callable[[Path, str, list[str], dict | None, list[str] | None, bool], StartedPass]


def replay_cost(rows: pd.DataFrame) -> dict:
    """One pass's replay bookkeeping (`ncu_extract.REPLAY_METRICS`): launches, median passes per launch, and the
    median and largest GiB saved and restored per replay pass (NaN where the report has none)."""
    passes = rows.get("replay_passes", pd.Series(dtype=float))
    restored = rows.get("replay_bytes_per_pass", pd.Series(dtype=float)) / 2**30
    return {"launches": len(rows), "passes_median": float(passes.median()),
            "gib_per_pass_median": float(restored.median()), "gib_per_pass_max": float(restored.max())}


def collect_counters(kernels: pd.DataFrame, counters: str, gpu: dict, scratch: Path, start_pass: StartPass,
                     check: CounterCheck, tell: Callable[[str, int, int], None], held_bytes: float
                     ) -> tuple[pd.DataFrame, dict, dict, list[Path]]:
    """Counters for the timeline `kernels` in mode `counters` (sampled, all, focus): the passes, the join, the
    self-checks. Returns (the joined, checked table; run.json's counter collector notes; its `checks`; the
    pass reports, under `scratch`). Every metric is checked against ncu's list for the chip first. Each pass
    after the first is started while the one before it replays (`counters.NcuPass`). `held_bytes`: the peak of
    live tensors in the iteration; where replay will save it through the host, each pass's progress says so."""
    chip = chip_for(gpu["compute_capability"])
    metrics = {group: counter_metrics(chip, group) for group in METRIC_GROUPS}
    check_metrics([m for group in metrics.values() for m in group], available_metrics(chip), chip)
    plan = SamplingPlan.of(kernels)
    focus = focus_kernels(kernels) if counters == "focus" else None
    # the functions pass 1 asks for by name: in focus mode the focus kernels, sampled all but the minor ones
    names = focus if focus is not None else plan.functions if counters == "sampled" else None
    # (metric group, mode, targeted invocations): the counters of every launch configuration (of the focus
    # kernels only in focus mode), of each further problem, then the warp stalls of the kernels that hold the
    # time (not in focus mode: a sweep point pays for one pass)
    passes = [("counters", "all" if counters == "all" else "sampled", None)]
    if counters == "sampled" and plan.targets:
        passes.append(("counters", "sampled", plan.targets))
    if counters != "focus":
        passes.append(("stalls", "sampled", stall_targets(kernels, is_fused_kernel)))
    # each pass also with the function names it asks for (the counter passes only) and its report
    planned = [(group, mode, targets, names if group == "counters" else None, scratch / f"{group}-{number}.ncu-rep")
               for number, (group, mode, targets) in enumerate(passes, start=1)]
    reports: dict[str, list] = {group: [] for group in METRIC_GROUPS}
    walls, replays = [], []
    through_host = replay_through_host(held_bytes, gpu["memory_bytes"])
    slow = f", replay through the host: {held_bytes / 2**30:.0f} of {gpu['memory_bytes'] / 2**30:.0f} GiB held" \
        if through_host else ""

    def start(number: int) -> StartedPass:
        group, mode, targets, only, path = planned[number - 1]
        return start_pass(path, mode, metrics[group], targets, only, number > 1)

    upcoming = start(1)
    for number, (group, mode, targets, only, path) in enumerate(planned, start=1):
        expected = plan.expected(kernels, mode, targets, only)
        label = f"{'warp stalls' if group == 'stalls' else 'counters'} (ncu pass {number}{slow})"
        current, upcoming = upcoming, start(number + 1) if number < len(passes) else None
        try:  # a pass waiting for a turn that will not come is stopped, not left behind
            walls.append(current.finish(lambda done, label=label, t=len(expected): tell(label, done, t)))
            rows = read_report(path, chip, group)
        except BaseException:
            if upcoming is not None:
                upcoming.cancel()
            raise
        reports[group].append((rows, expected))
        replays.append(replay_cost(rows))
    kernels, notes = attach_counters(kernels, reports["counters"], plan)
    if focus is not None:  # launches outside the focus were never asked for: not collected, not unmatched
        kernels.loc[~kernels["kernel_name"].isin(focus), "counter_status"] = "not collected"
        notes["focus_kernels"] = focus
    if reports["stalls"]:
        kernels, notes["stalls"] = attach_stalls(kernels, *reports["stalls"][0], plan)
    kernels, checks = check(schema.conform_kernels(kernels), gpu["name"])
    notes = {"tool": "ncu", "chip": chip, "wall_s": sum(walls), "pass_wall_s": walls, "pass_replay": replays,
             "replay_through_host": through_host, **notes,
             "metrics": metrics["counters"], "stall_metrics": metrics["stalls"],
             "columns_not_collected": {c: NOT_ASKED.get(c, f"not on {chip}") for group in METRIC_GROUPS
                                       for c, m in column_metrics(chip, group).items() if m is None}}
    return kernels, notes, checks, [path for *_, path in planned]


def profile_run(workload: Workload, preset: str, cfg: CommonConfig, plan: KernelPlan, overrides: dict,
                out: Path, steps: int, warmup: int, counters: str = "sampled", allow_fallback: bool = False,
                keep_report: bool = False, ncu_timeout_s: float = 1800, progress: Progress | None = None, *,
                check: CounterCheck, name: str | None = None) -> Path:
    """Profile one training iteration (timeline, then Nsight Compute counters unless `counters` is "none")
    and write the run directory `name` (default: workload-preset-time) under `out`; returns its path.
    Nothing is written if a collector fails."""
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
        "harness": {"wall_s": time.perf_counter() - started, "host_launch_us": host_launch_us()},
        "timeline": {"tool": "torch.profiler", "wall_s": capture.wall_s},
        "counters": {"mode": counters},
    }
    # The child needs the GPU memory this process used for the model.
    gc.collect()
    torch.cuda.empty_cache()
    with tempfile.TemporaryDirectory() as scratch:
        extra, checks = {}, {}
        if keep_report:  # the raw inputs of the join, for inspection and as test fixtures
            extra["trace.json.gz"] = Path(scratch) / "trace.json.gz"
            with gzip.open(extra["trace.json.gz"], "wt") as f:
                json.dump(capture.trace, f)
        if counters != "none":
            choices_path = Path(scratch) / "autotune.json"
            choices_path.write_text(json.dumps(triton_choices))
            phases = []

            class Pass:  # an NcuPass of the child, its timings taken apart once it ends
                def __init__(self, report: Path, mode: str, metrics: list[str], targets, names, ahead: bool):
                    self.timings = report.with_suffix(".timings.json")
                    command = child_command(workload.name, preset, overrides, warmup, allow_fallback, choices_path,
                                            self.timings)
                    self.ncu = NcuPass(command, report, mode, metrics, targets, names, ahead)

                def finish(self, on_kernel) -> float:
                    wall = self.ncu.finish(ncu_timeout_s, on_kernel)
                    phases.append(pass_seconds(self.ncu.launched, self.ncu.ended,
                                               json.loads(self.timings.read_text())))
                    return wall

                def cancel(self) -> None:
                    self.ncu.cancel()

            kernels, notes, checks, reports = collect_counters(kernels, counters, result.gpu, Path(scratch),
                                                               Pass, check, tell, result.peak_memory_bytes)
            collectors["counters"].update(notes, pass_seconds=phases)
            if keep_report:
                extra.update({report.name: report for report in reports})
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = Path(out) / (name or f"{workload.name}-{preset}-{stamp}")
        info = run_info(result, overrides, collectors, kernels, triton_choices)
        info["checks"] = checks
        return schema.write_run(path, info, kernels, extra_files=extra)
