"""`ssmprof profile`: run the harness with the collectors and write one run directory (the data contract).

Order: the timeline run in this process (it also gives the harness numbers), then Nsight Compute on the
same iteration in a child process (two passes in sampled mode where one launch configuration holds several
problems, see `ncu`), the join (`counters`), and the self-checks of every launch's counters
(`analysis.trust.counter_checks`, recorded in run.json `checks`); the run directory is written only when all succeeded.

Counter modes: `sampled` (no pass profiles the functions under `counters.PASS_1_MIN_SHARE` of the kernel
time: not collected), `all`, `none`, and `focus`: sampled's first pass on the kernels the timeline
shows matter (`counters.focus_kernels`: the fused SSM kernels and the longest others) and no second pass;
the other launches keep no counters (`not collected`), and coverage says how much time that leaves out.
A sweep of twenty points pays that instead of twenty full samplings."""

from __future__ import annotations

import datetime as dt
import gc
import os
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
import torch

from ssmprof import schema
from ssmprof.errors import InvalidConfig, NoGpu
from ssmprof.kernels import is_fused_kernel
from ssmprof.profiler import autotune
from ssmprof.profiler.counter_cost import PlanCost, PlannedPass, plan_message, predict_plan
from ssmprof.profiler.counters import (
    FAMILY_BINS,
    PASS_1_MIN_SHARE,
    REPLAY_CHOICES,
    NcuPass,
    SamplingPlan,
    attach_counters,
    attach_stalls,
    available_metrics,
    check_same_work,
    child_command,
    focus_kernels,
    pass_seconds,
    replay_mode,
    replay_through_host,
    stall_targets,
)
from ssmprof.profiler.environment import run_sections
from ssmprof.profiler.harness import Prepared, Progress, RunResult, run_training
from ssmprof.profiler.markers import NvtxMarker
from ssmprof.profiler.ncu_argv import (
    CACHE_CONTROL,
    FLUSH,
    METRIC_GROUPS,
    NOT_ASKED,
    check_metrics,
    chip_for,
    column_metrics,
    counter_metrics,
)
from ssmprof.profiler.ncu_extract import read_report
from ssmprof.profiler.timeline import TimelineCapture
from ssmprof.schema import duration_words

COUNTER_MODES = ("sampled", "all", "focus", "none")  # what each takes: the module docstring
NAME_MAX = 255  # bytes of one file or folder name on Linux file systems (ext4, xfs, NFS)


def check_counters_mode(counters: str) -> None:
    if counters not in COUNTER_MODES:
        raise InvalidConfig(f"--counters must be {', '.join(COUNTER_MODES[:-1])} or {COUNTER_MODES[-1]}, "
                            f"got '{counters}'")


@dataclass(frozen=True)
class ProfileSettings:
    """What one profile measures and keeps, as `ssmprof profile` is asked: timed `steps`, the `counters` mode,
    Nsight Compute's `replay` (`counters.replay_mode`), the seconds a pass may take, the ranks it profiles in a
    --tp/--dp run, the identical GPUs the passes of a single-GPU run spread over (`identical_gpus`), whether the
    step is also timed as a CUDA graph, the run whose Triton autotuning choices to pin (`autotune_from`), and the
    run directory: `name` (default workload-preset-time) under `out`, with the raw reports where `keep_report`;
    `budget_s`: the seconds the counter passes may take (`choose_plan`). Checked as it is built, so a bad mode or
    budget is one line before any work."""

    out: Path = Path("runs")
    steps: int = 10
    counters: str = "sampled"
    replay: str = "auto"
    ncu_cache: str = FLUSH
    ncu_timeout_s: float = 1800
    ncu_ranks: tuple[int, ...] = (0,)
    pass_gpus: int = 0  # all identical GPUs (`identical_gpus`)
    cuda_graphs: bool = False
    keep_report: bool = False
    name: str | None = None
    autotune_from: Path | None = None
    budget_s: float | None = None

    def __post_init__(self) -> None:
        check_counters_mode(self.counters)
        if self.budget_s is not None and self.counters == "none":
            raise InvalidConfig("--budget bounds the counter passes' time: it needs --counters sampled, all or focus")
        smallest = predict_plan([PlannedPass("counters", 1)], 0.0, 1.0).total_s if self.budget_s is not None else 0
        if self.budget_s is not None and self.budget_s < smallest:
            raise InvalidConfig(f"--budget {self.budget_s:g} s is too small for any counter plan: the smallest (one "
                                f"pass profiling one launch) costs about {duration_words(smallest)}")
        self.pinned_choices  # noqa: B018 - read (and refused where bad) before any work
        if self.ncu_cache not in CACHE_CONTROL:
            raise InvalidConfig(f"--ncu-cache must be {' or '.join(CACHE_CONTROL)}, got '{self.ncu_cache}'")
        if self.replay not in REPLAY_CHOICES:
            raise InvalidConfig(f"--replay must be {', '.join(REPLAY_CHOICES[:-1])} or {REPLAY_CHOICES[-1]}, "
                                f"got '{self.replay}'")
        # a --tp/--dp job checks its steps only inside its ranks, seconds after they start
        if self.steps < 1:
            raise InvalidConfig(f"--steps must be >= 1, got {self.steps}")
        if self.ncu_timeout_s <= 0 or self.pass_gpus < 0:
            raise InvalidConfig(f"--ncu-timeout must be > 0 and --pass-gpus >= 0 (0: all), got "
                                f"{self.ncu_timeout_s:g} and {self.pass_gpus}")
        # the run directory is `out`/`name`: a name with a folder in it would write outside `out`
        if self.name is not None and (Path(self.name).name != self.name or self.name in ("", ".", "..")):
            raise InvalidConfig(f"--name must be a folder name, not a path, got '{self.name}'")
        if self.name is not None and len(self.name.encode()) > NAME_MAX:  # refused now, not after the profile
            raise InvalidConfig(f"--name must be at most {NAME_MAX} bytes (a folder name), got "
                                f"{len(self.name.encode())}")

    @cached_property
    def pinned_choices(self) -> dict[str, list] | None:
        """The Triton autotuning choices of the run `autotune_from` (None without one), read once. Each process
        autotunes anew on noisy timings and may pick other tiles, so two runs meant to launch the same kernels (a
        script against its workload, one model on two branches) pin one run's choices; shapes that run never
        tuned are left to autotune."""
        if self.autotune_from is None:
            return None
        choices = schema.read_run_info(self.autotune_from).triton_autotune
        if not choices:
            raise InvalidConfig(f"--autotune-from {self.autotune_from}: the run records no Triton autotuning "
                                "choices (profiled without Triton kernels, or before they were recorded)")
        return choices


def coverage(kernels: pd.DataFrame) -> dict:
    """How much of the iteration's kernel time the collectors account for. The counters' share is of the kernel
    time counters can describe (`schema.countable`: the TP=4 straggler's rank 0 has 74 % of its kernel time in
    collectives, its compute 98 % checked)."""
    total = kernels["duration_ns"].sum()
    phased = kernels.loc[kernels["phase"] != "other", "duration_ns"].sum()
    work = schema.countable(kernels)
    countable = work["duration_ns"].sum()
    countered = work.loc[work["ncu_duration_ns"].notna(), "duration_ns"].sum()
    return {
        "launches": len(kernels),
        "kernel_time_ns": int(total),
        "phase_time_fraction": float(phased / total) if total else 0.0,
        "counter_time_fraction": float(countered / countable) if countable else 0.0,
    }


def run_info(result: RunResult, overrides: dict, collectors: dict, kernels: pd.DataFrame, triton_choices: dict,
             checks: dict | None = None, parallel: dict | None = None) -> schema.RunInfo:
    """run.json of a profiled run, typed: the harness result, the run's environment (`environment.run_sections`),
    the collectors' notes, the counter self-checks' summary and (multi-rank runs) the split."""
    return schema.new_run_info({
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "workload": {"name": result.workload, "preset": result.preset, "config": result.config,
                     "overrides": overrides, **({"source": result.workload_source} if result.workload_source else {})},
        **run_sections(result.gpu),
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
            "profiled_ms": result.profiled_ms,
            **({"cuda_graphs": {"step_ms": result.graphed_step_ms, "step_times_ms": result.graphed_step_times_ms}}
               if result.graphed_step_times_ms else {}),
            **({"sync_sites": result.sync_sites} if result.sync_sites is not None else {}),
            **({"host_time": result.host_time} if result.host_time is not None else {}),
            **({"steps_capped": True} if result.steps_capped else {}),
            **({"process": result.process} if result.process is not None else {}),
        },
        "gpu_sharing": result.gpu_sharing,
        "collectors": collectors,
        "coverage": coverage(kernels),
        **({"checks": checks} if checks is not None else {}),
        **({"parallel": parallel} if parallel is not None else {}),
    })


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
# They are pure analyses (`analysis.trust.counter_checks`); the pipeline hands them in, so the profiler imports no
# analysis.
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


def _pass_progress(tell: Callable[[str, int, int], None], label: str, total: int) -> Callable[[int], None]:
    """`tell` for one pass: its label and launch count fixed, given the launches profiled so far."""
    return lambda done: tell(label, done, total)


# (metric group, ncu mode, targeted invocations, function names asked for by name or None): one counter pass
PassSpec = tuple[str, str, dict[str, list[int]] | None, list[str] | None]


@dataclass(frozen=True)
class CounterPlan:
    """The passes a profile runs (`passes`), the sampling plan they follow, their predicted cost, and what a
    budget made it leave out (`left_out`, words; empty without a budget or where the whole plan fits)."""

    plan: SamplingPlan
    passes: list[PassSpec]
    cost: PlanCost
    left_out: str = ""


def _counter_passes(kernels: pd.DataFrame, counters: str, plan: SamplingPlan, stalls: bool) -> list[PassSpec]:
    """The passes of mode `counters`: the counters of every launch configuration (by configuration: all but the
    minor functions and the binned ones; of the focus kernels only in focus mode), of each further problem and
    grid bin, then (`stalls`) the warp stalls of the kernels that hold the time."""
    names = plan.by_configuration if counters != "all" else None
    passes: list[PassSpec] = []
    if counters == "all" or names:
        passes.append(("counters", "all" if counters == "all" else "sampled", None, names))
    if counters != "all":
        passes += [("counters", "sampled", targets, plan.functions) for targets in plan.target_passes]
    if stalls:
        passes.append(("stalls", "sampled", stall_targets(kernels, is_fused_kernel), None))
    return passes


def _predict(kernels: pd.DataFrame, plan: SamplingPlan, passes: list[PassSpec], held_gib: float,
             gpu_gib: float, lanes: int, parallel_job: bool) -> PlanCost:
    planned = [PlannedPass(group, len(plan.expected(kernels, mode, targets, names if group == "counters" else None)))
               for group, mode, targets, names in passes]
    return predict_plan(planned, held_gib, gpu_gib, lanes, len(kernels), parallel_job)


# What a budget gives up, in order, until the plan fits: the warp-stall pass, then the held-out grid of each binned
# family (two grids, the smallest and the largest, lend to the rest unchecked), then the functions holding the least
# kernel time (never the SSM kernels), at these shares of the kernel time each.
BUDGET_FUNCTION_SHARES = (PASS_1_MIN_SHARE, 0.002, 0.005, 0.01, 0.02, 0.05)
BUDGET_CHOICES = ((FAMILY_BINS, True), (FAMILY_BINS, False), (2, False))  # (grid bins, warp-stall pass)


def choose_plan(kernels: pd.DataFrame, counters: str, held_bytes: float, gpu_memory_bytes: float, lanes: int = 1,
                budget_s: float | None = None, parallel_job: bool = False) -> CounterPlan:
    """The counter plan of mode `counters` for the timeline `kernels`, and its predicted cost
    (`counter_cost.predict_plan`; `parallel_job`: each pass launches a parallel run's whole job). With `budget_s`:
    the plan that checks the most kernel time within it, giving up first the warp stalls, then each family's
    held-out grid, then the functions of least time (BUDGET_FUNCTION_SHARES); none fitting is one line
    (InvalidConfig) naming the smallest plan's cost."""
    focus = focus_kernels(kernels) if counters == "focus" else None
    held_gib, gpu_gib = held_bytes / 2**30, gpu_memory_bytes / 2**30
    stalls = counters != "focus"
    plan = SamplingPlan.of(kernels, only=focus)
    passes = _counter_passes(kernels, counters, plan, stalls)
    cost = _predict(kernels, plan, passes, held_gib, gpu_gib, lanes, parallel_job)
    if budget_s is None or cost.total_s <= budget_s or counters == "all":
        return CounterPlan(plan, passes, cost)
    total = max(kernels["duration_ns"].sum(), 1)

    def reduced(share: float, bins: int, with_stalls: bool) -> CounterPlan:
        """The plan at function share `share`, `bins` grid bins, with the stall pass or not, saying what it gave up."""
        plan = SamplingPlan.of(kernels, function_share=share, only=focus, bins=bins)
        passes = _counter_passes(kernels, counters, plan, with_stalls and stalls)
        dropped = kernels.loc[plan.minor.to_numpy(), "duration_ns"].sum() / total
        given_up = [what for what, gone in (
            ("the warp-stall pass", stalls and not with_stalls),
            ("the held-out grid of each family (its lending unchecked)", bins < FAMILY_BINS),
            (f"the functions under {100 * share:g} % of the kernel time each ({100 * dropped:.1f} % of it)",
             share > PASS_1_MIN_SHARE)) if gone]
        return CounterPlan(plan, passes, _predict(kernels, plan, passes, held_gib, gpu_gib, lanes, parallel_job),
                           "; ".join(given_up))

    # richest first; the last is the smallest, tried first so that a hopeless budget costs one plan, not them all
    choices = [(share, bins, with_stalls) for share in BUDGET_FUNCTION_SHARES for bins, with_stalls in BUDGET_CHOICES]
    smallest = reduced(*choices[-1])
    if smallest.cost.total_s > budget_s:
        raise InvalidConfig(f"--budget {budget_s:g} s is too small for any counter plan of this run: the smallest "
                            f"costs about {duration_words(smallest.cost.total_s)} ({plan_message(smallest.cost)}); "
                            "raise it, or use --counters focus or none")
    tried = (reduced(*choice) for choice in choices[:-1])
    return next((chosen for chosen in tried if chosen.cost.total_s <= budget_s), smallest)


def collect_counters(kernels: pd.DataFrame, counters: str, gpu: dict, scratch: Path, start_pass: StartPass,
                     check: CounterCheck, tell: Callable[[str, int, int], None], held_bytes: float,
                     lanes: int = 1, replay: str = "kernel", budget_s: float | None = None,
                     parallel_job: bool = False) -> tuple[pd.DataFrame, dict, dict, list[Path]]:
    """Counters for the timeline `kernels` in mode `counters` (sampled, all, focus): the passes (`choose_plan`,
    within `budget_s` where given), the join, the self-checks. Returns (the joined, checked table; run.json's
    counter collector notes, with the plan's predicted cost beside the measured; its `checks`; the pass reports,
    under `scratch`). Every metric is checked against ncu's list for the chip first. On one GPU (`lanes` 1) each
    pass after the first is started while the one before it replays (`counters.NcuPass`); with `lanes` identical
    GPUs, that many passes replay at once (`start_pass` puts each on its GPU). `held_bytes`: the peak of live
    tensors in the iteration; where replay will save it through the host, each pass's progress says so.
    `replay`: the replay `start_pass` gives its passes (`counters.replay_mode`). `parallel_job`: the passes are a
    parallel run's (`distributed.RankPasses`), each launching the whole job at its turn, never ahead: predicted so
    (`counter_cost.predict_plan`)."""
    chip = chip_for(gpu["compute_capability"])
    metrics = {group: counter_metrics(chip, group) for group in METRIC_GROUPS}
    check_metrics([m for group in metrics.values() for m in group], available_metrics(chip), chip)
    chosen = choose_plan(kernels, counters, held_bytes, gpu["memory_bytes"], lanes, budget_s, parallel_job)
    plan = chosen.plan
    focus = plan.functions if counters == "focus" else None
    planned = [(group, mode, targets, names if group == "counters" else None, scratch / f"{group}-{number}.ncu-rep")
               for number, (group, mode, targets, names) in enumerate(chosen.passes, start=1)]
    reports: dict[str, list[tuple[pd.DataFrame, pd.Index]]] = {group: [] for group in METRIC_GROUPS}
    walls, replays = [], []
    through_host = replay == "kernel" and replay_through_host(held_bytes, gpu["memory_bytes"])
    slow = f", replay through the host: {held_bytes / 2**30:.0f} of {gpu['memory_bytes'] / 2**30:.0f} GiB held" \
        if through_host else ", application replay: the child runs once per metric pass" \
        if replay == "application" else ""

    # with one GPU a pass is started ahead of its turn (preparing beside the one replaying); with `lanes` GPUs,
    # `lanes` passes replay at once, each on its own GPU, and the next starts when the first of them ends
    window = 2 if lanes == 1 else lanes
    started: deque[StartedPass] = deque()

    began = time.perf_counter()
    for number, (group, mode, targets, only, path) in enumerate(planned, start=1):
        while len(started) < window and number + len(started) <= len(planned):
            later, later_mode, later_targets, later_only, later_path = planned[number + len(started) - 1]
            started.append(start_pass(later_path, later_mode, metrics[later], later_targets, later_only,
                                      lanes == 1 and number + len(started) > 1))
        expected = plan.expected(kernels, mode, targets, only)
        label = (f"{'warp stalls' if group == 'stalls' else 'counters'} (ncu pass {number} of {len(planned)}, "
                 f"predicted {duration_words(chosen.cost.pass_seconds[number - 1])} of "
                 f"{duration_words(chosen.cost.total_s)}{slow})")
        current = started.popleft()
        try:  # passes waiting for a turn that will not come are stopped, not left behind
            walls.append(current.finish(_pass_progress(tell, label, len(expected))))
            rows = read_report(path, chip, group)
        except BaseException:
            for waiting in started:
                waiting.cancel()
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
    wall = sum(walls) if lanes == 1 else time.perf_counter() - began  # passes side by side: the span of them all
    notes = {"tool": "ncu", "chip": chip, "pass_gpus": lanes, "wall_s": wall, "pass_wall_s": walls,
             "pass_replay": replays, "predicted_s": chosen.cost.total_s,
             "pass_predicted_s": chosen.cost.pass_seconds, "budget_s": budget_s, "left_out": chosen.left_out,
             "replay_through_host": through_host, "replay_mode": replay, **notes,
             "metrics": metrics["counters"], "stall_metrics": metrics["stalls"],
             "columns_not_collected": {c: NOT_ASKED.get(c, f"not on {chip}") for group in METRIC_GROUPS
                                       for c, m in column_metrics(chip, group).items() if m is None}}
    return kernels, notes, checks, [path for *_, path in planned]


class ChildPass:
    """One Nsight Compute pass over the child (`profiler.ncu_child`), on the GPU `device` names (None: the one this
    process sees), its timings and work read back once it ends."""

    def __init__(self, child: list[str], report: Path, mode: str, metrics: list[str], targets, names,
                 ahead: bool, device: str | None, replay: str = "kernel", cache: str = FLUSH):
        self.record = report.with_suffix(".timings.json")
        env = {"CUDA_VISIBLE_DEVICES": device} if device is not None else {}
        self.ncu = NcuPass([*child, "--timings", str(self.record)], report, mode, metrics, targets, names, ahead,
                           env=env, replay=replay, cache=cache)

    def finish(self, timeout_s: float, on_kernel) -> tuple[float, schema.PassRecord]:
        """(the wall time the pass added, what its child wrote)."""
        wall = self.ncu.finish(timeout_s, on_kernel)
        return wall, schema.read_document(schema.PassRecord, self.record)


class ChildPasses:
    """The passes of one single-process profile, started as `collect_counters` asks (`start`, a `StartPass`):
    the k-th on the k-th of `devices` in turn (CUDA_VISIBLE_DEVICES), or all on this process's GPU where
    `devices` is empty, with Nsight Compute's `replay`. Keeps each pass's stages (`pass_seconds`) and work
    (`ncu_child.pass_work`)."""

    def __init__(self, child: list[str], timeout_s: float, devices: list[str], replay: str = "kernel",
                 cache: str = FLUSH):
        self.child, self.timeout_s, self.devices, self.replay, self.cache = child, timeout_s, devices, replay, cache
        self.started = 0
        self.phases: list[dict] = []
        self.works: list[dict] = []

    def start(self, report: Path, mode: str, metrics: list[str], targets, names, ahead: bool) -> StartedPass:
        device = self.devices[self.started % len(self.devices)] if self.devices else None
        self.started += 1
        return _Started(self, ChildPass(self.child, report, mode, metrics, targets, names, ahead, device,
                                        self.replay, self.cache))


@dataclass
class _Started:
    """A started `ChildPass` as `collect_counters` drives it (`StartedPass`)."""

    passes: ChildPasses
    child: ChildPass

    def finish(self, on_kernel) -> float:
        wall, record = self.child.finish(self.passes.timeout_s, on_kernel)
        self.passes.phases.append(pass_seconds(self.child.ncu.launched, self.child.ncu.ended, record.stamps))
        self.passes.works.append(record.work)
        return wall

    def cancel(self) -> None:
        self.child.ncu.cancel()


def identical_gpus(count: int) -> list[str]:
    """The GPUs work is spread over (counter passes, sweep shards): none (all on this process's GPU) for `count`
    1; otherwise the first `count` visible GPUs (0: all) of the same model as the first, as CUDA_VISIBLE_DEVICES
    names them. Passes join, and sweep points compare, only on the same hardware, so other models are left out."""
    if count == 1:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = visible.split(",") if visible else [str(index) for index in range(torch.cuda.device_count())]
    same = [name for index, name in enumerate(names)
            if torch.cuda.get_device_name(index) == torch.cuda.get_device_name(0)]
    return same[:count] if count > 0 else same


def profile_run(ready: Prepared, settings: ProfileSettings, progress: Progress | None = None, *,
                check: CounterCheck, steady: Callable[[list[float]], bool] | None = None) -> Path:
    """Profile one training iteration of `ready` (timeline, then Nsight Compute counters unless
    `settings.counters` is "none") and write its run directory as `settings` says; returns its path. Nothing is
    written if a collector fails. `steady`: the rule that says the timed steps pin their median down
    (`harness.run_training`)."""
    if ready.plan.device != "cuda":
        raise NoGpu("profiling characterizes GPU kernels: it needs a CUDA GPU (`ssmprof run --device cpu` "
                    "exercises the CPU reference path)")
    tell = progress or (lambda stage, done, total: None)
    pinned = settings.pinned_choices
    if pinned:
        autotune.pin(pinned)
    capture = TimelineCapture(cuda=True)
    with tempfile.TemporaryDirectory() as scratch:
        # a model that routes tokens by its weights is profiled on the weights its traced iteration ran
        state = Path(scratch) / "state.pt" if settings.counters != "none" and \
            ready.workload.routes_tokens(ready.cfg) else None
        started = time.perf_counter()
        result = run_training(ready.workload, ready.preset, ready.cfg, ready.plan, settings.steps, ready.warmup,
                              NvtxMarker(), progress, capture=capture, timing=capture.record_timing,
                              cuda_graphs=settings.cuda_graphs, find_syncs=True, sample_host=True, steady=steady,
                              save_state=state)
        timed, timing = capture.table()
        kernels = schema.conform_kernels(timed)
        triton_choices = autotune.snapshot()
        collectors: dict[str, dict[str, Any]] = {
            "harness": {"wall_s": time.perf_counter() - started, "host_launch_us": host_launch_us(),
                        **({"autotune_from": str(settings.autotune_from)} if pinned else {})},
            "timeline": {"tool": "torch.profiler", "wall_s": capture.wall_s, "timing": timing or None},
            "counters": {"mode": settings.counters, "cache": settings.ncu_cache},
        }
        # The child needs the GPU memory this process used for the model.
        gc.collect()
        torch.cuda.empty_cache()
        extra: dict[str, Path] = {}
        checks: dict[str, Any] = {}
        if settings.keep_report:  # the raw inputs of the join, for inspection and as test fixtures
            extra["trace.json.gz"] = Path(scratch) / "trace.json.gz"
            schema.write_trace(capture.trace, extra["trace.json.gz"])
        if settings.counters != "none":
            chosen = replay_mode(settings.replay, result.peak_memory_bytes, result.gpu["memory_bytes"])
            choices_path = schema.write_autotune_pins(triton_choices, Path(scratch))
            child = child_command(ready.workload.spec, ready.preset, ready.overrides, ready.warmup,
                                  ready.allow_fallback, choices_path, state_file=state)
            passes = ChildPasses(child, settings.ncu_timeout_s, identical_gpus(settings.pass_gpus), chosen,
                                 settings.ncu_cache)
            kernels, notes, checks, reports = collect_counters(kernels, settings.counters, result.gpu,
                                                               Path(scratch), passes.start, check, tell,
                                                               result.peak_memory_bytes or 0,
                                                               lanes=len(passes.devices) or 1, replay=chosen,
                                                               budget_s=settings.budget_s)
            notes["pass_work"] = check_same_work(passes.works)
            notes["traced_weights"] = state is not None
            collectors["counters"].update(notes, pass_seconds=passes.phases)
            if settings.keep_report:
                extra.update({report.name: report for report in reports})
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = Path(settings.out) / (settings.name or f"{ready.workload.name}-{ready.preset}-{stamp}")
        info = run_info(result, ready.overrides, collectors, kernels, triton_choices, checks)
        return schema.write_run(path, info, kernels, extra_files=extra)
