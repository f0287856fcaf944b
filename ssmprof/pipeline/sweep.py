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
import os
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from ssmprof.errors import GpuKernelFault, InvalidConfig, NoGpu, SsmprofError
from ssmprof.locks import locked
from ssmprof.pipeline import measure
from ssmprof.pipeline.outputs import check_folder
from ssmprof.profiler.harness import Progress, resolve_device
from ssmprof.schema import (
    COMPLETE,
    FAILED,
    PENDING,
    SWEEP_MANIFEST,
    SWEEP_POINTS,
    SweepManifest,
    SweepPoint,
    SweepPointFile,
    make_document,
    read_sweep,
    write_document,
)
from ssmprof.workloads.registry import get_workload

SWEEP_LOCK = ".sweep.lock"  # held while a process reads, changes and rewrites the manifest
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
    """The point's run directory: `mamba2-lm_seq_len-4096_d_state-128` (a user's `file.py:Name`: its name)."""
    return "_".join([get_workload(point.workload).name, *(f"{name}-{value}" for name, value in point.settings.items())])


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
            except NoGpu:
                continue  # prepare checks the settings before the device: the rest of the grid is checked too
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


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (`--shard 2/4`): the points at positions index-1, index-1+count, ... of the
    grid, so that shards started alike get alike mixes of workloads and sizes."""

    index: int = 1
    count: int = 1

    @classmethod
    def parse(cls, text: str) -> Shard:
        index, sep, count = text.partition("/")
        if not (sep and index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
            raise InvalidConfig(f"--shard expects I/N with 1 <= I <= N (e.g. 1/2), got '{text}'")
        return cls(int(index), int(count))

    def holds(self, position: int) -> bool:
        return position % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass(frozen=True)
class SweepRequest:
    """`ssmprof sweep` as one value, built once from the command line and passed down whole: the grid (`spec`),
    the sweep's folder, and this process's part in it: finish the sweep there (`resume`), draw the regime map at
    the end (`report`), run one `shard` of the points, or start shards on `gpus` identical GPUs of the host (0:
    all; 1: run here). Checked as it is built (the settings' syntax and the counter mode), so bad input is one
    line before any work; `plan` then checks every point against its workload."""

    spec: SweepSpec
    out: Path = Path("runs/sweep")
    resume: bool = False
    report: bool = True
    shard: Shard = Shard()
    gpus: int = 1

    def __post_init__(self) -> None:
        measure.check_counters_mode(self.spec.counters)
        parse_axes(self.spec.vary)
        measure.parse_sets(self.spec.sets)


def sweep(request: SweepRequest, progress_for: PointProgress | None = None) -> SweepResult:
    """`ssmprof sweep`: every point of `request.spec` (of `request.shard` only) profiled into `request.out` (one
    run directory per point, the manifest `out/sweep.json` and the point's own file after every point); with
    `request.report`, the regime map as `out/sweep-report.html` and CSVs, once no point of any shard is pending.
    `request.resume`: finish the sweep already in `out` (same spec), running only the points not complete. A shard
    joins the sweep another shard started in `out`; shards update the manifest in turn (`locks.locked`). With
    `request.gpus` other than 1, the shards run at once, one per GPU (`sweep_on_gpus`)."""
    if request.gpus != 1:
        return sweep_on_gpus(request)
    out, shard = request.out, request.shard
    check_folder(out, "--out")
    axes, planned = plan(request.spec, "cuda")  # an impossible grid is named before a missing GPU
    if resolve_device("auto") != "cuda":
        raise NoGpu("a sweep profiles GPU kernels: no CUDA GPU is visible")
    manifest = _joined(request, axes, planned)
    opened = progress_for or (lambda index, total, point: contextlib.nullcontext(None))
    lost: str | None = None
    for index, (planned_point, point) in enumerate(zip(planned, manifest.points, strict=True), start=1):
        if point.complete or not shard.holds(index - 1):
            continue
        began = time.perf_counter()
        with opened(index, len(planned), point) as tell:
            if lost is not None:
                point.status = f"{FAILED}: not run: the CUDA context was lost at {lost} (a kernel fault); --resume " \
                               "in a new process runs it"
            else:
                point.status, point.run = _run_point(planned_point, request, tell)
                point.wall_s = time.perf_counter() - began
                if point.status.startswith(f"{FAILED}: {GpuKernelFault.__name__}"):
                    lost = planned_point.label
        _record(out, point, time.perf_counter() - began, shard)
    return _finished(out, request.report)


def shard_command(request: SweepRequest) -> list[str]:
    """The `ssmprof sweep` command line of `request` as one shard runs it (`request.shard`; no map: the process
    that started the shards draws it)."""
    spec = request.spec
    command = [sys.executable, "-m", "ssmprof.cli", "sweep", *spec.workloads, "--preset", spec.preset,
               "--counters", spec.counters, "--steps", str(spec.steps), "--out", str(request.out), "--shard",
               str(request.shard), "--no-report", *(["--resume"] if request.resume else [])]
    command += [part for vary in spec.vary for part in ("--vary", vary)]
    command += [part for value in spec.sets for part in ("--set", value)]
    return command + (["--warmup", str(spec.warmup)] if spec.warmup is not None else [])


def sweep_on_gpus(request: SweepRequest) -> SweepResult:
    """`ssmprof sweep --gpus N`: the sweep as N shards at once, each a process on its own GPU of this host
    (CUDA_VISIBLE_DEVICES; identical GPUs only, `profile_run.identical_gpus`), their output passed through; then
    the regime map over all of them. Fewer than two such GPUs: the sweep runs here."""
    from ssmprof.profiler.profile_run import identical_gpus

    plan(request.spec, "cuda")  # an impossible grid is named before a missing GPU
    if resolve_device("auto") != "cuda":
        raise NoGpu("a sweep profiles GPU kernels: no CUDA GPU is visible")
    devices = identical_gpus(request.gpus)
    if len(devices) < 2:
        return sweep(replace(request, gpus=1))
    check_folder(request.out, "--out")
    axes, planned = plan(request.spec, "cuda")
    _joined(replace(request, shard=Shard()), axes, planned)  # the shards join it
    shards = [subprocess.Popen(shard_command(replace(request, shard=Shard(index, len(devices)))),
                               env={**os.environ, "CUDA_VISIBLE_DEVICES": device})
              for index, device in enumerate(devices, start=1)]
    failed = [index for index, shard in enumerate(shards, start=1) if shard.wait() != 0]
    if failed:
        raise SsmprofError(f"sweep shard {failed[0]}/{len(devices)} failed (its message is above); --resume "
                           "runs what it left")
    return _finished(request.out, request.report)


def _joined(request: SweepRequest, axes: dict, planned: list[PlannedPoint]) -> SweepManifest:
    """The manifest this process works on: written new, or the one in `out` (resumed, or joined by a shard)."""
    spec, out, resume, shard = request.spec, request.out, request.resume, request.shard
    manifest = make_document(SweepManifest, workloads=spec.workloads, preset=spec.preset, axes=axes,
                             fixed=measure.parse_sets(spec.sets), counters=spec.counters, steps=spec.steps,
                             points=[p.point for p in planned], wall_s=0.0)
    path = out / SWEEP_MANIFEST
    with locked(out / SWEEP_LOCK):
        if path.exists():
            if not resume and shard.count == 1:
                raise InvalidConfig(f"{out} holds a sweep already: --resume to finish it, or choose another --out")
            manifest = _resumed(read_sweep(out), manifest, out, resume, shard)
        elif resume:
            raise InvalidConfig(f"--resume: {out} holds no sweep ({SWEEP_MANIFEST})")
        write_document(manifest, path)
    for position, point in enumerate(manifest.points):  # what this shard will run, in its points' own files too
        if shard.holds(position) and point.status == PENDING:
            write_document(make_document(SweepPointFile, point=point, shard=str(shard)),
                           out / SWEEP_POINTS / f"{run_name(point)}.json")
    return manifest


def _record(out: Path, point: SweepPoint, wall_s: float, shard: Shard) -> None:
    """One point's outcome: its own file, and the manifest (read, changed, rewritten in turn with the other
    shards) with it and the sweep's wall time."""
    write_document(make_document(SweepPointFile, point=point, shard=str(shard)),
                   out / SWEEP_POINTS / f"{run_name(point)}.json")
    with locked(out / SWEEP_LOCK):
        manifest = read_sweep(out)
        write_document(manifest.model_copy(update={"wall_s": manifest.wall_s + wall_s}), out / SWEEP_MANIFEST)


def _finished(out: Path, report: bool) -> SweepResult:
    """The sweep as every shard left it so far, and its regime map where no point is pending any more (written
    by whichever shard finishes last)."""
    with locked(out / SWEEP_LOCK):
        manifest = read_sweep(out)
        report_path = None
        done = all(point.status != PENDING for point in manifest.points)
        if report and done and any(point.complete for point in manifest.points):
            from ssmprof.pipeline import regimes

            report_path = out / regimes.SWEEP_REPORT
            regimes.report(out, "html", report_path, csv=out / "sweep-csv")
    return SweepResult(out, manifest, report_path)


def _run_point(planned: PlannedPoint, request: SweepRequest, tell: Progress | None) -> tuple[str, str | None]:
    """(status, run directory name) of one point: profiled, or failed with the one-line reason."""
    settings = measure.ProfileSettings(request.out, request.spec.steps, request.spec.counters,
                                       name=run_name(planned.point))
    try:
        path = measure.profile(measure.ProfileRequest(planned.options, settings), tell)
        assert path is not None  # a sweep profiles on one node, which writes the run
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


def _resumed(found: SweepManifest, planned: SweepManifest, out: Path, resume: bool, shard: Shard) -> SweepManifest:
    """The manifest in `out` if it is the same sweep as `planned`, its complete points kept where their run
    directories are still there; with `resume`, this shard's others run again (another shard's points are
    that shard's to run)."""
    same = ("workloads", "preset", "axes", "fixed", "counters", "steps")
    differs = [name for name in same if getattr(found, name) != getattr(planned, name)]
    if differs or [(p.workload, p.settings) for p in found.points] != \
            [(p.workload, p.settings) for p in planned.points]:
        raise InvalidConfig(f"{'--resume' if resume else '--shard'}: the sweep in {out} differs from this one in "
                            f"{', '.join(differs) or 'its points'}: choose another --out")
    for position, point in enumerate(found.points):
        if not (resume and shard.holds(position)):
            continue
        if point.complete and not (out / (point.run or "") / "run.json").is_file():
            point.status, point.run = PENDING, None
        elif not point.complete:
            point.status, point.wall_s = PENDING, None
    return found
