"""The report's CSV files: the bytes pandas' `to_csv` writes, from Arrow's formatting, on every table of a bundled
run and on values built to find where the two notations of a float part."""

import numpy as np
import pandas as pd
import pytest

from ssmprof import bundled
from ssmprof.analysis.summaries.run import analyze
from ssmprof.hardware import run_ceilings
from ssmprof.pipeline.loading import load_run
from ssmprof.reports import csv_files
from ssmprof.reports.csv_files import write_table


def written(table: pd.DataFrame, folder) -> tuple[bytes, bytes]:
    table.to_csv(folder / "pandas.csv", index=False)
    write_table(table, folder / "arrow.csv")
    return (folder / "pandas.csv").read_bytes(), (folder / "arrow.csv").read_bytes()


def test_every_table_of_a_bundled_report_as_pandas_writes_it(tmp_path):
    run = load_run(bundled.REFERENCE / "h100-sxm" / "mamba2-lm")
    tables = analyze(run, run_ceilings(run.info.gpu.name, run.path)[0]).frames()
    fast = [name for name, table in tables.items() if csv_files._formats(table) is not None]
    assert {"roofline", "tensor_vector", "limiters_ssm"} <= set(fast) and len(fast) >= len(tables) - 3
    for name, table in tables.items():
        ours, theirs = written(table, tmp_path)
        assert ours == theirs, name


def edge_values(count: int) -> np.ndarray:
    """Floats of every magnitude (random bit patterns, and uniform ones at every power of ten), integral ones, and
    the boundaries where Arrow's notation and numpy's repr change: 1e-6, 1e-4, 1e10, 1e16."""
    rng = np.random.default_rng(0)
    bounds = np.array([1e-6, 1e-4, 1e10, 1e15, 1e16, 2.0**53])
    special = np.concatenate([bounds, np.nextafter(bounds, 0), np.nextafter(bounds, np.inf),
                              [0.0, -0.0, 1.0, 100.0, 2.5, np.inf, -np.inf, np.nan, 5e-324, 1.7976931348623157e308]])
    return np.concatenate([rng.integers(0, 2**63, count, dtype=np.int64).view(np.float64), special, -special,
                           rng.uniform(-1, 1, count) * 10.0 ** rng.integers(-9, 20, count),
                           np.round(rng.uniform(-1e13, 1e13, count))])


def test_floats_text_and_missing_values_as_pandas_writes_them(tmp_path, monkeypatch):
    monkeypatch.setattr(csv_files, "ROWS", 997)  # several slices, the last one short
    values = edge_values(4_000)
    rng = np.random.default_rng(1)

    def pick(options: list) -> np.ndarray:
        return rng.choice(np.array(options, dtype=object), len(values))

    table = pd.DataFrame({
        "value": values, "count": rng.integers(-10**12, 10**12, len(values)), "flag": rng.random(len(values)) < 0.5,
        "name": pd.array(pick(["plain", "a, b", 'say "hi"', "two\nlines", "cr\r", "", None, " lead", "ünï"]),
                         dtype="str"),
        "text": pick(["x", "y,z"]), "maybe": pd.array(pick([True, False, None]), dtype="bool[pyarrow]"),
        "nullable": pd.array(pick(["a", None, 'b"c']), dtype="string")})
    assert csv_files._formats(table) is not None
    ours, theirs = written(table, tmp_path)
    assert ours == theirs


@pytest.mark.parametrize("table", [
    pd.DataFrame({"when": pd.to_datetime(["2026-01-01", "2026-01-02"]), "x": [1.0, 2.0]}),  # dates: pandas' own
    pd.DataFrame({"only": ["", "a"]}),  # one column: the csv writer quotes an empty row
    pd.DataFrame({"a": [], "b": []}),  # a header alone
], ids=["dates", "one column", "no rows"])
def test_what_arrow_does_not_format_pandas_writes(table, tmp_path):
    ours, theirs = written(table, tmp_path)
    assert ours == theirs
