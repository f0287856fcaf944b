"""The process that runs a user's training script for `ssmprof profile --script` (`profiler.script`):

    python -m ssmprof.profiler.script_child JOB [--timings FILE]

JOB is a `schema.ScriptJob`; a `StepDriver` made from it is installed in `ssmprof.api` before the script
starts, so `ssmprof.step()` in the script reaches it (and nothing anywhere else). The timeline run and every
Nsight Compute pass start this same command, with their own job. The script runs as `python train.py ARGS` would
(runpy, `sys.argv` = [script, *args], its folder first on `sys.path`); its iterations are the harness's: the
first `warmup` untimed, the next `steps` timed with CUDA events read once at the end (the host runs ahead, as
`harness.time_steps` does), the next `timing_iterations` (timeline mode on the GPU) inside
`timeline.TimelineCapture.timing_window`, whose kernel times the profiled iteration's table takes, then the profiled
iteration inside cudaProfilerStart/Stop and, in timeline mode, `timeline.TimelineCapture`. Then the script is
stopped: `ProfileDone` (a BaseException, so the script's `except Exception` does not catch it and its
`finally` blocks run) is raised from the end of the profiled `with` block. Timeline mode writes the kernel
table and a `schema.ScriptResult`; counters mode (the same iteration under Nsight Compute) writes the
`--timings` record the counter passes read, as `profiler.ncu_child` does. Any failure is one line naming the
script's file and line.
"""

from __future__ import annotations

import contextlib
import math
import os
import runpy
import sys
import time
from pathlib import Path
from typing import Literal

import torch

from ssmprof import api, schema
from ssmprof.errors import ScriptFailed, SsmprofError
from ssmprof.profiler import autotune
from ssmprof.profiler.counters import GO_ENV
from ssmprof.profiler.environment import gpu_properties, imported_kernels
from ssmprof.profiler.harness import RunResult, _elapsed_ms, _first_line, _now, _sync
from ssmprof.profiler.host_sampler import HostSampler
from ssmprof.profiler.markers import NvtxMarker
from ssmprof.profiler.nvml import SharingMonitor
from ssmprof.profiler.timeline import TimelineCapture, cpu_table
from ssmprof.schema import BACKWARD, FORWARD, OPTIMIZER, PHASES, SCRIPT_PRESET

SSMPROF_DIR = Path(__file__).resolve().parents[1]


class ProfileDone(BaseException):
    """Raised from the end of the last profiled iteration: the script has given what profiling needs."""


class StepDriver:
    """What `ssmprof.step()` does in a profiled script: counts the iterations, marks their phases (hooks on the
    model and optimizer, `torch.autograd.backward` wrapped, or `phase()` by hand), times the timed ones and
    profiles the last ones, as the job says."""

    def __init__(self, job: schema.ScriptJob):
        self.job, self.cuda = job, job.device == "cuda"
        self.marker = NvtxMarker()
        self.capture = TimelineCapture(self.cuda) if job.mode == "timeline" else None
        self.entered = 0  # iterations begun
        self.failed_in: int | None = None  # the iteration an exception left, if one did
        self.open_at: str | None = None  # where the open iteration was entered, None between iterations
        self.current: tuple[str, object] | None = None  # the open phase and its marker token
        self.by_hand = False
        self.hooked: set[int] = set()
        self.items: int | None = None
        self.started = None  # the open iteration's start mark (timed or profiled)
        self.marks: list[tuple] = []
        self.times_ms: list[float] = []
        self.profiled_ms: list[float] = []
        self.table = None
        self.timing: dict | None = None  # the timing pass's summary, once joined (`timeline.timed_table`)
        self.window: contextlib.AbstractContextManager | None = None  # the open timing window
        self.seconds = {"warmup": 0.0, "timed": 0.0, "sampled": 0.0, "timing": 0.0, "profiled": 0.0}
        self.sampler: HostSampler | None = None  # open over the sampled iterations
        self.sharing: SharingMonitor | None = None  # open over the timed iterations (on the GPU)
        self.sampled_marks: list[tuple] = []
        self.host_time: dict | None = None  # run.json `harness.host_time`, once the sampled iterations ran
        self.clock = time.perf_counter()

    @property
    def done(self) -> bool:
        return self.table is not None

    def stage(self, index: int) -> str:
        timed_end = self.job.warmup + self.job.steps
        sampled_end = timed_end + self.job.sampled_iterations
        if index < self.job.warmup:
            return "warmup"
        if index < timed_end:
            return "timed"
        if index < sampled_end:
            return "sampled"
        return "timing" if index < sampled_end + self.job.timing_iterations else "profiled"

    def step(self, model, optimizer, items: int | None, site: str) -> _Step:
        self._hook(model, optimizer)
        self.items = items if items is not None else self.items
        return _Step(self, site)

    @contextlib.contextmanager
    def phase(self, name: str):
        if name not in PHASES:
            raise ScriptFailed(f"ssmprof.phase('{name}'): the phases are {', '.join(PHASES)}")
        if self.open_at is None:  # a phase means something only inside an iteration
            yield
            return
        self.enter_phase(name)
        self.by_hand = True
        try:
            yield
        finally:
            self.by_hand = False
            self.leave_phase()

    def enter_phase(self, name: str, by_hook: bool = False) -> None:
        """Open `name`, closing the phase before it: phases follow each other, never nest."""
        if self.open_at is None or (by_hook and self.by_hand):
            return
        if self.current is not None and self.current[0] == name:
            return
        self.leave_phase()
        self.current = (name, self.marker.start(name))

    def leave_phase(self) -> None:
        if self.current is not None:
            self.marker.end(self.current[1])
            self.current = None

    def begin(self, site: str) -> None:
        if self.open_at is not None:
            raise ScriptFailed(f"{site}: ssmprof.step() entered inside the iteration entered at {self.open_at}: "
                               "iterations cannot nest or overlap")
        self.open_at = site
        stage = self.stage(self.entered)
        if self.entered == 0 and self.job.autotune:
            # pinned once the script has imported and built its kernels, before any of them runs: the timeline's
            # Triton choices, so a counter pass launches the configurations the timeline measured
            autotune.pin(schema.read_document(schema.AutotunePins, Path(self.job.autotune)).choices)
        if stage == "sampled" and self.sampler is None:
            self.sampler = HostSampler().__enter__()
        if stage == "timing" and self.window is None and self.capture is not None:
            self.window = self.capture.timing_window()
            self.window.__enter__()
        self.entered += 1
        if stage == "profiled":
            _sync(self.cuda)
            if self.cuda:
                torch.cuda.profiler.start()  # cudaProfilerStart: the profiled iteration begins
            if self.capture is not None:
                self.capture.__enter__()
        if stage == "timed" and not self.marks and self.cuda:
            torch.cuda.reset_peak_memory_stats()  # the peak of the timed and profiled iterations, as the harness's
            self.sharing = SharingMonitor().__enter__()  # the clock and other processes while the timed steps run
        self.clock = time.perf_counter()
        self.started = _now(self.cuda) if stage != "warmup" else None
        sampled = self.entered - 1 - self.job.warmup - self.job.steps
        if stage == "sampled" and sampled % 2 == 1 and self.sampler is not None:
            self.sampler.begin(sampled // 2)

    def end(self, site: str, exc_info: tuple) -> None:
        """Close the iteration entered at `site` (`exc_info`: the exception leaving it, if any); raise ProfileDone
        once the profiled iteration the job wants is recorded."""
        failed = exc_info[0] is not None
        self.failed_in = self.entered if failed else None
        stage = self.stage(self.entered - 1)
        self.leave_phase()
        self.open_at = None
        ended = _now(self.cuda) if self.started is not None else None
        if stage == "timed":
            self.marks.append((self.started, ended))
            if len(self.marks) == self.job.steps:
                _sync(self.cuda)
                if self.sharing is not None:
                    self.sharing.__exit__(None, None, None)
                self.times_ms = [_elapsed_ms(start, stop, self.cuda) for start, stop in self.marks]
        elif stage == "sampled" and self.sampler is not None:
            self.sampler.end()
            self.sampled_marks.append((self.started, ended))
            if failed or self.stage(self.entered) != "sampled":
                self._sampled()
        elif stage == "timing" and self.window is not None and (failed or self.stage(self.entered) != "timing"):
            self.window.__exit__(*exc_info)
        elif stage == "profiled":
            _sync(self.cuda)
            if self.capture is not None:
                self.capture.__exit__(*exc_info)
            if self.cuda:
                torch.cuda.profiler.stop()
            self.profiled_ms.append(_elapsed_ms(self.started, ended, self.cuda))
            if not failed:
                self.table = self._table(site)
        self.seconds[stage] += time.perf_counter() - self.clock
        if not failed and self.done:
            raise ProfileDone

    def _sampled(self) -> None:
        """Close the sampler after the last sampled iteration: run.json's `harness.host_time`."""
        assert self.sampler is not None
        self.sampler.__exit__(None, None, None)
        _sync(self.cuda)
        times = [_elapsed_ms(start, stop, self.cuda) for start, stop in self.sampled_marks]
        self.host_time = self.sampler.host_time(times)
        self.sampler = None

    def _table(self, site: str):
        """The profiled iteration's kernel table (CPU: its aten ops); none in counters mode."""
        if self.capture is None:
            return []
        table, self.timing = self.capture.table() if self.cuda else (cpu_table(self.capture.trace), None)
        if self.cuda and table.empty:
            raise ScriptFailed(f"{site}: the profiled ssmprof.step() launched no GPU kernel: is the model on the "
                               "GPU?")
        return table

    def _hook(self, model, optimizer) -> None:
        """Hook the model's forward and the optimizer's step once each (the hooks act only inside an iteration)."""
        if model is not None and id(model) not in self.hooked:
            model.register_forward_pre_hook(lambda *_: self.enter_phase(FORWARD, by_hook=True))
            self.hooked.add(id(model))
        if optimizer is not None and id(optimizer) not in self.hooked:
            optimizer.register_step_pre_hook(lambda *_: self.enter_phase(OPTIMIZER, by_hook=True))
            optimizer.register_step_post_hook(lambda *_: None if self.by_hand else self.leave_phase())
            self.hooked.add(id(optimizer))

    def result(self, script: str) -> RunResult:
        peak = torch.cuda.max_memory_allocated() if self.cuda else None
        return RunResult(
            workload=Path(script).name, preset=SCRIPT_PRESET, config={"script": script, "args": list(self.job.args)},
            device=self.job.device, gpu=gpu_properties(self.cuda), warmup=self.job.warmup,
            step_times_ms=self.times_ms, items_per_step=self.items or 1,
            unit="items" if self.items else "iterations", peak_memory_bytes=peak,
            peak_reserved_bytes=torch.cuda.max_memory_reserved() if self.cuda else None,
            final_loss=math.nan,  # the script's loss is its own: ssmprof never sees it
            provenance=imported_kernels(), harness_seconds=dict(self.seconds), profiled_ms=self.profiled_ms,
            host_time=self.host_time, gpu_sharing=self.sharing.summary() if self.sharing is not None else None)


class _Step(contextlib.ContextDecorator):
    """One `ssmprof.step()`: a `with` block or a decorator, each entry one iteration."""

    def __init__(self, driver: StepDriver, site: str):
        self.driver, self.site = driver, site

    def __enter__(self):
        self.driver.begin(self.site)
        return self

    def __exit__(self, kind, exc, tb) -> Literal[False]:
        self.driver.end(self.site, (kind, exc, tb))
        return False


@contextlib.contextmanager
def installed(driver: StepDriver):
    """While the script runs: its marks go to `driver` (`api.install`), and `torch.autograd.backward`, which
    `loss.backward()` calls, opens the backward phase on the calling thread before autograd starts, so the loss's
    own backward kernels count as backward (a model's backward hooks fire only after them). Both are undone
    after."""
    original = torch.autograd.backward

    def backward(*args, **kwargs):
        driver.enter_phase(BACKWARD, by_hook=True)
        return original(*args, **kwargs)

    api.install(driver)
    torch.autograd.backward = backward
    try:
        yield
    finally:
        torch.autograd.backward = original
        api.install(None)


def run_script(job: schema.ScriptJob, driver: StepDriver) -> RunResult:
    """Run the script as `python SCRIPT ARGS` would, until it ends or ProfileDone; its result, or ScriptFailed
    (or GpuOutOfMemory) with the script's file and line."""
    script = job.script
    sys.argv = [script, *job.args]
    sys.path[0] = str(Path(script).resolve().parent)
    try:
        with installed(driver):
            runpy.run_path(script, run_name="__main__")
    except ProfileDone:
        pass
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise ScriptFailed(f"{_user_line(exc, script)}: the script exited with status {exc.code} after "
                               f"{driver.entered} ssmprof.step() iterations") from None
    except SsmprofError:  # the driver's own lines (nested iterations, no kernel) name their place
        raise
    except SyntaxError as exc:
        raise ScriptFailed(f"{exc.filename}:{exc.lineno}: SyntaxError: {exc.msg}") from None
    except torch.cuda.OutOfMemoryError as exc:
        raise ScriptFailed(f"{_user_line(exc, script)}: GPU out of memory ({_when(driver)}): give the script a "
                           "smaller batch or model") from None
    except Exception as exc:
        raise ScriptFailed(f"{_user_line(exc, script)}: {type(exc).__name__}: {_first_line(exc)} "
                           f"({_when(driver)})") from None
    if driver.table is None:
        raise ScriptFailed(f"{script}: the script ended after {driver.entered} ssmprof.step() iterations; profiling "
                           f"needs {iterations_needed(job)}: run it longer or lower --steps/--warmup")
    return driver.result(script)


def iterations_needed(job: schema.ScriptJob) -> str:
    """`31 (3 warm-up, 10 timed, 20 host-sampled, 5 timing, 1 profiled)`: every stage the job runs."""
    stages = [(job.warmup, "warm-up"), (job.steps, "timed"), (job.sampled_iterations, "host-sampled"),
              (job.timing_iterations, "timing"), (1, "profiled")]
    total = sum(count for count, _ in stages)
    return f"{total} ({', '.join(f'{count} {name}' for count, name in stages if count)})"


def _when(driver: StepDriver) -> str:
    if driver.failed_in is not None:
        return f"in ssmprof.step() iteration {driver.failed_in}"
    return f"after ssmprof.step() iteration {driver.entered}" if driver.entered else "before the first ssmprof.step()"


def _user_line(exc: BaseException, script: str) -> str:
    """`file:line` of the innermost frame of the user's code the exception passed through: a file under the
    script's folder that is neither ssmprof's nor an installed package's; else the script itself."""
    folder, found = Path(script).resolve().parent, script
    tb = exc.__traceback__
    while tb is not None:
        path = Path(tb.tb_frame.f_code.co_filename).resolve()
        installed = "site-packages" in path.parts or path.is_relative_to(SSMPROF_DIR)
        if path.is_relative_to(folder) and not installed:
            shown = script if path == Path(script).resolve() else str(path)
            found = f"{shown}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found


def main(argv: list[str]) -> int:
    began = time.time()
    job = schema.read_document(schema.ScriptJob, Path(argv[0]))  # written by the parent: a defect is a bug
    try:
        go = os.environ.get(GO_ENV)
        while go and not os.path.exists(go):  # a counter pass started ahead of its turn touches no GPU yet
            time.sleep(0.02)
        went = time.time()
        if job.device == "cuda":
            torch.cuda.init()
        cuda_ready = time.time()
        driver = StepDriver(job)
        result = run_script(job, driver)
    except SsmprofError as exc:
        if job.mode == "timeline":
            failed = schema.make_document(schema.ScriptResult, error=str(exc), error_kind=type(exc).__name__)
            schema.write_document(failed, Path(job.result))
        else:  # an Nsight Compute pass: its parent shows the last lines of the output
            print(f"error: {exc}", file=sys.stderr)
        return 1
    if job.mode == "timeline":
        schema.write_frame(driver.table, Path(job.table))
        written = schema.make_document(schema.ScriptResult, steps_run=driver.entered, result=result.to_dict(),
                                       timing=driver.timing or None,
                                       triton_autotune=autotune.snapshot() if job.device == "cuda" else {})
        schema.write_document(written, Path(job.result))
    if "--timings" in argv:
        stamps = {"began": began, "went": went, "cuda_ready": cuda_ready, "planned": cuda_ready, "pinned": cuda_ready,
                  **result.harness_seconds, "ended": time.time()}
        work = {"gpu": result.gpu.get("name"), "config": result.config}
        record = schema.make_document(schema.PassRecord, stamps=stamps, work=work)
        schema.write_document(record, Path(argv[argv.index("--timings") + 1]))
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the script's threads and loaders are not waited for: its work here is done
