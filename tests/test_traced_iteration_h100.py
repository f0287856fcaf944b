"""The traced iteration is one of the timed steps (issue #40), on the H100 runs of every paper-suite workload
(tests/data/traced-iteration-h100): each kernel table's times come from the joined timing pass, whose span lies
within the timed steps' spread of their median, while the detail pass alone (how iterations were traced before)
did not on the host-bound workloads."""

from pathlib import Path

import pytest

from benchmarks.bench_tracing import main, rows

DATA = Path(__file__).parent / "data" / "traced-iteration-h100"


@pytest.fixture(scope="module")
def table():
    return {row["workload"].split()[0]: row for row in rows([DATA])}


def test_every_suite_workload_was_measured(table):
    assert sorted(table) == ["graph-mamba", "hybrid", "mamba-vision", "mamba1-lm", "mamba2-lm", "transformer"]


def test_the_kernel_times_come_from_the_timing_pass(table):
    assert all(row["timed_by"].startswith("timing pass") for row in table.values())


@pytest.mark.parametrize("workload, detail_off_pct", [("graph-mamba", 58.2), ("mamba-vision", 41.1)])
def test_the_timing_pass_removes_what_tracing_the_host_cost(table, workload, detail_off_pct):
    row = table[workload]
    assert 100 * (row["detail_span_ms"] / row["step_ms"] - 1) == pytest.approx(detail_off_pct, abs=0.05)
    assert row["span_ms"] < row["detail_span_ms"] and row["ok"]


def test_the_benchmark_passes_on_the_recorded_runs(capsys):
    assert main([str(DATA)]) == 0
    assert capsys.readouterr().out.count("| met |") == 6
