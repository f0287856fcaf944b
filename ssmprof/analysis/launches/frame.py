"""The analysis frame: a run's kernel table made ready for every analysis, once, when the run is loaded.

`analysis_frame(kernels)` adds each launch's `category` (the rule table of `categories`) and the derived
quantities of `derived.derive` (FLOPs by path, bytes, intensities, rates). The pipeline makes it once per
run and passes it on; every analysis takes it and assumes those columns exist. Beside it, the things several
analyses share: the key that matches a kernel across runs, the time-weighted mean, and whether launches have
counters at all.
"""

from __future__ import annotations

import pandas as pd

from ssmprof.analysis.launches.categories import with_categories
from ssmprof.analysis.launches.derived import derive
from ssmprof.schema import LAUNCH_CONFIG, RunInfo

# A kernel across runs (compare, baseline, regress): its name, phase and launch configuration. Not the
# profiler's `counters.CONFIG_KEY`, which is how Nsight Compute counts invocations within one run.
LAUNCH_KEY = ["kernel_name", "phase", *LAUNCH_CONFIG]
WEIGHT = "duration_ns"  # every time-weighted mean weighs by the launch's timeline duration
def analysis_frame(kernels: pd.DataFrame) -> pd.DataFrame:
    """The kernel table (as `schema.read_run` returns it) with `category` and the derived columns."""
    return derive(with_categories(kernels))


def has_counters(kernels: pd.DataFrame) -> bool:
    """Whether any of these launches carries Nsight Compute counters (none in a `--counters none` run)."""
    return bool(kernels["ncu_duration_ns"].notna().any())


def profiled_with_counters(info: RunInfo) -> bool:
    """Whether the run's counter collector ran at all (run.json's mode; `--counters none` writes "none")."""
    return info.collectors.counters.mode != "none"


def time_weighted(values: pd.Series, weights: pd.Series) -> float:
    """Mean of `values` weighted by `weights` over the launches that have a value (NaN: no counters);
    NaN where none has one or their weights sum to zero."""
    valid = values.notna()
    total = weights[valid].sum()
    return float((values[valid] * weights[valid]).sum() / total) if total else float("nan")


def time_weighted_by(frame: pd.DataFrame, by: list[str] | str, columns: list[str]) -> pd.DataFrame:
    """`time_weighted` of each column per group of `by` (one row per group, `by` as columns)."""
    weighted = pd.DataFrame({column: frame[column] * frame[WEIGHT] for column in columns})
    weights = pd.DataFrame({column: frame[WEIGHT].where(frame[column].notna()) for column in columns})
    keys = [frame[key] for key in ([by] if isinstance(by, str) else by)]
    sums, totals = weighted.groupby(keys).sum(min_count=1), weights.groupby(keys).sum(min_count=1)
    return (sums / totals.where(totals != 0)).reset_index()
