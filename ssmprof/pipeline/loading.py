"""Runs as the analyses take them: read once, categorized and derived once
(`analysis.launches.frame.analysis_frame`); and `load`, a run for a notebook (`ssmprof.load`).

`load(path)` gives what `ssmprof report` computes for one run, from Python: its run.json as the typed
`schema.RunInfo`, its kernels as the analysis frame (one row per launch, categorized, FLOPs and bytes derived), the
ceilings it is judged on, and its summary (`analysis.common.sections.Summary`: the frames of the report, one a
section, with the findings as typed rows), analyzed on first use. It imports no torch and draws nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import pandas as pd

from ssmprof import bundled
from ssmprof.analysis.common.sections import Summary
from ssmprof.analysis.launches.frame import analysis_frame
from ssmprof.analysis.summaries.run import analyze, warnings_for
from ssmprof.hardware import Ceilings, links_frame, read_device_profile, run_ceilings
from ssmprof.schema import Run, RunInfo, read_run


def load_run(path: Path) -> Run:
    """The run directory at `path` (validated by `schema.read_run`), its kernels as the analysis frame."""
    run = read_run(path)
    return replace(run, kernels=analysis_frame(run.kernels))


def origin(path: Path) -> str:
    """Where a run directory comes from, for the page's provenance: bundled with ssmprof, or a path."""
    try:
        inside = Path(path).resolve().relative_to(bundled.REFERENCE.resolve())
    except ValueError:
        return f"run directory {path}"
    return f"bundled reference run ({inside}), profiled by the ssmprof authors, not on this machine"


@dataclass(frozen=True)
class LoadedRun:
    """One run directory analyzed as `ssmprof report RUN` analyzes it (`load`): `info` (run.json, typed), `kernels`
    (the analysis frame), `ceilings` (its own GPU's, `hardware.run_ceilings`, with `ceiling_notes` saying where
    they come from; None where no ceilings are known), and, computed on first use, `summary` (every section of the
    report as a frame; `summary.findings` the findings ranked by impact) and `warnings`."""

    run: Run
    ceilings: Ceilings | None
    ceiling_notes: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path | None:
        return self.run.path

    @property
    def info(self) -> RunInfo:
        return self.run.info

    @property
    def kernels(self) -> pd.DataFrame:
        return self.run.kernels

    @cached_property
    def summary(self) -> Summary:
        return analyze(self.run, self.ceilings, origin(self.run.path) if self.run.path else None, links_frame())

    @cached_property
    def warnings(self) -> list[str]:
        return warnings_for(self.run, self.summary, self.ceiling_notes)

    def frames(self) -> dict[str, pd.DataFrame]:
        """The summary's sections by name, as `--csv` writes them (docs/columns.md says what each column holds)."""
        return self.summary.frames()


def load(path: str | Path, device_profile: str | Path | None = None) -> LoadedRun:
    """The run directory at `path` for a notebook (`ssmprof.load`): read, validated and analyzed on its own GPU's
    ceilings, or on those of `device_profile` (a file `ssmprof calibrate` wrote), as `ssmprof report` does."""
    run = load_run(Path(path))
    profile = read_device_profile(Path(device_profile)) if device_profile is not None else None
    ceilings, notes = run_ceilings(run.info.gpu.name, run.path, profile)
    return LoadedRun(run, ceilings, notes)
