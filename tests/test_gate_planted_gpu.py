"""The gate on regressions recorded on an H100 that the held-back fixtures do not plant (tests/data/gate-planted-h100):
a slower host with the same kernels fails on step time and host wait, a run beside another GPU process fails naming
the shared GPU instead of its kernels, a clean rerun passes; against a baseline file and against the history alike."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ssmprof.cli import app

DATA = Path(__file__).parent / "data" / "gate-planted-h100"
CLEAN = [str(DATA / f"clean-{i}") for i in (1, 2, 3)]
runner = CliRunner()

# run, exit code, what the summary's failed rows must say (none for a pass)
CASES = [
    ("clean-4", 0, []),
    ("launch-blocking", 1, ["| step | step time | step_ms |", "| step | GPU waiting for the host | host_wait_ms |"]),
    ("shared-gpu", 1, ["| shared GPU | the run's GPU | gpu_sharing |"]),
]


def _failed_rows(summary: str) -> list[str]:
    return [line for line in summary.splitlines() if line.endswith("| FAIL |")]


def _check(summary: str, code: int, exit_code: int, expected: list[str]):
    failed = _failed_rows(summary)
    assert code == exit_code, summary
    assert len(failed) == len(expected) and all(any(row.startswith(e) for row in failed) for e in expected), failed


@pytest.mark.parametrize(("run", "exit_code", "expected"), CASES)
def test_gate_against_a_baseline_file(tmp_path, run, exit_code, expected):
    assert runner.invoke(app, ["baseline", *CLEAN, "-o", str(tmp_path / "b.json")]).exit_code == 0
    result = runner.invoke(app, ["regress", str(DATA / run), "--baseline", str(tmp_path / "b.json"),
                                 "--summary", str(tmp_path / "s.md")])
    _check((tmp_path / "s.md").read_text(), result.exit_code, exit_code, expected)


@pytest.mark.parametrize(("run", "exit_code", "expected"), CASES)
def test_gate_against_the_history(tmp_path, run, exit_code, expected):
    pytest.importorskip("duckdb", reason="the history extra (CI installs it)")
    history = tmp_path / "history"
    adding = [arg for path in CLEAN for arg in ("--add", path)]
    assert runner.invoke(app, ["history", str(history), "--out", str(tmp_path / "pages"), *adding]).exit_code == 0
    result = runner.invoke(app, ["regress", str(DATA / run), "--history", str(history), "--last", "3",
                                 "--no-append", "--summary", str(tmp_path / "s.md")])
    _check((tmp_path / "s.md").read_text(), result.exit_code, exit_code, expected)
