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


def ordered_ceilings(measured: dict) -> tuple[dict, str | None]:
    """Memory ceilings rise toward the SM (DRAM < L2 < L1): an L1 ceiling at or below the L2 one was not reached by
    its kernel, so it is dropped (None), with the reason, rather than put a slower level under the roofline."""
    l1, l2 = measured.get("l1_gb_s"), measured.get("l2_gb_s")
    if l1 is None or l2 is None or l1 > l2:
        return measured, None
    return {**measured, "l1_gb_s": None}, (f"the L1 read kernel reached {l1:,.0f} GB/s, not above the L2 ceiling "
                                           f"({l2:,.0f} GB/s): it did not run at L1's bandwidth; no L1 ceiling")
