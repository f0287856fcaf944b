"""Calibration verdicts: the toolkit's own derived quantities (`derive`) on kernels of known work.

Running the known-work kernels is the profiler's (`profiler/calibrate.py`, which describes each as a
`known_work` record: check, kernel regex, derived column, expected value, tolerance, unit); judging them
is here, through the same `derive` every analysis uses, so a passing calibration vouches for the formulas
the roofline and the tensor/vector views rely on.
"""

from __future__ import annotations

import pandas as pd

from ssmprof.analysis.launches.derived import derive
from ssmprof.schema import COUNTER_COLUMNS

# Each ceiling as the roofline places kernels against it: (derived quantity, its scale to the ceiling's unit). The
# L2 rate counts the bytes the L2 slices served (`l2_bytes`), as a kernel's L2 intensity does.
CEILING_RATES = {"dram_gb_s": ("dram_bytes", 1e9), "l2_gb_s": ("l2_bytes", 1e9), "l1_gb_s": ("l1_bytes", 1e9),
                 "bf16_tensor_tflops": ("flops_tensor", 1e12), "fp32_tflops": ("flops_fp32", 1e12)}


def _derived(report: pd.DataFrame) -> pd.DataFrame:
    frame = report.reindex(columns=list(dict.fromkeys([*report.columns, *COUNTER_COLUMNS])))
    return derive(frame.assign(duration_ns=frame["ncu_duration_ns"]))


def counter_ceilings(report: pd.DataFrame) -> dict[str, tuple[float, str]]:
    """Per ceiling, the fastest rate a calibration launch reached on its counters over its own counted duration,
    and that launch's kernel: the units and the instrument that place every kernel of a run on its roofline."""
    frame = _derived(report)
    best = {}
    for field, (quantity, scale) in CEILING_RATES.items():
        rates = (frame[quantity] / frame["seconds"] / scale).dropna()
        if not rates.empty:
            best[field] = (float(rates.max()), str(frame.at[rates.idxmax(), "kernel_name"]))
    return best


def combined_ceilings(counted: dict[str, tuple[float, str]], timed: dict) -> tuple[dict, dict[str, str]]:
    """(ceilings, which probe set each): the faster of the two collectors for DRAM, tensor and fp32, whose units
    agree; L2 and L1 from the counters alone, since the event-timed L2 read counts the bytes L1 asks for, more
    than the L2 slices count where Hopper coalesces requests."""
    ceilings: dict[str, str | float | None] = {"source": "measured by ssmprof calibrate"}
    set_by: dict[str, str] = {}
    for field in CEILING_RATES:
        counter_rate, kernel = counted.get(field, (None, ""))
        event_rate = timed.get(field) if field in ("dram_gb_s", "bf16_tensor_tflops", "fp32_tflops") else None
        if event_rate is not None and (counter_rate is None or event_rate > counter_rate):
            ceilings[field], set_by[field] = event_rate, "CUDA events"
        else:
            ceilings[field], set_by[field] = counter_rate, f"Nsight Compute: {kernel}"
    return ceilings, set_by


def evaluate(report: pd.DataFrame, known_work: tuple[dict, ...]) -> pd.DataFrame:
    """One row per check: expected, measured, error %, pass (a check whose kernel is missing fails)."""
    frame = _derived(report)
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
