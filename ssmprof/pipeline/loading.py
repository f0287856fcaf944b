"""Runs as the analyses take them: read once, categorized and derived once
(`analysis.launches.frame.analysis_frame`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ssmprof.analysis.launches.frame import analysis_frame
from ssmprof.schema import Run, read_run


def load_run(path: Path) -> Run:
    """The run directory at `path` (validated by `schema.read_run`), its kernels as the analysis frame."""
    run = read_run(path)
    return replace(run, kernels=analysis_frame(run.kernels))
