"""`ssmprof.load`: a run for a notebook, analyzed as `ssmprof report` analyzes it, without importing torch."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import ssmprof
from ssmprof import bundled
from ssmprof.errors import SsmprofError
from ssmprof.pipeline import reporting

ROOT = Path(__file__).resolve().parents[1]
H100_MAMBA2 = bundled.REFERENCE / "h100-sxm" / "mamba2-lm"


def test_load_imports_no_torch_and_prints_the_summary():
    """The documented one-liner (docs/notebook.md), in a fresh interpreter: torch, plotly and the profiler stay out."""
    code = ("import sys, ssmprof; r = ssmprof.load('ssmprof/reference/h100-sxm/mamba2-lm'); print(r.summary); "
            "print(sorted(m for m in ('torch', 'plotly', 'ssmprof.profiler', 'ssmprof.reports') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.startswith("Summary of 33 sections\n  breakdown: 16 rows x 5 columns\n")
    assert "  findings: 7 rows x 6 columns\n" in out and out.rstrip().endswith("[]")


def test_load_gives_what_the_report_shows():
    """The same summary, section for section, as `ssmprof report RUN` computes for the page and `--csv`."""
    run = ssmprof.load(H100_MAMBA2)
    (analyzed,), _ = reporting.analyze_runs([H100_MAMBA2])
    assert run.info == analyzed.info and run.warnings == analyzed.warnings
    assert list(run.frames()) == list(analyzed.summary.frames())
    for name, frame in run.frames().items():
        pd.testing.assert_frame_equal(frame, analyzed.summary.frames()[name], obj=name)
    assert len(run.kernels) == run.info.coverage.launches and "category" in run.kernels
    assert run.ceilings is not None and run.ceilings.source.endswith("device profile beside the run")


def test_findings_are_data_ranked_by_impact():
    findings = ssmprof.load(H100_MAMBA2).summary.findings
    assert list(findings.columns) == ["kind", "status", "value", "finding", "anchor", "impact_ms"]
    impact = findings["impact_ms"].dropna()
    assert impact.is_monotonic_decreasing and findings["impact_ms"].iloc[:len(impact)].notna().all()
    host = findings.set_index("kind").loc["host"]
    assert host["status"] == "GPU-bound" and host["finding"].startswith("GPU-bound")


def test_load_refuses_what_is_no_run(tmp_path):
    with pytest.raises(SsmprofError):
        ssmprof.load(tmp_path)
