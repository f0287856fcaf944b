"""run, profile, suite and calibrate: from a workload name and options to measurements (a training result,
run directories, a device profile). Everything that needs torch, and for all but `train`, a CUDA GPU."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ssmprof.analysis.trust.counter_checks import check_counters
from ssmprof.analysis.trust.noise import steady
from ssmprof.errors import InvalidConfig, NoGpu, SsmprofError
from ssmprof.hardware import DEVICE_PROFILE, datasheet_peaks, identity_note, spec_for
from ssmprof.kernels import KernelPlan, plan_kernels
from ssmprof.pipeline import reporting
from ssmprof.pipeline.history import check_history
from ssmprof.pipeline.outputs import check_file, check_folder, write_text
from ssmprof.profiler.distributed import Launch
from ssmprof.profiler.harness import (
    CaptureRefused,
    Prepared,
    Progress,
    RunResult,
    capture_refusal,
    resolve_device,
    run_training,
)
from ssmprof.profiler.markers import NvtxMarker
from ssmprof.profiler.profile_run import ProfileSettings, check_counters_mode, identical_gpus
from ssmprof.schema import SUITE_MANIFEST, DeviceProfile, RankJob, SuiteManifest, make_document, write_document
from ssmprof.workloads.base import CommonConfig, Workload, training_step_flops
from ssmprof.workloads.registry import SUITE, get_workload

# Untimed iterations before the timed ones where `--warmup` is not given (Triton compiles and autotunes in
# them: see `profiler.harness`); profile and suite share it, so a suite run is a profile run.
WARMUP = {"cuda": 3, "cpu": 1}


@dataclass(frozen=True)
class WorkloadOptions:
    """A workload as the command line names it: preset, overrides (named and `--set KEY=VALUE`), warm-up."""

    workload: str
    preset: str = "small"
    warmup: int | None = None  # None: WARMUP of the device
    batch_size: int | None = None
    seq_len: int | None = None
    layers: int | None = None
    dtype: str | None = None
    sets: list[str] = field(default_factory=list)
    allow_fallback: bool = False
    tp: int = 1  # tensor-parallel ranks (`workloads.parallel`)
    dp: int = 1  # data-parallel replicas
    sequence_parallel: bool = True

    def parallelism(self):
        from ssmprof.workloads.parallel import Parallelism

        return Parallelism(self.tp, self.dp, self.sequence_parallel)


@dataclass(frozen=True)
class ProfileRequest:
    """`ssmprof profile` as one value: the workload, what to measure and keep (`profile_run.ProfileSettings`, which
    the profiler takes whole), the device, this node's part of a --tp/--dp job and the HTML report. Built once,
    from the command line or by `suite` and `sweep` for each of their runs, and passed down whole. Each part
    checks itself as it is built, so bad input is one line before any work; what needs the workload registry is
    checked by `prepare`, still before any training."""

    workload: WorkloadOptions
    settings: ProfileSettings = ProfileSettings()
    device: str = "auto"
    launch: Launch = Launch()
    report_file: Path | None = None
    history: Path | None = None  # appended to after the run (`history.append`); checked here with the outputs

    def __post_init__(self) -> None:
        if self.settings.autotune_from is not None and self.workload.parallelism().distributed:
            raise InvalidConfig("--autotune-from pins one process's Triton choices: --tp/--dp ranks autotune "
                                "their own shapes")


def parse_sets(pairs: list[str]) -> dict[str, str]:
    """`--set KEY=VALUE` pairs as a dict; a key given twice is refused, since which value ran would otherwise
    depend on the order of the flags and the run would not say so."""
    parsed: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidConfig(f"--set expects KEY=VALUE, got '{pair}'")
        if key in parsed and parsed[key] != value:
            raise InvalidConfig(f"--set {key} is given twice ({parsed[key]} and {value}): give it once")
        parsed[key] = value
    return parsed


def prepare(options: WorkloadOptions, device: str = "auto", nodes: int = 1) -> Prepared:
    """The workload of `options` configured for `device` (auto, cuda or cpu), its kernels planned; a parallel
    run's ranks spread over `nodes` hosts alike, this one holding its share."""
    overrides: dict[str, Any] = parse_sets(options.sets)  # a malformed --set refused before a workload is imported
    chosen = get_workload(options.workload)
    named = {"batch_size": options.batch_size, "seq_len": options.seq_len, "layers": options.layers,
             "dtype": options.dtype}
    overrides.update({k: v for k, v in named.items() if v is not None})
    cfg = chosen.config(options.preset, overrides)
    target = resolve_device(device)
    if options.parallelism().distributed:
        _check_parallel(chosen, cfg, options, target, nodes)
    plan = plan_kernels(chosen.kernel_ops(cfg), target, options.allow_fallback, cfg.dtype)
    if target == "cpu":
        _check_cpu_size(chosen, cfg, plan)
    warmup = WARMUP[target] if options.warmup is None else options.warmup
    return Prepared(chosen, options.preset, cfg, plan, overrides, warmup, options.allow_fallback)


def _check_parallel(workload: Workload, cfg: CommonConfig, options: WorkloadOptions, device: str,
                    nodes: int = 1) -> None:
    """A tensor/data-parallel run the model, the shapes and this host allow, refused in one line otherwise."""
    from ssmprof.profiler.distributed import check_devices

    if not hasattr(workload, "validate_parallel"):
        raise InvalidConfig(f"{workload.name} has no tensor-parallel model (--tp/--dp): the language models "
                            "(mamba2-lm, hybrid, mamba1-lm, transformer) have")
    workload.validate_parallel(cfg, options.parallelism())
    check_devices(device, options.tp * options.dp // max(nodes, 1))


def rank_job(ready: Prepared, options: WorkloadOptions, steps: int, mode: str, cuda_graphs: bool = False):
    """The job every rank of a parallel run runs (`profiler.distributed`); `cuda_graphs`: each rank also captures
    its step, collectives inside, as one CUDA graph and times its replays."""
    return make_document(RankJob, workload=ready.workload.spec, preset=ready.preset, overrides=ready.overrides,
                         warmup=ready.warmup, steps=steps, tp=options.tp, dp=options.dp,
                         sequence_parallel=options.parallelism().sequence_parallel, device=ready.plan.device,
                         mode=mode, scratch="", allow_fallback=options.allow_fallback, cuda_graphs=cuda_graphs)


def check_capture(ready: Prepared, cuda_graphs: bool) -> None:
    """Refuse `--cuda-graphs` in one line, before any rank or step starts, where the step cannot be captured
    (`harness.capture_refusal`: on the CPU, or a workload whose shapes change): a --tp/--dp job would otherwise
    start its ranks and fail in each of them, after building the model."""
    refusal = capture_refusal(ready.workload, ready.plan) if cuda_graphs else None
    if refusal:
        raise CaptureRefused(refusal)


def parallel_numerics(options: WorkloadOptions, device: str = "auto") -> pd.DataFrame:
    """The --tp/--dp model's loss and gradients against the single-GPU model's on a fixed batch, one row per rank
    (`workloads.parallel.numerics`: the gradients' largest relative error and the single model's own repeat
    spread), with the relative loss difference."""
    from ssmprof.profiler.distributed import check_numerics

    ready = prepare(options, device)
    if not options.parallelism().distributed:
        raise InvalidConfig("the numerics check compares a --tp/--dp model with the single-GPU one: give --tp or --dp")
    table = pd.DataFrame(check_numerics(rank_job(ready, options, 0, "numerics")))
    loss_diff = (table["parallel_loss"] - table["single_loss"]).abs()
    return table.assign(loss_rel_diff=loss_diff / table["single_loss"].abs())


# The CPU runs mamba-ssm's pure-PyTorch reference kernels, which loop in Python: graph-mamba small (6e10
# FLOPs a step) did not finish 3 steps in 300 s on a 2-core machine, while every tiny preset (under 2e8)
# trains in seconds. Past this, a CPU run is refused before it starts.
CPU_STEP_FLOPS_LIMIT = 1e10


def _check_cpu_size(workload: Workload, cfg: CommonConfig, plan: KernelPlan) -> None:
    flops = training_step_flops(workload, cfg, plan)
    if flops > CPU_STEP_FLOPS_LIMIT:
        raise InvalidConfig(f"{workload.name} with these settings does about {flops / 1e9:,.0f} GFLOP per training "
                            "step: on the CPU (reference kernels) that takes minutes or more; use --preset tiny, "
                            "smaller --batch-size/--seq-len/--layers, or a GPU")


def train(options: WorkloadOptions, device: str = "auto", steps: int = 10, json_out: Path | None = None,
          progress: Progress | None = None, cuda_graphs: bool = False) -> RunResult:
    """`ssmprof run`: a few training iterations, timed (no collectors); also written as JSON to `json_out`. With
    `cuda_graphs`, the step is also captured as a CUDA graph and its replays timed (`harness.time_graphed_steps`);
    under --tp/--dp on GPUs every rank captures its step with its NCCL collectives inside, and each replay counts as
    long as its slowest rank (`distributed.merged_result`), as the eager steps do."""
    check_file(json_out, "--json")
    ready = prepare(options, device)
    check_capture(ready, cuda_graphs)
    parallel = None
    if options.parallelism().distributed:
        from ssmprof.profiler.distributed import train_parallel

        result, parallel = train_parallel(rank_job(ready, options, steps, "train", cuda_graphs))
    else:
        result = run_training(ready.workload, ready.preset, ready.cfg, ready.plan, steps, ready.warmup, NvtxMarker(),
                              progress, cuda_graphs=cuda_graphs)
    if json_out is not None:
        extra = {"parallel": parallel} if parallel else {}
        write_text(json_out, json.dumps({**result.to_dict(), **extra}, indent=2))
    return result


def profile(request: ProfileRequest, progress: Progress | None = None) -> Path | None:
    """`ssmprof profile`: one run directory under `request.settings.out` (and its HTML report, where
    `request.report_file` is given). With --tp/--dp: a torchrun job (`request.launch`: this node's part of it),
    every rank's timeline, counters from the ranks `settings.ncu_ranks`, one merged run (on the CPU too, over gloo
    and without counters: the reference path the tests record), written by node 0 (None on the other nodes).
    Single-GPU: `profiler.profile_run.profile_run`, its counter passes spread over `settings.pass_gpus` identical GPUs
    of the host (0: all), with Nsight Compute's `settings.replay` (`counters.replay_mode`: auto takes
    application replay where the process holds more than half the GPU); `settings.cuda_graphs` also times the
    step captured as a CUDA graph (run.json's `harness.cuda_graphs`, on --tp/--dp each replay's slowest rank; the
    profiled iteration stays eager)."""
    from ssmprof.profiler.profile_run import profile_run

    options, settings = request.workload, request.settings
    check_folder(settings.out, "--out")
    check_file(request.report_file, "--report")
    check_history(request.history)
    ready = prepare(options, request.device, request.launch.nnodes)
    if options.parallelism().distributed:
        from ssmprof.profiler.distributed import profile_parallel

        check_capture(ready, settings.cuda_graphs)
        job = rank_job(ready, options, settings.steps, "timeline", settings.cuda_graphs)
        path = profile_parallel(job, settings, check_run_counters, where=request.launch)
    else:
        path = profile_run(ready, settings, progress, check=check_run_counters, steady=steady)
    if request.report_file is not None and path is not None:
        reporting.report_runs([path], "html", request.report_file)
    return path


def profile_script(script: Path, args: list[str], settings: ProfileSettings, device: str = "auto",
                   warmup: int | None = None, report_file: Path | None = None,
                   progress: Progress | None = None, history: Path | None = None) -> Path:
    """`ssmprof profile --script SCRIPT -- ARGS`: the iteration a training script marks with `ssmprof.step()`,
    profiled into one run directory as `profile` does for a workload (`profiler.script`; on the CPU, the timeline
    only), and its HTML report where `report_file` is given. `history`, where the run is appended afterwards, is
    checked with the outputs, before the script runs."""
    from ssmprof.profiler.script import profile_script as profile_marked

    check_folder(settings.out, "--out")
    check_file(report_file, "--report")
    check_history(history)
    target = resolve_device(device)
    path = profile_marked(script, args, settings, target, WARMUP[target] if warmup is None else warmup, progress,
                          check=check_run_counters)
    if report_file is not None:
        reporting.report_runs([path], "html", report_file)
    return path


@dataclass(frozen=True)
class SuiteResult:
    runs: list[Path]
    report: Path
    manifest: Path
    wall_s: float


def suite(out: Path, preset: str = "paper", workloads: list[str] | None = None, counters: str = "sampled",
          steps: int = 5, progress_for: Callable[[str], AbstractContextManager[Progress]] | None = None,
          gpus: int = 1, history: Path | None = None) -> SuiteResult:
    """`ssmprof suite`: `profile` of every workload (or the named ones) with the preset's settings, then one
    combined report (with CSVs) and the suite manifest in `out`. `progress_for(workload)` opens the progress
    reporting of each workload's profile. `gpus` other than 1: that many identical GPUs of the host (0: all)
    profile one workload each at once (`profiles_on_gpus`). `history`, where the runs are appended afterwards, is
    checked with `out`, before any profile."""
    chosen: list[Workload[Any]] = [get_workload(name) for name in workloads] if workloads else list(SUITE)
    check_counters_mode(counters)
    check_folder(out, "--out")
    check_history(history)
    if resolve_device("auto") != "cuda":
        raise NoGpu("the suite profiles GPU kernels: no CUDA GPU is visible")
    opened: Callable[[str], AbstractContextManager[Progress | None]] = \
        progress_for or (lambda name: contextlib.nullcontext(None))
    started, paths = time.perf_counter(), []
    devices = identical_gpus(gpus)
    if len(devices) > 1:
        paths = profiles_on_gpus([w.spec for w in chosen], preset, out, counters, steps, devices)
    for workload in chosen if len(devices) < 2 else []:
        with opened(workload.name) as tell:
            request = ProfileRequest(WorkloadOptions(workload.spec, preset), ProfileSettings(out, steps, counters))
            path = profile(request, tell)
            assert path is not None  # a suite profiles on one node, which writes the run
            paths.append(path)
    report = out / "suite-report.html"
    reporting.report_runs(paths, "html", report, csv=out / "suite-csv")
    wall_s = time.perf_counter() - started
    manifest = make_document(SuiteManifest, preset=preset, counters=counters, steps=steps,
                             workloads=[w.name for w in chosen], runs=[path.name for path in paths], wall_s=wall_s)
    return SuiteResult(paths, report, write_document(manifest, out / SUITE_MANIFEST), wall_s)


def check_run_counters(kernels: pd.DataFrame, gpu_name: str) -> tuple[pd.DataFrame, dict]:
    """`analysis.trust.counter_checks.check_counters` on the datasheet peaks of the run's GPU (`profile_run`'s
    `check`)."""
    return check_counters(kernels, datasheet_peaks(gpu_name))


def profiles_on_gpus(workloads: list[str], preset: str, out: Path, counters: str, steps: int,
                     devices: list[str]) -> list[Path]:
    """Each workload's `ssmprof profile` as a process on one of `devices` (CUDA_VISIBLE_DEVICES), as many at
    once as there are devices, the next started on the GPU that comes free; their run directories, in
    `workloads` order. A failed profile fails the suite once all have ended (its message is above)."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    names = {workload: f"{get_workload(workload).name}-{preset}-{stamp}" for workload in workloads}
    waiting, failed = list(workloads), []
    running: dict[str, tuple] = {}
    while waiting or running:
        for device in [d for d in devices if d not in running][:len(waiting)]:
            workload = waiting.pop(0)
            command = [sys.executable, "-m", "ssmprof.cli", "profile", workload, "--preset", preset, "--out",
                       str(out), "--counters", counters, "--steps", str(steps), "--name", names[workload]]
            running[device] = (workload, subprocess.Popen(command, env={**os.environ, "CUDA_VISIBLE_DEVICES": device}))
        time.sleep(1.0)
        for device, (workload, child) in list(running.items()):
            if child.poll() is not None:
                del running[device]
                failed += [workload] if child.returncode != 0 else []
    if failed:
        raise SsmprofError(f"the profile of {failed[0]} failed (its message is above)")
    return [out / names[workload] for workload in workloads]


@dataclass(frozen=True)
class CalibrationResult:
    profile: DeviceProfile
    checks: pd.DataFrame  # one row per known-work check: expected, measured, error %, passed
    path: Path

    @property
    def failed(self) -> list[str]:
        return self.checks.loc[~self.checks["passed"], "check"].tolist()


def calibrate(out: Path | None = None, ncu_timeout_s: float = 900, keep_report: Path | None = None
              ) -> CalibrationResult:
    """`ssmprof calibrate`: check the counter formulas on kernels of known work, measure this GPU's ceilings,
    and write both as its device profile (`out`, default runs/device-profile.json: beside the run directories
    `profile` writes into runs/, whose reports take their ceilings from it), failed checks included. The profile
    records the GPU as the host has it (name, memory, SMs, clocks and driver as found), and a note where its
    memory is not its datasheet row's (`hardware.identity_note`): a profile applies to runs of its GPU's name."""
    from ssmprof.analysis.trust.calibration import combined_ceilings, counter_ceilings, evaluate, ordered_ceilings
    from ssmprof.profiler.calibrate import KNOWN_WORK, run_calibration
    from ssmprof.profiler.environment import gpu_properties, run_gpu

    check_file(out, "--out")
    check_file(keep_report, "--keep-report")
    measured, timed, ncu_wall = run_calibration(ncu_timeout_s, keep_report)
    counted = counter_ceilings(measured)
    ceilings, set_by = combined_ceilings(counted, timed)
    ceilings, note = ordered_ceilings(ceilings)
    checks = evaluate(measured, KNOWN_WORK)
    gpu = run_gpu(gpu_properties())  # the GPU as the host has it: name, memory, SMs, clocks, driver
    identity = identity_note(gpu["name"], gpu.get("memory_bytes"))
    if identity is not None:
        note = f"{note}; {identity}" if note else identity
    spec = spec_for(gpu["name"])
    datasheet = {"dram_gb_s": spec.dram_tb_s * 1e3, "bf16_tensor_tflops": spec.bf16_tflops,
                 "fp32_tflops": spec.fp32_tflops} if spec else {}
    by_collector = {"nsight_compute": {field: rate for field, (rate, _) in counted.items()},
                    "cuda_events": {field: rate for field, rate in timed.items() if field != "source"}}
    document = make_document(DeviceProfile, gpu=gpu, measured=ceilings, datasheet=datasheet,
                             checks=checks.to_dict("records"), ncu_wall_s=ncu_wall, note=note,
                             set_by=set_by, by_collector=by_collector)
    path = out or Path("runs") / DEVICE_PROFILE
    return CalibrationResult(document, checks, write_document(document, path))
