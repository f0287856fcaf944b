"""`ssmprof sweep`: workloads over a grid of settings, each point a run directory (`measure.profile`) beside
the sweep manifest (`schema.SweepManifest`), and the regime map (`pipeline.regimes`) over them.

The whole grid is validated before anything runs (each point's config and kernel plan, as `profile` would
prepare it), so a typo in the tenth value costs nothing. Points run one after another in this process:
Triton's autotuning choices stay in memory, so a point whose autotuning keys (mamba-ssm's SSD kernels key
on chunk size, head dim and state size, not on sequence length or batch) an earlier point already tuned
pays no autotuning. A point that fails (out of memory, a kernel fault, a collector error) is recorded with
its one-line reason and the sweep goes on; after a kernel fault the CUDA context is lost, so the points
left are recorded as not run. The manifest is rewritten (atomically) after every point: an interrupted
sweep is readable, and `resume` runs only the points that are not complete.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ssmprof.errors import GpuKernelFault, InvalidConfig, NoGpu, SsmprofError
from ssmprof.pipeline import measure
from ssmprof.pipeline.outputs import check_folder
from ssmprof.profiler.harness import Progress, resolve_device
from ssmprof.schema import (
    COMPLETE,
    FAILED,
    PENDING,
    SWEEP_MANIFEST,
    SweepManifest,
    SweepPoint,
    make_document,
    read_document,
    write_document,
)
from ssmprof.workloads.registry import get_workload

DEFAULT_COUNTERS = "focus"  # the SSM and top kernels: a sweep of ~20 points fits a device call or two


@dataclass(frozen=True)
class SweepSpec:
    """A sweep as the command line names it: workloads, preset, the varied settings (`--vary NAME=V1,V2`),
    the settings held fixed (`--set KEY=VALUE`), counters, timed steps and warm-up."""

    workloads: list[str]
    preset: str
    vary: list[str]
    sets: list[str] = field(default_factory=list)
    counters: str = DEFAULT_COUNTERS
    steps: int = 5
    warmup: int | None = None


def parse_axes(vary: list[str]) -> dict[str, list[str]]:
    """`["seq_len=2048,4096", "d_state=64,128"]` -> {"seq_len": ["2048", "4096"], "d_state": ["64", "128"]}."""
    axes: dict[str, list[str]] = {}
    for text in vary:
        name, sep, values = text.partition("=")
        name = name.strip().replace("-", "_")
        listed = [value.strip() for value in values.split(",")] if sep else []
        if not name or not listed or "" in listed:
            raise InvalidConfig(f"--vary expects NAME=V1,V2,..., got '{text}'")
        if name in axes:
            raise InvalidConfig(f"--vary names '{name}' twice: give all its values in one --vary")
        axes[name] = listed
    if not axes:
        raise InvalidConfig("a sweep needs at least one --vary NAME=V1,V2,...")
    return axes


@dataclass(frozen=True)
class PlannedPoint:
    options: measure.WorkloadOptions
    point: SweepPoint

    @property
    def label(self) -> str:
        return point_label(self.point)


def point_label(point: SweepPoint) -> str:
    return f"{point.workload} " + " ".join(f"{name}={value}" for name, value in point.settings.items())


def run_name(point: SweepPoint) -> str:
    """The point's run directory: `mamba2-lm_seq_len-4096_d_state-128`."""
    return "_".join([point.workload, *(f"{name}-{value}" for name, value in point.settings.items())])


def plan(spec: SweepSpec, device: str = "auto") -> tuple[dict[str, list], list[PlannedPoint]]:
    """(axes with typed values, every point of the grid in run order: workload by workload, the last axis
    varying fastest), each prepared as `profile` will prepare it; the first bad setting or value is one
    line naming its point."""
    axes = parse_axes(spec.vary)
    fixed = measure.parse_sets(spec.sets)
    held = sorted(set(axes) & {key.replace("-", "_") for key in fixed})
    if held:
        raise InvalidConfig(f"{', '.join(held)} is both varied (--vary) and fixed (--set)")
    if not spec.workloads:
        raise InvalidConfig("a sweep needs at least one workload")
    if len(set(spec.workloads)) < len(spec.workloads):
        raise InvalidConfig(f"a workload is named twice: {', '.join(spec.workloads)}")
    typed: dict[str, list] = {}
    planned, seen = [], set()
    for workload in spec.workloads:
        get_workload(workload)
        for values in itertools.product(*axes.values()):
            raw = dict(zip(axes, values, strict=True))
            options = measure.WorkloadOptions(workload, spec.preset, spec.warmup,
                                              sets=spec.sets + [f"{k}={v}" for k, v in raw.items()])
            label = f"{workload} " + " ".join(f"{k}={v}" for k, v in raw.items())
            try:
                ready = measure.prepare(options, device)
            except SsmprofError as exc:
                raise type(exc)(f"sweep point {label}: {exc}") from None
            settings = {name: getattr(ready.cfg, name) for name in axes}
            key = (workload, tuple(settings.values()))
            if key in seen:
                raise InvalidConfig(f"sweep point {label} repeats an earlier point (a value listed twice?)")
            seen.add(key)
            for name, value in settings.items():
                typed.setdefault(name, [])
                if value not in typed[name]:
                    typed[name].append(value)
            planned.append(PlannedPoint(options, SweepPoint(workload=workload, settings=settings)))
    return typed, planned


@dataclass(frozen=True)
class SweepResult:
    path: Path
    manifest: SweepManifest
    report: Path | None

    @property
    def failed(self) -> list[SweepPoint]:
        return [point for point in self.manifest.points if point.status.startswith(FAILED)]


# Opened around each point with (index from 1, number of points, the point, whose status the sweep sets
# before the context closes); yields the progress callback of that point's profile.
PointProgress = Callable[[int, int, SweepPoint], AbstractContextManager[Progress | None]]


def sweep(spec: SweepSpec, out: Path, resume: bool = False, report: bool = True,
          progress_for: PointProgress | None = None) -> SweepResult:
    """`ssmprof sweep`: every point of `spec` profiled into `out` (one run directory per point, the manifest
    `out/sweep.json` after every point); with `report`, the regime map as `out/sweep-report.html` and CSVs.
    `resume`: finish the sweep already in `out` (same spec), running only the points not complete."""
    measure.check_counters_mode(spec.counters)
    check_folder(out, "--out")
    parse_axes(spec.vary)
    measure.parse_sets(spec.sets)
    if resolve_device("auto") != "cuda":
        raise NoGpu("a sweep profiles GPU kernels: no CUDA GPU is visible")
    axes, planned = plan(spec, "cuda")
    manifest = make_document(SweepManifest, workloads=spec.workloads, preset=spec.preset, axes=axes,
                             fixed=measure.parse_sets(spec.sets), counters=spec.counters, steps=spec.steps,
                             points=[p.point for p in planned], wall_s=0.0)
    path = out / SWEEP_MANIFEST
    if path.exists():
        if not resume:
            raise InvalidConfig(f"{out} holds a sweep already: --resume to finish it, or choose another --out")
        manifest = _resumed(read_document(SweepManifest, path), manifest, out)
    elif resume:
        raise InvalidConfig(f"--resume: {out} holds no sweep ({SWEEP_MANIFEST})")
    write_document(manifest, path)
    opened = progress_for or (lambda index, total, point: contextlib.nullcontext(None))
    started, spent = time.perf_counter(), manifest.wall_s
    lost: str | None = None
    for index, (planned_point, point) in enumerate(zip(planned, manifest.points, strict=True), start=1):
        if point.complete:
            continue
        began = time.perf_counter()
        with opened(index, len(planned), point) as tell:
            if lost is not None:
                point.status = f"{FAILED}: not run: the CUDA context was lost at {lost} (a kernel fault); --resume " \
                               "in a new process runs it"
            else:
                point.status, point.run = _run_point(planned_point, spec, out, tell)
                point.wall_s = time.perf_counter() - began
                if point.status.startswith(f"{FAILED}: {GpuKernelFault.__name__}"):
                    lost = planned_point.label
        manifest.wall_s = spent + time.perf_counter() - started
        write_document(manifest, path)
    report_path = None
    if report and any(point.complete for point in manifest.points):
        from ssmprof.pipeline import regimes

        report_path = out / regimes.SWEEP_REPORT
        regimes.report(out, "html", report_path, csv=out / "sweep-csv")
    return SweepResult(out, manifest, report_path)


def _run_point(planned: PlannedPoint, spec: SweepSpec, out: Path, tell: Progress | None) -> tuple[str, str | None]:
    """(status, run directory name) of one point: profiled, or failed with the one-line reason."""
    try:
        path = measure.profile(planned.options, out, spec.steps, spec.counters, progress=tell,
                               name=run_name(planned.point))
        return COMPLETE, path.name
    except (SsmprofError, torch.OutOfMemoryError) as exc:
        return f"{FAILED}: {type(exc).__name__}: {_one_line(exc)}", None
    except RuntimeError as exc:  # a CUDA error the harness did not turn into a GpuKernelFault (e.g. at teardown)
        if "CUDA error" not in str(exc):
            raise
        return f"{FAILED}: {GpuKernelFault.__name__}: {_one_line(exc)}", None
    finally:
        gc.collect()  # the failed point's model and activations, held by the traceback until now
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _resumed(found: SweepManifest, planned: SweepManifest, out: Path) -> SweepManifest:
    """The manifest in `out` if it is the same sweep as `planned`, its complete points kept where their run
    directories are still there (others run again)."""
    same = ("workloads", "preset", "axes", "fixed", "counters", "steps")
    differs = [name for name in same if getattr(found, name) != getattr(planned, name)]
    if differs or [(p.workload, p.settings) for p in found.points] != \
            [(p.workload, p.settings) for p in planned.points]:
        raise InvalidConfig(f"--resume: the sweep in {out} differs from this one in "
                            f"{', '.join(differs) or 'its points'}: choose another --out")
    for point in found.points:
        if point.complete and not (out / (point.run or "") / "run.json").is_file():
            point.status, point.run = PENDING, None
        elif not point.complete:
            point.status, point.wall_s = PENDING, None
    return found
