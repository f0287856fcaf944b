"""Calibration verdicts: the toolkit's own derived quantities (`derive`) on kernels of known work.

Running the known-work kernels is the profiler's (`profiler/calibrate.py`, which describes each as a
`known_work` record: check, kernel regex, derived column, expected value, tolerance, unit); judging them
is here, through the same `derive` every analysis uses, so a passing calibration vouches for the formulas
the roofline and the tensor/vector views rely on.
"""

from __future__ import annotations

import pandas as pd

from ssmprof.analysis.derived import derive
from ssmprof.schema import COUNTER_COLUMNS


def evaluate(report: pd.DataFrame, known_work: tuple[dict, ...]) -> pd.DataFrame:
    """One row per check: expected, measured, error %, pass (a check whose kernel is missing fails)."""
    frame = report.reindex(columns=list(dict.fromkeys([*report.columns, *COUNTER_COLUMNS])))
    frame = derive(frame.assign(duration_ns=frame["ncu_duration_ns"]))
    rows = []
    for work in known_work:
        found = frame[frame["kernel_name"].str.contains(work["kernel"], regex=True)]
        measured = float(found[work["column"]].iloc[0]) if len(found) else float("nan")
        error = abs(measured - work["expected"]) / work["expected"] * 100
        rows.append({"check": work["check"], "kernel": found["kernel_name"].iloc[0] if len(found) else "(not found)",
                     "expected": work["expected"], "measured": measured, "unit": work["unit"], "error_pct": error,
                     "tolerance_pct": work["tolerance_pct"], "passed": bool(error <= work["tolerance_pct"])})
    return pd.DataFrame(rows)
