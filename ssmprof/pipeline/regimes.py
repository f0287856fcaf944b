"""The regime map of a sweep (or of several: one per GPU, same settings varied), from sweep folders to HTML,
markdown and CSV, on any machine. `ssmprof report SWEEP_DIR...` and `ssmprof sweep` (at its end) call it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ssmprof.analysis.summaries import sweep
from ssmprof.errors import InvalidConfig
from ssmprof.hardware import read_device_profile, run_ceilings
from ssmprof.pipeline.loading import load_run
from ssmprof.pipeline.outputs import check_file, check_folder, write_text
from ssmprof.reports.render import write_csv
from ssmprof.reports.sweep import render_sweep
from ssmprof.schema import SWEEP_MANIFEST, SweepManifest, SweepPoint, read_sweep

SWEEP_REPORT = "sweep-report.html"


def is_sweep(path: Path) -> bool:
    return (Path(path) / SWEEP_MANIFEST).is_file()


@dataclass(frozen=True)
class SweepAnalysis:
    manifests: list[SweepManifest]
    axes: list[str]
    tables: sweep.RegimeTables


def analyze(folders: list[Path], device_profile: Path | None = None) -> SweepAnalysis:
    """Every complete point of the sweeps in `folders` loaded once, on its own GPU's ceilings
    (`hardware.run_ceilings`; `device_profile`: one given with --device-profile), and the regime frames over them."""
    manifests = [read_sweep(Path(folder)) for folder in folders]  # each with its shards' point files
    axes = list(manifests[0].axes)
    if any(list(m.axes) != axes for m in manifests):
        raise InvalidConfig("these sweeps vary different settings "
                            f"({' vs '.join(', '.join(m.axes) for m in manifests)}): report them separately")
    points = [(Path(folder), point) for folder, m in zip(folders, manifests, strict=True) for point in m.points]
    complete = [(folder, point) for folder, point in points if point.complete and point.run is not None]
    loaded = {index: load_run(folder / point.run) for index, (folder, point) in enumerate(complete)
              if point.run is not None}
    profile = read_device_profile(device_profile)
    runs = [sweep.SweepRun(point.settings, run.info, run.kernels,
                            run_ceilings(run.info.gpu.name, run.path, profile)[0])
            for run, (_, point) in zip(loaded.values(), complete, strict=True)]
    return SweepAnalysis(manifests, axes, sweep.regime_tables(runs, axes, points_table(points)))


def points_table(points: list[tuple[Path, SweepPoint]]) -> pd.DataFrame:
    """Every point of the sweeps, run or not: sweep folder, workload, settings, result, run directory, wall."""
    return pd.DataFrame([{"sweep": folder.name, "workload": p.workload, **p.settings, "result": p.status,
                          "run": p.run or "", "wall_s": p.wall_s} for folder, p in points])


def report(folders: Path | list[Path], fmt: str = "html", output: Path | None = None, csv: Path | None = None,
           device_profile: Path | None = None) -> str:
    """The regime map of the sweeps in `folders`, as HTML or markdown, written to `output` where given; with
    `csv`, every frame as CSV there."""
    folders = [folders] if isinstance(folders, Path) else list(folders)
    if fmt not in ("html", "md"):
        raise InvalidConfig(f"--format must be html or md, got '{fmt}'")
    check_file(output, "--output")
    check_folder(csv, "--csv")
    analysis = analyze(folders, device_profile)
    if csv is not None:
        write_csv(analysis.tables.frames(), csv, "sweep-")
    first = analysis.manifests[0]
    title = f"{', '.join(first.workloads)} --preset {first.preset} over {' x '.join(analysis.axes)}"
    text = render_sweep(title, analysis.tables, analysis.axes, fmt)
    if output is not None:
        write_text(output, text)
    return text
