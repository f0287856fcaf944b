"""`ssmprof profile --script train.py -- ARGS`: a user's own training script, marked with `ssmprof.step()`
(`ssmprof.api`), profiled into the same run directory as a suite workload.

The script runs in a child process (`profiler.script_child`), as `python train.py ARGS` would, once for the
timeline (warm-up, timed and profiled iterations; its kernel table and harness numbers) and, on a GPU, once per
Nsight Compute pass (`profile_run.collect_counters`, the suite's passes and join, over the same command with a
counters job and the timeline's Triton choices pinned). The parent holds no model: its GPU is free for the
passes. On the CPU there are no counters: the run is the timeline's, with the aten ops as rows
(`timeline.cpu_table`). Nothing is written unless every part succeeded.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ssmprof import schema
from ssmprof.errors import InputFileError, ScriptFailed
from ssmprof.profiler.counters import PASS_WARMUP, check_same_work, replay_mode
from ssmprof.profiler.harness import Progress, RunResult
from ssmprof.profiler.profile_run import (
    ChildPasses,
    CounterCheck,
    ProfileSettings,
    collect_counters,
    host_launch_us,
    identical_gpus,
    run_info,
)
from ssmprof.profiler.timeline import TIMING_ITERATIONS
from ssmprof.schema import SCRIPT_PRESET


def script_command(job_file: Path) -> list[str]:
    """The child's argv: the same for the timeline run and every counter pass (each with its own job)."""
    return [sys.executable, "-m", "ssmprof.profiler.script_child", str(job_file)]


def profile_script(script: Path, args: list[str], settings: ProfileSettings, device: str, warmup: int,
                   progress: Progress | None = None, *, check: CounterCheck) -> Path:
    """Profile the iteration `script` marks (run with `args`; `device` cuda or cpu; `warmup` untimed iterations,
    then `settings.steps` timed ones) and write its run directory; returns its path. run.json's workload is the
    script (name: its file name; config: its path and arguments)."""
    if not script.is_file():
        raise InputFileError(f"{script}: no such file: --script takes the path of a Python training script")
    tell = progress or (lambda stage, done, total: None)
    cuda = device == "cuda"
    started = time.perf_counter()
    pinned = settings.pinned_choices
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        pins = str(schema.write_autotune_pins(pinned, scratch)) if pinned else None
        job = schema.make_document(schema.ScriptJob, script=str(script), args=list(args), device=device,
                                   mode="timeline", warmup=warmup, steps=settings.steps,
                                   timing_iterations=TIMING_ITERATIONS if cuda else 0,
                                   sampled_iterations=2 * settings.steps, autotune=pins,
                                   result=str(scratch / "result.json"), table=str(scratch / "timeline.parquet"))
        tell("timeline (the script runs)", 0, 1)
        outcome = _run_timeline(job, scratch)
        tell("timeline (the script runs)", 1, 1)
        if outcome.result is None:
            raise ScriptFailed(f"{script}: the script's process wrote neither a result nor an error")
        result = RunResult(**{f.name: outcome.result[f.name] for f in dataclasses.fields(RunResult)
                              if f.name in outcome.result})
        kernels = schema.conform_kernels(schema.read_frame(Path(job.table)))
        collectors: dict[str, dict[str, Any]] = {
            "harness": {"wall_s": time.perf_counter() - started, "host_launch_us": host_launch_us() if cuda else None,
                        **({"autotune_from": str(settings.autotune_from)} if pinned else {})},
            "timeline": {"tool": "torch.profiler", "wall_s": result.harness_seconds.get("profiled"),
                         "timing": outcome.timing.model_dump() if outcome.timing else None},
            "counters": {"mode": settings.counters if cuda else "none"}}
        checks: dict[str, Any] = {}
        if cuda and settings.counters != "none":
            kernels, notes, checks = _counters(job, outcome, result, kernels, settings, scratch, check, tell)
            collectors["counters"].update(notes)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = Path(settings.out) / (settings.name or f"{script.stem}-{SCRIPT_PRESET}-{stamp}")
        info = run_info(result, {}, collectors, kernels, outcome.triton_autotune, checks)
        return schema.write_run(path, info, kernels)


def _run_timeline(job: schema.ScriptJob, scratch: Path) -> schema.ScriptResult:
    """Run the script for the timeline; its result, or its one line as ScriptFailed. The script's own output
    goes where this process's goes."""
    job_file = schema.write_document(job, scratch / "timeline-job.json")
    code = subprocess.run(script_command(job_file), check=False).returncode
    if not Path(job.result).exists():
        raise ScriptFailed(f"{job.script}: the script's process ended with status {code} and wrote no result "
                           "(killed, or failed in native code: its output is above)")
    outcome = schema.read_document(schema.ScriptResult, Path(job.result))
    if outcome.error is not None:
        raise ScriptFailed(outcome.error)
    return outcome


def _counters(job: schema.ScriptJob, outcome: schema.ScriptResult, result: RunResult, kernels, settings, scratch,
              check, tell):
    """The suite's counter passes over the script (`profile_run.collect_counters`): the same iteration, the
    timeline's Triton choices pinned. Returns (the joined table, run.json's counter notes, its checks)."""
    pins = schema.write_autotune_pins(outcome.triton_autotune, scratch)
    counted = job.model_copy(update={"mode": "counters", "warmup": min(job.warmup, PASS_WARMUP), "steps": 1,
                                     "timing_iterations": 0, "sampled_iterations": 0,
                                     "autotune": str(pins)})
    job_file = schema.write_document(counted, scratch / "counters-job.json")
    chosen = replay_mode(settings.replay, result.peak_memory_bytes, result.gpu["memory_bytes"])
    passes = ChildPasses(script_command(job_file), settings.ncu_timeout_s, identical_gpus(settings.pass_gpus),
                         chosen)
    kernels, notes, checks, _ = collect_counters(kernels, settings.counters, result.gpu, scratch, passes.start,
                                                 check, tell, result.peak_memory_bytes or 0,
                                                 lanes=len(passes.devices) or 1, replay=chosen,
                                                 budget_s=settings.budget_s)
    return kernels, {**notes, "pass_seconds": passes.phases, "pass_work": check_same_work(passes.works)}, checks
