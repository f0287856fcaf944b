"""The training harness: honest iterations of forward, backward and AdamW.

One run = build model and batch, `warmup` iterations (Triton compiles and autotunes here, launching
hundreds of benchmark kernels, so they must stay outside every measurement), `steps` timed iterations
(CUDA events; the median is the step time), where asked for (`find_syncs`) one untimed iteration that counts the
calls making the host wait for the GPU (`profiler.syncs`), where a timing pass is asked for (`run_training`'s
`timing`) a few more run back to back as the timed steps run, whose kernel times stand for the profiled
iteration's (`profiler.timeline`), then one more iteration bracketed by cudaProfilerStart/Stop: the iteration collectors
profile (`ncu --profile-from-start off`). Recording the host ops that name each launch slows the host, so the
profiled iteration itself is not one of the timed steps, and the steps right after it run slower too: the timing
pass comes first (tests/data/traced-iteration-h100, docs/history.md).
Mixed precision as in real training: fp32 parameters and AdamW state, autocast compute dtype.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch

from ssmprof.errors import GpuKernelFault, GpuOutOfMemory, InvalidConfig, NoGpu, TrainingFailed
from ssmprof.kernels import KernelPlan
from ssmprof.profiler.environment import gpu_properties, process_counters, process_placement
from ssmprof.profiler.host_sampler import HostSampler
from ssmprof.profiler.markers import PhaseMarker
from ssmprof.profiler.nvml import SharingMonitor, current_device
from ssmprof.profiler.syncs import synchronizing_sites
from ssmprof.schema import BACKWARD, FORWARD, OPTIMIZER
from ssmprof.workloads.base import CommonConfig, Workload
from ssmprof.workloads.lm import LanguageModelWorkload
from ssmprof.workloads.parallel import ParallelCausalLM
from ssmprof.workloads.user import failure_in_user_code

Progress = Callable[[str, int, int], None]  # (stage, done, total)
T = TypeVar("T")
# Rounds of `steps` timed steps at most, where a steadiness rule asks for more (`run_training`'s `steady`)
STEADY_ROUNDS = 5
# The stages `run_training` reports through `Progress`, in order (`distributed` names a rank left behind by them)
STAGES = ("warm-up", "timed steps")


def resolve_device(requested: str) -> str:
    if requested not in ("auto", "cuda", "cpu"):
        raise InvalidConfig(f"device must be auto, cuda or cpu, got '{requested}'")
    has_gpu = torch.cuda.is_available()
    if requested == "cuda" and not has_gpu:
        raise NoGpu("--device cuda asked for, but no CUDA GPU is visible (torch.cuda.is_available() is False)")
    if requested == "auto":
        return "cuda" if has_gpu else "cpu"
    return requested


@dataclass(frozen=True)
class Prepared:
    """A workload ready to run: its config with the overrides applied, the kernel plan, and the warm-up count.
    `overrides` and `allow_fallback` are kept as given: a counter pass's child and a rank of a parallel run build
    the same config and plan again from them."""

    workload: Workload
    preset: str
    cfg: CommonConfig
    plan: KernelPlan
    overrides: dict[str, Any]
    warmup: int
    allow_fallback: bool = False


@dataclass
class RunResult:
    workload: str
    preset: str
    config: dict
    device: str
    gpu: dict
    warmup: int
    step_times_ms: list[float]
    items_per_step: int
    unit: str
    peak_memory_bytes: int | None
    final_loss: float
    provenance: dict[str, str]
    # the loss of the first step, before any optimizer update: the same seed gives the same weights and batch, and
    # a forward pass repeats up to reduction order, so processes meant to run the same work agree on it closely
    # (`counters.check_same_work`); later losses drift apart through the backward's floating-point atomics, which
    # AdamW's normalized update amplifies step by step
    first_loss: float = math.nan
    harness_seconds: dict[str, float] = field(default_factory=dict)
    # what the caching allocator held at most; Nsight Compute would save and restore all of it at every replay
    # pass, so the counter child runs without the allocator (`counters.PROFILED_CHILD_ENV`)
    peak_reserved_bytes: int | None = None
    # the profiled iteration's time (CUDA events, under the capture: slower than a timed step where the capture
    # records host ops), one entry
    profiled_ms: list[float] = field(default_factory=list)
    # `--cuda-graphs`: the same step replayed as one captured CUDA graph (`time_graphed_steps`), no per-launch
    # host cost; None where not asked for
    graphed_step_times_ms: list[float] | None = None
    # whether other processes used the GPU during the timed steps (`nvml.sharing_summary`); None off the GPU
    gpu_sharing: dict | None = None
    # where a workload outside the suite was loaded from (`Workload.source`); None for the suite's
    workload_source: dict | None = None
    # the calls of one step that make the host wait for the GPU, counted by site (`syncs.synchronizing_sites`);
    # None off the GPU and where not looked for
    sync_sites: dict[str, int] | None = None
    # where the host's time in a step went (`sampled_steps`, run.json `harness.host_time`); None where not sampled
    host_time: dict | None = None
    # the timed steps ran STEADY_ROUNDS rounds and their median's interval is still wider than the rule asked
    steps_capped: bool = False
    # where the process ran and what Linux counted over the timed steps (`process_record`, run.json
    # `harness.process`)
    process: dict | None = None

    @property
    def step_ms(self) -> float:
        return statistics.median(self.step_times_ms)

    @property
    def throughput(self) -> float:
        """Items (tokens or samples) per second at the median step time."""
        return self.items_per_step / (self.step_ms / 1e3)

    @property
    def graphed_step_ms(self) -> float | None:
        return statistics.median(self.graphed_step_times_ms) if self.graphed_step_times_ms else None

    def to_dict(self) -> dict:
        return {**asdict(self), "step_ms": self.step_ms, "throughput": self.throughput,
                "graphed_step_ms": self.graphed_step_ms}


class Trainer:
    """Owns model, optimizer and batch; `step()` is one marked training iteration."""

    def __init__(self, workload: Workload, cfg: CommonConfig, plan: KernelPlan, marker: PhaseMarker,
                 seed: int = 0, groups=None, capturable: bool = False):
        """`groups` (`workloads.parallel.RankGroups`): this rank's part of a tensor/data-parallel model.
        `capturable`: a step a CUDA graph can capture (`capture_step`): AdamW keeps its step count on the GPU, and
        autocast caches no casts (a cached cast would outlive the capture's memory pool)."""
        self.workload, self.cfg, self.marker = workload, cfg, marker
        self.device = torch.device(plan.device)  # "cuda": the current device (a rank sets its own)
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        # Build straight on the device: a paper-preset model is billions of fp32 parameters.
        self.parallel: ParallelCausalLM | None = None
        with self.device:
            if groups is not None:
                assert isinstance(workload, LanguageModelWorkload)  # `measure` refuses the others first
                self.parallel = workload.build_parallel(cfg, plan, groups)
            self.model = workload.build(cfg, plan) if self.parallel is None else self.parallel
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0.1,
                                           fused=self.device.type == "cuda", capturable=capturable)
        self.batch = workload.batch(cfg, self.device, generator)
        if self.parallel is not None:
            self.batch = self.parallel.local_batch(self.batch)
        self.autocast = torch.autocast(self.device.type, dtype=cfg.autocast_dtype(),
                                       enabled=cfg.dtype != "fp32", cache_enabled=not capturable)

    def step(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)  # no kernels; grads stay readable after the step
        with self.marker.phase(FORWARD), self.autocast:
            loss = self.parallel.loss(self.batch) if self.parallel is not None \
                else self.workload.loss(self.model, self.batch)
        with self.marker.phase(BACKWARD):
            loss.backward()
            if self.parallel is not None:
                self.parallel.finish_gradients()
        with self.marker.phase(OPTIMIZER):
            self.optimizer.step()
        return loss.detach()


@contextlib.contextmanager
def typed_failures(workload: Workload, cfg: CommonConfig):
    """A training failure inside the block as one typed line: GpuOutOfMemory, GpuKernelFault (a CUDA error),
    UserCodeFailed (any other exception raised in a user's workload file), TrainingFailed (any other
    RuntimeError); CaptureRefused passes as it is."""
    try:
        yield
    except torch.cuda.OutOfMemoryError:
        raise GpuOutOfMemory(
            f"GPU out of memory running {workload.name} (batch {cfg.batch_size}, seq_len {cfg.seq_len}, "
            f"{cfg.layers} layers): lower --batch-size, --seq-len or --layers"
        ) from None
    except RuntimeError as exc:
        # Seen on our H100: mamba2-lm paper at batch 256 (256 x 4096 x 8192 > 2^31 elements per tensor)
        # dies with an illegal memory access, not an OOM: kernels index with 32-bit integers.
        if "CUDA error" in str(exc):
            reason = str(exc).split("CUDA error:", 1)[-1].strip().splitlines()[0]
            raise GpuKernelFault(
                f"a CUDA kernel failed running {workload.name} (batch {cfg.batch_size}, seq_len {cfg.seq_len}): "
                f"{reason}; tensors beyond 2^31 elements overflow 32-bit kernel indexing, so lower --batch-size "
                f"or --seq-len"
            ) from None
        # Any other RuntimeError is a library refusing or failing (seen on our H100: fla-core refusing its Triton
        # chunk_bwd_dqkwg on Hopper with Triton 3.6.0, fla #640, a multi-line message): one line, not a
        # traceback. The library's exception stays chained (`__cause__`) for whoever debugs it.
        raise failure_in_user_code(workload, exc) or TrainingFailed(
            f"running {workload.name} failed (batch {cfg.batch_size}, seq_len {cfg.seq_len}): {_first_line(exc)} "
            f"(RuntimeError raised in {_raised_in(exc)})"
        ) from exc
    except Exception as exc:  # raised in a user's workload file outside its checked methods (backward)
        failure = failure_in_user_code(workload, exc)
        if failure is None:
            raise
        raise failure from exc


def run_training(workload: Workload, preset: str, cfg: CommonConfig, plan: KernelPlan, steps: int,
                 warmup: int, marker: PhaseMarker | None = None, progress: Progress | None = None,
                 seed: int = 0, capture: contextlib.AbstractContextManager | None = None, groups=None,
                 timing: Callable[[Callable[[], object]], None] | None = None,
                 cuda_graphs: bool = False, find_syncs: bool = False, sample_host: bool = False,
                 steady: Callable[[list[float]], bool] | None = None, save_state: Path | None = None,
                 load_state: Path | None = None) -> RunResult:
    """Build, warm up, time `steps` iterations (with `steady`, a rule that says whether steps pin their median down,
    `steps` more at a time until it holds or STEADY_ROUNDS rounds ran: `RunResult.steps_capped`), hand the step to
    `timing` (e.g. `TimelineCapture.record_timing`, which runs it a few more times under CUDA activity alone), then
    run the profiled iteration (inside `capture`, e.g. a timeline collector, and cudaProfilerStart/Stop for Nsight
    Compute); with `find_syncs` (on the GPU), run one more step before the timing pass, untimed, that counts the
    step's synchronizing calls (`syncs.synchronizing_sites`); with `sample_host`, then `sampled_steps`; with
    `cuda_graphs`, then capture the step as a CUDA graph and time `steps` replays of it (the profiled iteration stays
    eager: its kernels are what the collectors join); `save_state`/`load_state`: `traced_weights`. A failure on the
    way is one typed line: GpuOutOfMemory,
    GpuKernelFault (a CUDA error), TrainingFailed (any other RuntimeError), CaptureRefused (a step that cannot be
    captured)."""
    if steps < 1 or warmup < 0:
        raise InvalidConfig(f"need steps >= 1 and warmup >= 0, got steps={steps} warmup={warmup}")
    refusal = capture_refusal(workload, plan) if cuda_graphs else None
    if refusal:
        raise CaptureRefused(refusal)
    report = progress or (lambda stage, done, total: None)
    cuda = plan.device == "cuda"
    seconds: dict[str, float] = {}
    with typed_failures(workload, cfg):
        t0 = time.perf_counter()
        trainer = Trainer(workload, cfg, plan, marker or PhaseMarker(), seed, groups, capturable=cuda_graphs)
        seconds["build"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        first_losses = []
        for i in range(warmup):
            first_losses.append(trainer.step())
            _sync(cuda)
            report(STAGES[0], i + 1, warmup)
        seconds["warmup"] = time.perf_counter() - t0

        if cuda:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        counted = process_counters()
        with SharingMonitor() if cuda else contextlib.nullcontext() as sharing:
            losses, times_ms, capped = steady_steps(trainer, steps, steady,
                                                    lambda done: report(STAGES[1], done, steps))
        process = process_record(cuda, counted, len(times_ms))
        seconds["timed"] = time.perf_counter() - t0

        _sync(cuda)
        sync_sites = synchronizing_sites(trainer.step) if cuda and find_syncs else None
        host_time = _stage(seconds, "sampled", lambda: sampled_steps(trainer.step, steps, cuda, sync_sites or {})) \
            if sample_host else None
        if timing is not None:  # first: a host that has just recorded every op runs the next steps slower
            _stage(seconds, "timing", lambda: timing(trainer.step))
        traced_weights(trainer, save_state, load_state)
        t0 = time.perf_counter()
        loss, elapsed_ms = profiled_iteration(trainer, capture)
        losses.append(loss)
        seconds["profiled"] = time.perf_counter() - t0  # under Nsight Compute: its replays of the launches
        peak = torch.cuda.max_memory_allocated() if cuda else None
        reserved = torch.cuda.max_memory_reserved() if cuda else None
        graphed = _stage(seconds, "graphed", lambda: time_graphed_steps(trainer, steps, workload.name)) \
            if cuda_graphs else None
    final_loss = float(losses[-1])
    if not math.isfinite(final_loss):
        raise InvalidConfig(f"the loss is not finite ({final_loss}); the configuration diverges")
    return RunResult(
        workload=workload.name, preset=preset, config=asdict(cfg), device=plan.device, gpu=gpu_properties(cuda),
        warmup=warmup, step_times_ms=times_ms, items_per_step=workload.items_per_step(cfg), unit=workload.unit,
        peak_memory_bytes=peak, peak_reserved_bytes=reserved, final_loss=final_loss,
        first_loss=float((first_losses or losses)[0]), provenance=plan.provenance(), harness_seconds=seconds,
        profiled_ms=[elapsed_ms], graphed_step_times_ms=graphed,
        gpu_sharing=sharing.summary() if sharing is not None else None, workload_source=workload.source,
        sync_sites=sync_sites, host_time=host_time, steps_capped=capped, process=process)


def _stage(seconds: dict[str, float], name: str, run: Callable[[], T]) -> T:
    """`run()`, its wall time kept in `seconds` under `name` (RunResult.harness_seconds)."""
    began = time.perf_counter()
    try:
        return run()
    finally:
        seconds[name] = time.perf_counter() - began


def traced_weights(trainer: Trainer, save: Path | None, load: Path | None) -> None:
    """Write to `save`, or take from `load`, the model's weights and the generators a step may draw from (dropout,
    a router's noise: the CPU's and the current GPU's), so that a counter pass's iteration runs the traced one's."""
    cuda = trainer.device.type == "cuda"
    if save is not None:
        states = {"cpu": torch.get_rng_state(), **({"cuda": torch.cuda.get_rng_state()} if cuda else {})}
        torch.save({"model": trainer.model.state_dict(), "rng": states}, save)
    if load is not None:
        saved = torch.load(load, map_location=trainer.device, weights_only=True)
        trainer.model.load_state_dict(saved["model"])
        torch.set_rng_state(saved["rng"]["cpu"].cpu())
        if cuda:
            torch.cuda.set_rng_state(saved["rng"]["cuda"].cpu())


def profiled_iteration(trainer: Trainer, capture: contextlib.AbstractContextManager | None
                       ) -> tuple[torch.Tensor, float]:
    """One iteration between cudaProfilerStart/Stop, inside `capture`: its loss and its time (ms; CUDA events on
    the GPU, as the timed steps)."""
    cuda = trainer.device.type == "cuda"
    if cuda:
        torch.cuda.profiler.start()  # cudaProfilerStart: the profiled iteration begins
    with capture or contextlib.nullcontext():
        start = _now(cuda)
        loss = trainer.step()
        end = _now(cuda)
        _sync(cuda)
    if cuda:
        torch.cuda.profiler.stop()
    return loss, start.elapsed_time(end) if cuda else (end - start) * 1e3


class CaptureRefused(InvalidConfig):
    pass


# Steps run on a side stream before capture (PyTorch's whole-network capture recipe): the optimizer's state and the
# libraries' workspaces and lazy initializations are created there, not inside the capture.
CAPTURE_WARMUP = 3


def capture_refusal(workload: Workload, plan: KernelPlan) -> str | None:
    """Why `--cuda-graphs` cannot run this step, in one line, or None where it can be tried: a CUDA graph replays
    GPU work with the shapes and addresses of its capture, so it needs a GPU (a --tp/--dp job on the CPU runs over
    gloo, which has nothing to capture) and shapes that do not change between steps (`Workload.capture_blocker`).
    A --tp/--dp step on GPUs is captured whole, its NCCL collectives inside: every rank captures the same sequence at
    the same point and replays it with the others (`distributed.merged_result` keeps each replay's slowest rank)."""
    if plan.device != "cuda":
        return ("--cuda-graphs needs a CUDA GPU: a CUDA graph replays GPU kernels, and this run is on the CPU "
                "(no GPU visible, or --device cpu; --tp/--dp ranks on the CPU run over gloo, which a graph cannot "
                "capture)")
    if workload.capture_blocker:
        return f"{workload.name} cannot be captured as a CUDA graph: {workload.capture_blocker}"
    return None


def capture_step(trainer: Trainer, name: str) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """The training step (forward, backward, AdamW) captured as one CUDA graph, and its loss tensor (filled at
    each replay). Warmed up on a side stream first; the gradients are left unset so the capture allocates them
    from its own pool and each replay overwrites them. An op that synchronizes with the host or allocates by a
    shape it reads from the GPU fails the capture: CaptureRefused with PyTorch's reason."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(CAPTURE_WARMUP):
            trainer.step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # the eager steps' cached blocks go back before the graph's pool takes its own
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            loss = trainer.step()
    except torch.cuda.OutOfMemoryError:
        raise  # run_training's message: the capture's pool did not fit
    except RuntimeError as exc:
        raise CaptureRefused(f"{name}'s training step cannot be captured as a CUDA graph: {_first_line(exc)}") \
            from exc
    return graph, loss


def time_graphed_steps(trainer: Trainer, steps: int, name: str) -> list[float]:
    """Capture the step (`capture_step`) and time `steps` replays of it (CUDA events, read once at the end, as
    `time_steps` does): the step without per-launch host cost. Refuses a replay whose loss is not finite."""
    graph, loss = capture_step(trainer, name)
    marks = []
    for _ in range(steps):
        start = _now(True)
        graph.replay()
        marks.append((start, _now(True)))
    torch.cuda.synchronize()
    if not math.isfinite(float(loss)):
        raise InvalidConfig(f"the graphed step's loss is not finite ({float(loss)}); its replay diverges")
    times = [start.elapsed_time(end) for start, end in marks]
    del graph
    return times


def _first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (its type's name where it has none)."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def _raised_in(exc: BaseException) -> str:
    """The module of the innermost Python frame an exception passed through (the library that raised it)."""
    tb = exc.__traceback__
    if tb is None:
        return "an unknown module"
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_globals.get("__name__", tb.tb_frame.f_code.co_filename)


def steady_steps(trainer: Trainer, steps: int, steady: Callable[[list[float]], bool] | None,
                 on_step: Callable[[int], None]) -> tuple[list[torch.Tensor], list[float], bool]:
    """`time_steps`, then (with `steady`) `steps` more at a time until the rule holds or STEADY_ROUNDS rounds ran;
    the losses, the times and whether the cap was hit with the rule still failing."""
    losses, times_ms = time_steps(trainer, steps, on_step)
    for _ in range(STEADY_ROUNDS - 1):
        if steady is None or steady(times_ms):
            break
        more_losses, more_ms = time_steps(trainer, steps, on_step)
        losses, times_ms = losses + more_losses, times_ms + more_ms
    return losses, times_ms, steady is not None and not steady(times_ms)


def time_steps(trainer: Trainer, steps: int, on_step: Callable[[int], None] | None = None
               ) -> tuple[list[torch.Tensor], list[float]]:
    """Run `steps` training iterations; return their losses and per-step milliseconds.

    On the GPU each step is timed by CUDA events read once at the end, so the host runs ahead of the
    GPU as in real training (a sync per step would add launch gaps to every step)."""
    cuda = trainer.device.type == "cuda"
    losses, marks = [], []
    for i in range(steps):
        start = _now(cuda)
        losses.append(trainer.step())
        marks.append((start, _now(cuda)))
        if on_step:
            on_step(i + 1)
    if cuda:
        torch.cuda.synchronize()
        return losses, [start.elapsed_time(end) for start, end in marks]
    return losses, [(end - start) * 1e3 for start, end in marks]


def process_record(cuda: bool, before: dict[str, int], steps: int) -> dict:
    """run.json `harness.process`: where the process ran beside its GPU (`environment.process_placement`), its
    threads, and its context switches and CPU migrations a step over the `steps` timed steps (counted `before`
    them and now, `environment.process_counters`)."""
    after = process_counters()
    counted = ("voluntary_switches", "involuntary_switches", "migrations")
    per_step = {name: (after[name] - before[name]) / steps for name in counted if name in after and name in before}
    return {**process_placement(current_device().pci_bus_id if cuda else None), "threads": after.get("threads"),
            "per_step": per_step}


def sampled_steps(step: Callable[[], object], steps: int, cuda: bool, sync_sites: dict[str, int]) -> dict:
    """2 x `steps` more steps, unsampled and sampled in turn by `host_sampler.HostSampler` (pipelined and timed as
    `time_steps` times its own): run.json's `harness.host_time`. Taking turns keeps a drift of the host's pace out
    of the sampler's measured overhead."""
    marks = []
    with HostSampler(sync_sites=set(sync_sites)) as sampler:
        for i in range(2 * steps):
            start = _now(cuda)
            with sampler.step(i // 2, sampled=i % 2 == 1):
                step()
            marks.append((start, _now(cuda)))
    _sync(cuda)
    times = [_elapsed_ms(start, end, cuda) for start, end in marks]
    return sampler.host_time(times)


def _elapsed_ms(start, end, cuda: bool) -> float:
    """Milliseconds between two `_now` marks."""
    return start.elapsed_time(end) if cuda else (end - start) * 1e3


def _now(cuda: bool):
    if not cuda:
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()
