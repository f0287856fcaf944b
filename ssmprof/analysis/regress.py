"""Kernel-efficiency regression gate: baselines from repeated runs, noise-aware thresholds.

For each kernel (name, launch configuration, phase) and metric, a baseline keeps the median over the
baseline runs and their spread (median absolute deviation, scaled to a standard deviation). A current
value is a regression when it is worse than the median by more than max(`min_effect` x median,
`sigmas` x spread, `min_time_ns` for durations): the minimum effect keeps perfectly repeatable kernels
from alarming on tiny changes, the spread keeps noisy kernels from alarming on noise, and the time floor
keeps microsecond kernels from alarming on timer jitter. A slower kernel must also cost at least
`min_impact` of the iteration's kernel time: a single-block loss kernel varies by several per cent from run
to run, which no CI should fail on, while a planted worse SSD chunk size costs far more. Checked on real
reruns (`tests/data/regress-reruns-h200`: without the floors every rerun alarms on jitter; with them none
does, and the planted one fails on its three kernels); the numbers are in the README, tested in
tests/test_readme_numbers.py.

Pure frame logic: the baseline file is `schema.Baseline`, read and written by `pipeline.gate`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssmprof.analysis.compare import per_kernel
from ssmprof.analysis.frame import LAUNCH_KEY
from ssmprof.errors import SsmprofError

# metric -> the direction that is worse
METRICS = {"time_per_launch_ns": "higher", "dram_throughput_pct": "lower", "flop_per_s": "lower",
           "l2_hit_rate_pct": "lower", "l1_hit_rate_pct": "lower"}
MAD_TO_SIGMA = 1.4826


def efficiency(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per kernel (`LAUNCH_KEY`): launches and each metric of `METRICS`. `kernels`: an `analysis_frame`."""
    table = per_kernel(kernels)
    table["time_per_launch_ns"] = table["time_ns"] / table["launches"]
    return table[LAUNCH_KEY + ["launches"] + list(METRICS)]


def build_baseline(runs: list[pd.DataFrame]) -> pd.DataFrame:
    """Long frame: LAUNCH_KEY + metric, median, spread, runs (how many runs had the kernel)."""
    if len(runs) < 2:
        raise SsmprofError("a baseline needs at least 2 runs of the same configuration, to know the noise")
    long = pd.concat([efficiency(k).assign(run=i) for i, k in enumerate(runs)]).melt(
        id_vars=LAUNCH_KEY + ["run"], value_vars=list(METRICS), var_name="metric").dropna(subset=["value"])
    grouped = long.groupby(LAUNCH_KEY + ["metric"])["value"]
    baseline = grouped.median().rename("median").to_frame()
    baseline["spread"] = grouped.apply(lambda v: MAD_TO_SIGMA * np.median(np.abs(v - np.median(v))))
    baseline["runs"] = grouped.size()
    return baseline.reset_index()


def regressions(baseline: pd.DataFrame, current: pd.DataFrame, min_effect: float = 0.05,
                sigmas: float = 3.0, min_time_ns: float = 1000.0, min_impact: float = 0.001) -> pd.DataFrame:
    """Every baseline row with the current value, the allowed band and `regressed`; kernels missing from
    the current run are reported with `missing=True` (not as regressions)."""
    now = efficiency(current).melt(id_vars=LAUNCH_KEY + ["launches"], value_vars=list(METRICS), var_name="metric",
                        value_name="current")
    table = baseline.merge(now, on=LAUNCH_KEY + ["metric"], how="left")
    floor = np.where(table["metric"] == "time_per_launch_ns", min_time_ns, 0.0)
    table["allowed"] = np.maximum.reduce([min_effect * table["median"].abs(), sigmas * table["spread"], floor])
    worse_if_higher = table["metric"].map(METRICS) == "higher"
    delta = np.where(worse_if_higher, table["current"] - table["median"], table["median"] - table["current"])
    table["worse_by"] = delta
    # share of the iteration's kernel time that a slower kernel costs (durations only)
    impact = np.where(table["metric"] == "time_per_launch_ns",
                      delta * table["launches"] / current["duration_ns"].sum(), np.inf)
    table["regressed"] = (delta > table["allowed"]) & (impact >= min_impact) & table["current"].notna()
    table["missing"] = table["current"].isna()
    return table
