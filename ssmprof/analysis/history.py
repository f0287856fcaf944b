"""A run's summary for the history, and change points over the history's runs.

`run_rows(kernels, info, ceilings)`: the long rows one run appends (`schema.HISTORY_ROW_COLUMNS`): the gate's
measurements at every scope (`regress.measure`: total, phases, categories, sites, kernels with launches, time
per launch and efficiency), with a 95 % interval on each kernel's time per launch (mean +- 1.96 standard
errors over its launches); per kernel also % of roof, achieved occupancy and the limiter of most of its time
where counters were collected; and the step: median step time with its distribution-free 95 % interval over
the timed steps (order statistics), the host wait (step time minus the profiled iteration's GPU busy time), the
busy time, and the host's launch cost.

`change_points(series)`: a noise-aware step detector, run on each series (one value per run, in run order).
At every position i with `WINDOW` runs on each side, the runs before and the runs from i on are compared: i is
a change point when (1) the two windows' value ranges do not overlap (every run after is above every run
before, or below), and (2) the shift of their medians exceeds the band a change must exceed: max(`sigmas` x
the pooled robust spread of the runs around their window's median, the relative floor of the series' kind
(the gate's: `Thresholds` 5 % for kernels and sites, 0.5 % for aggregates, `regress.STEP_EFFECT` for step time
and host wait, whose run-to-run spread is wide), the runs' own interval half-width). Where neighbouring
positions qualify (within `WINDOW` runs), the one whose windows' means differ most is the change point (the
mean, unlike the median, falls off on both sides of the true position). Both conditions are needed: range
separation alone fires on noise one run in twenty, a shift alone on one outlier run. A change in the last
`WINDOW - 1` runs is not found until `WINDOW` runs after it exist.

`moved_kernels(history, before, after)`: what moved across a change point, with the gate's launch-configuration
matching: kernels whose time per launch differs between the windows beyond the kernel band, and sites whose
launch configurations changed (`regress._shape_change`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssmprof.analysis.frame import WEIGHT, time_weighted_by
from ssmprof.analysis.host import busy_ns
from ssmprof.analysis.regress import (
    CONFIG,
    GATE_KEY,
    LAUNCHES,
    MAD_TO_SIGMA,
    PER_LAUNCH,
    ROW_KEY,
    STEP_EFFECT,
    STEP_METRICS,
    TIME,
    Thresholds,
    _configs,
    _shape_change,
    config_label,
    measure,
)
from ssmprof.schema import RunInfo

WINDOW = 3  # runs on each side of a change point
Z95 = 1.959964
SERIES_KEY = ["scope", "kernel_name", "phase", "launch_op", "category", *CONFIG, "metric"]


# --- one run's rows


def median_interval(values: list[float]) -> tuple[float, float, float]:
    """(median, low, high): the distribution-free 95 % interval of the median (order statistics at ranks
    n/2 -+ 1.96 sqrt(n)/2, clipped to the sample: the range for 5 values)."""
    ordered = np.sort(np.asarray(values, dtype=float))
    n = len(ordered)
    k = int(np.clip(np.floor((n - Z95 * np.sqrt(n)) / 2), 0, (n - 1) // 2))
    return float(np.median(ordered)), float(ordered[k]), float(ordered[n - 1 - k])


def _kernel_intervals(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per kernel (`GATE_KEY`): the 95 % interval of its mean time per launch."""
    frame = kernels.assign(launch_op=kernels["launch_op"].fillna("").astype(str))
    grouped = frame.groupby(GATE_KEY)["duration_ns"]
    stats = grouped.agg(["mean", "std", "size"]).reset_index()
    half = Z95 * stats["std"].fillna(0) / np.sqrt(stats["size"])
    return stats.assign(low=stats["mean"] - half, high=stats["mean"] + half)[GATE_KEY + ["low", "high"]]


def _efficiency_rows(kernels: pd.DataFrame, per_launch_roof: pd.DataFrame | None,
                     limiter: pd.Series | None) -> pd.DataFrame:
    """Per kernel: time-weighted % of roof and achieved occupancy, and the limiter of most of its time."""
    frame = kernels.assign(launch_op=kernels["launch_op"].fillna("").astype(str),
                           category=kernels["category"].astype(str))
    columns = ["achieved_occupancy_pct"]
    if per_launch_roof is not None:
        frame["pct_of_roof"] = per_launch_roof.to_numpy()
        columns.append("pct_of_roof")
    rates = time_weighted_by(frame, GATE_KEY, columns)
    rows = rates.melt(id_vars=GATE_KEY, value_vars=columns, var_name="metric").dropna(subset=["value"])
    if limiter is not None:
        frame["limiter"] = limiter.to_numpy()
        time = frame.groupby(GATE_KEY + ["limiter"], as_index=False)[WEIGHT].sum()
        top = time.sort_values(WEIGHT, ascending=False, kind="stable").drop_duplicates(GATE_KEY)
        rows = pd.concat([rows, top[GATE_KEY].assign(metric="limiter", value=np.nan, label=top["limiter"])])
    categories = frame.drop_duplicates(GATE_KEY)[GATE_KEY + ["category"]]
    return rows.merge(categories, on=GATE_KEY, how="left").assign(scope="kernel")


def step_rows(info: RunInfo, kernels: pd.DataFrame) -> pd.DataFrame:
    """The step's rows: step time (median and interval over the timed steps), GPU busy time, host wait and
    launch cost."""
    step, low, high = median_interval(info.harness.step_times_ms or [info.harness.step_ms])
    busy = busy_ns(kernels) / 1e6
    launch = info.collectors.harness.host_launch_us
    rows = [("step_ms", step, low, high), ("gpu_busy_ms", busy, np.nan, np.nan),
            ("host_wait_ms", max(step - busy, 0.0), max(low - busy, 0.0), max(high - busy, 0.0))]
    if launch is not None:
        rows.append(("host_launch_us", float(launch), np.nan, np.nan))
    return pd.DataFrame(rows, columns=["metric", "value", "low", "high"]).assign(scope="step")


def run_rows(kernels: pd.DataFrame, info: RunInfo, pct_of_roof: pd.Series | None = None,
             limiter: pd.Series | None = None) -> pd.DataFrame:
    """The rows a run appends to the history (`schema.HISTORY_ROW_COLUMNS`); `kernels`: its analysis frame
    (one rank's), `pct_of_roof` and `limiter`: per launch, where counters were collected."""
    rows = measure(kernels)
    intervals = _kernel_intervals(kernels).assign(scope="kernel", metric=PER_LAUNCH)
    rows = rows.merge(intervals, on=["scope", "metric", *GATE_KEY], how="left")
    counted = kernels["ncu_duration_ns"].notna().any()
    parts = [rows, step_rows(info, kernels)]
    if counted:
        parts.append(_efficiency_rows(kernels, pct_of_roof, limiter))
    out = pd.concat(parts, ignore_index=True)
    for column in ROW_KEY:
        out[column] = out[column].fillna(0).astype("int64") if column in CONFIG else out[column].fillna("").astype(str)
    out["label"] = out["label"].fillna("").astype(str) if "label" in out else ""
    return out[ROW_KEY + ["metric", "value", "low", "high", "label"]]


# --- change points over runs


def relative_floor(scope: str, metric: str, thresholds: Thresholds = Thresholds()) -> float:
    """The smallest relative shift that counts for a series of this scope and metric."""
    if metric in STEP_METRICS:
        return STEP_EFFECT
    if scope in ("total", "phase", "category"):
        return thresholds.aggregate_effect
    return thresholds.min_effect


def detect(values: np.ndarray, half_widths: np.ndarray, floor: float, sigmas: float = 3.0,
           window: int = WINDOW) -> list[tuple[int, float, float]]:
    """Change points of one series (NaN: run without the value): [(position, shift, band)]; see the module
    docstring for the rule."""
    n = len(values)
    candidates = []
    for i in range(window, n - window + 1):
        before, after = values[i - window:i], values[i:i + window]
        if np.isnan(before).any() or np.isnan(after).any():
            continue
        separated = before.max() < after.min() or before.min() > after.max()
        if not separated:
            continue
        b, a = np.median(before), np.median(after)
        residuals = np.concatenate([before - b, after - a])
        spread = MAD_TO_SIGMA * np.median(np.abs(residuals))
        own = np.nanmedian(half_widths[i - window:i + window]) if not np.isnan(half_widths).all() else 0.0
        band = max(sigmas * spread, floor * abs(b), np.nan_to_num(own))
        if abs(a - b) > band:
            candidates.append((abs(after.mean() - before.mean()), i, float(a - b), float(band)))
    chosen: list[tuple[int, float, float]] = []
    for _, i, shift, band in sorted(candidates, key=lambda c: -c[0]):
        if all(abs(i - j) >= window for j, _, _ in chosen):
            chosen.append((i, shift, band))
    return sorted(chosen)


def change_points(rows: pd.DataFrame, runs: pd.DataFrame, thresholds: Thresholds = Thresholds(),
                  window: int = WINDOW) -> pd.DataFrame:
    """Every change point of every series of one configuration. `rows`: history rows (`run_id`, the series key,
    value, low, high); `runs`: the configuration's runs in order (`run_id`, `commit`). One row per change point:
    the series key, `position` (index of the first run after the change), `run_id`, `commit_before`,
    `commit_after`, `before`, `after` (window medians), `shift`, `band`; sorted by position."""
    order = {run: i for i, run in enumerate(runs["run_id"])}
    numeric = rows[rows["metric"] != "limiter"]
    out = []
    for key, series in numeric.groupby(SERIES_KEY, sort=False):
        positions = series["run_id"].map(order).to_numpy()
        values = np.full(len(runs), np.nan)
        values[positions] = series["value"].to_numpy()
        halves = np.full(len(runs), np.nan)
        halves[positions] = ((series["high"] - series["low"]) / 2).to_numpy()
        floor = relative_floor(key[0], key[-1], thresholds)
        for i, shift, band in detect(values, halves, floor, thresholds.sigmas, window):
            before, after = values[i - window:i], values[i:i + window]
            out.append({**dict(zip(SERIES_KEY, key, strict=True)), "position": i, "shift": shift, "band": band,
                        "before": float(np.median(before)), "after": float(np.median(after))})
    columns = SERIES_KEY + ["position", "shift", "band", "before", "after"]
    found = pd.DataFrame(out, columns=columns)
    found = _impact_floor(found, rows, thresholds)
    found["run_id"] = found["position"].map(lambda i: runs["run_id"].iloc[i])
    found["commit_before"] = found["position"].map(lambda i: runs["commit"].iloc[i - 1])
    found["commit_after"] = found["position"].map(lambda i: runs["commit"].iloc[i])
    return found.sort_values(["position", "scope", "metric"], kind="stable", ignore_index=True)


def _impact_floor(found: pd.DataFrame, rows: pd.DataFrame, thresholds: Thresholds) -> pd.DataFrame:
    """Kernel and site time changes costing less than `min_impact` of the kernel time are not change points
    (the gate's floor: a sub-microsecond kernel's 5 % is noise in the step)."""
    total = rows[(rows["scope"] == "total") & (rows["metric"] == TIME)]["value"].median()
    launches = rows[(rows["scope"] == "kernel") & (rows["metric"] == LAUNCHES)].groupby(GATE_KEY)["value"].median()
    per_launch = found["metric"] == PER_LAUNCH
    cost = found["shift"].abs().where(~per_launch, found["shift"].abs() * pd.Series(
        [launches.get(tuple(r), 1.0) for r in found[GATE_KEY].itertuples(index=False)], index=found.index))
    timed = found["metric"].isin([TIME, PER_LAUNCH]) & found["scope"].isin(["site", "kernel"])
    keep = ~timed | (cost >= thresholds.min_impact * total)
    return found[keep].reset_index(drop=True)


def moved_kernels(rows: pd.DataFrame, before: list[str], after: list[str], band: float = 0.05) -> list[str]:
    """What moved between two windows of runs (run ids), in words, largest time change first: kernels whose
    median time per launch changed by more than `band` (and the gate's impact floor), and sites whose launch
    configurations changed."""
    kernel = rows[(rows["scope"] == "kernel") & rows["metric"].isin([PER_LAUNCH, LAUNCHES])]

    def medians(ids: list[str]) -> pd.DataFrame:
        side = kernel[kernel["run_id"].isin(ids)]
        present = side.groupby(GATE_KEY)["run_id"].nunique()
        table = side.pivot_table(index=GATE_KEY, columns="metric", values="value", aggfunc="median")
        return table[present.reindex(table.index) * 2 > len(ids)]  # in most of the window's runs

    old, new = medians(before), medians(after)
    total = rows[(rows["scope"] == "total") & rows["run_id"].isin(before)]["value"].median()
    lines = []
    both = old.index.intersection(new.index)
    change = (new.loc[both, PER_LAUNCH] - old.loc[both, PER_LAUNCH])
    cost = change * old.loc[both, LAUNCHES]
    moved = change[(change.abs() > band * old.loc[both, PER_LAUNCH]) & (cost.abs() >= Thresholds().min_impact * total)]
    for key in moved.abs().sort_values(ascending=False).index:
        name = dict(zip(GATE_KEY, key, strict=True))
        was, now = old.loc[key, PER_LAUNCH], new.loc[key, PER_LAUNCH]
        lines.append((abs(cost[key]), f"{name['kernel_name']} [{name['phase']}] {config_label(name)}: {was / 1e3:.1f} "
                                      f"-> {now / 1e3:.1f} us per launch ({100 * (now - was) / was:+.0f} %)"))
    lines += _config_changes(old, new)
    return [text for _, text in sorted(lines, key=lambda line: -line[0])]


def _config_changes(old: pd.DataFrame, new: pd.DataFrame) -> list[tuple[float, str]]:
    """Sites whose launch configurations (with their launch counts) differ between two windows' medians."""
    def shapes(table: pd.DataFrame) -> dict:
        frame = table.reset_index()
        return {site: (_configs(part.rename(columns={LAUNCHES: "launches"})),
                       float((part[PER_LAUNCH] * part[LAUNCHES]).sum()))
                for site, part in frame.groupby(["kernel_name", "phase", "launch_op"])}

    was, now = shapes(old), shapes(new)
    lines = []
    for site in sorted(set(was) | set(now)):
        (old_shape, old_time), (new_shape, new_time) = was.get(site, ([], 0.0)), now.get(site, ([], 0.0))
        if old_shape != new_shape:
            what = {0: "new kernel", 1: "removed kernel"}.get(0 if not old_shape else 1 if not new_shape else 2,
                                                               "config changed")
            lines.append((abs(new_time - old_time), f"{site[0]} [{site[1]}] {what}: "
                          f"{_shape_change(old_shape, new_shape)}, {(new_time - old_time) / 1e3:+.1f} us"))
    return lines

