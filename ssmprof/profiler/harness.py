"""The training harness: honest iterations of forward, backward and AdamW.

One run = build model and batch, `warmup` iterations (Triton compiles and autotunes here, launching
hundreds of benchmark kernels, so they must stay outside every measurement), `steps` timed iterations
(CUDA events; the median is the step time), then one more iteration bracketed by
cudaProfilerStart/Stop: the iteration collectors profile (`ncu --profile-from-start off`).
Mixed precision as in real training: fp32 parameters and AdamW state, autocast compute dtype.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch

from ssmprof.errors import GpuOutOfMemory, InvalidConfig, NoGpu
from ssmprof.kernels import KernelPlan
from ssmprof.profiler.markers import PhaseMarker
from ssmprof.workloads.base import CommonConfig, Workload

Progress = Callable[[str, int, int], None]  # (stage, done, total)


def resolve_device(requested: str) -> str:
    if requested not in ("auto", "cuda", "cpu"):
        raise InvalidConfig(f"device must be auto, cuda or cpu, got '{requested}'")
    has_gpu = torch.cuda.is_available()
    if requested == "cuda" and not has_gpu:
        raise NoGpu("--device cuda asked for, but no CUDA GPU is visible (torch.cuda.is_available() is False)")
    if requested == "auto":
        return "cuda" if has_gpu else "cpu"
    return requested


def gpu_info() -> dict:
    if not torch.cuda.is_available():
        return {}
    props = torch.cuda.get_device_properties(0)
    return {
        "name": props.name,
        "sm_count": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "compute_capability": f"{props.major}.{props.minor}",
    }


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
    harness_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def step_ms(self) -> float:
        return statistics.median(self.step_times_ms)

    @property
    def throughput(self) -> float:
        """Items (tokens or samples) per second at the median step time."""
        return self.items_per_step / (self.step_ms / 1e3)

    def to_dict(self) -> dict:
        return {**asdict(self), "step_ms": self.step_ms, "throughput": self.throughput}


class Trainer:
    """Owns model, optimizer and batch; `step()` is one marked training iteration."""

    def __init__(self, workload: Workload, cfg: CommonConfig, plan: KernelPlan, marker: PhaseMarker,
                 seed: int = 0):
        self.workload, self.cfg, self.marker = workload, cfg, marker
        self.device = torch.device(plan.device)
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        # Build straight on the device: a paper-preset model is billions of fp32 parameters.
        with self.device:
            self.model = workload.build(cfg, plan)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0.1,
                                           fused=self.device.type == "cuda")
        self.batch = workload.batch(cfg, self.device, generator)
        self.autocast = torch.autocast(self.device.type, dtype=cfg.autocast_dtype(),
                                       enabled=cfg.dtype != "fp32")

    def step(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)  # no kernels; grads stay readable after the step
        with self.marker.phase("forward"), self.autocast:
            loss = self.workload.loss(self.model, self.batch)
        with self.marker.phase("backward"):
            loss.backward()
        with self.marker.phase("optimizer"):
            self.optimizer.step()
        return loss.detach()


def run_training(workload: Workload, preset: str, cfg: CommonConfig, plan: KernelPlan, steps: int,
                 warmup: int, marker: PhaseMarker | None = None, progress: Progress | None = None,
                 seed: int = 0) -> RunResult:
    if steps < 1 or warmup < 0:
        raise InvalidConfig(f"need steps >= 1 and warmup >= 0, got steps={steps} warmup={warmup}")
    report = progress or (lambda stage, done, total: None)
    cuda = plan.device == "cuda"
    seconds: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        trainer = Trainer(workload, cfg, plan, marker or PhaseMarker(), seed)
        seconds["build"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        for i in range(warmup):
            trainer.step()
            _sync(cuda)
            report("warm-up", i + 1, warmup)
        seconds["warmup"] = time.perf_counter() - t0

        if cuda:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        losses = []
        timer = _StepTimer(cuda)
        for i in range(steps):
            with timer:
                losses.append(trainer.step())
            report("timed steps", i + 1, steps)
        times_ms = timer.elapsed_ms()
        seconds["timed"] = time.perf_counter() - t0

        _sync(cuda)
        if cuda:
            torch.cuda.profiler.start()  # cudaProfilerStart: the profiled iteration begins
        losses.append(trainer.step())
        _sync(cuda)
        if cuda:
            torch.cuda.profiler.stop()
        peak = torch.cuda.max_memory_allocated() if cuda else None
    except torch.cuda.OutOfMemoryError:
        raise GpuOutOfMemory(
            f"GPU out of memory running {workload.name} (batch {cfg.batch_size}, seq_len {cfg.seq_len}, "
            f"{cfg.layers} layers): lower --batch-size, --seq-len or --layers"
        ) from None
    final_loss = float(losses[-1])
    if not math.isfinite(final_loss):
        raise InvalidConfig(f"the loss is not finite ({final_loss}); the configuration diverges")
    return RunResult(
        workload=workload.name,
        preset=preset,
        config=asdict(cfg),
        device=plan.device,
        gpu=gpu_info() if cuda else {},
        warmup=warmup,
        step_times_ms=times_ms,
        items_per_step=workload.items_per_step(cfg),
        unit=workload.unit,
        peak_memory_bytes=peak,
        final_loss=final_loss,
        provenance=plan.provenance(),
        harness_seconds=seconds,
    )


class _StepTimer:
    """Per-step GPU time from CUDA events, read once at the end so the host can run ahead of the
    GPU as it does in real training (a sync per step would add launch gaps to every step)."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.marks: list[tuple] = []

    def __enter__(self):
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            start = time.perf_counter()
        self.marks.append((start,))

    def __exit__(self, *exc):
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
        else:
            end = time.perf_counter()
        self.marks[-1] += (end,)

    def elapsed_ms(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [start.elapsed_time(end) for start, end in self.marks]
        return [(end - start) * 1e3 for start, end in self.marks]


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()
