"""A run's summary for the history, and change points over the history's runs.

`run_rows(kernels, info, pct_of_roof, limiter)`: the long rows one run appends (`schema.HISTORY_ROW_COLUMNS`):
the gate's measurements at every scope (`gate.measure`: total, phases, categories, sites, kernels with
launches, time per launch and efficiency), with a 95 % interval on each kernel's time per launch (from its own
launches, problem by problem: `noise.launch_intervals`); per kernel also achieved occupancy where counters were
collected, and % of roof and the limiter of most of its time where the caller gives them per launch; and the
step: median step time with its distribution-free 95 %
interval over the timed steps (order statistics), the host wait (step time minus the profiled iteration's GPU
busy time), the busy time, and the host's launch cost.

`change_points(rows, runs)`: a noise-aware step detector, run on each series (one value per run, in run order).
The runs since the last change point (the segment, at least `WINDOW`, at most `LONGEST_SEGMENT` of the latest)
are the reference, as a rolling baseline is the gate's: run i is a change point when it and the next run
(`LASTING`) both lie beyond the band on the same side of the segment's median, and the median of the runs from
i on (up to `WINDOW`) does too. The band is max(`sigmas` x the segment's robust spread (MAD scaled to a
standard deviation), the relative floor of the series' kind (the gate's: `Thresholds` 5 % for kernels and
sites, 0.5 % for aggregates, `gate.STEP_EFFECT` for step time and host wait, whose run-to-run spread is
wide), the runs' own interval half-width). So a change point is the first run the gate would fail whose next
run fails too: a one-run spike is not a change, a change in the last 2 runs is found at its run, and a run
that merely lies at the edge of the noise before a change is not taken for it. After a change point the
segment starts again at it.

`moved(rows, before, changed)`, and `moved_sites` in words: what moved at a change point, site by site (the
gate's matching: kernel name, phase, launching op, over its launch configurations), in the first changed run
against the segment before it, with the total kernel time's change beside the sum of what is named.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssmprof.analysis.change.gate import (
    GATE_KEY,
    LAUNCHES,
    MAD_TO_SIGMA,
    PER_LAUNCH,
    ROW_KEY,
    SITE,
    STEP_EFFECT,
    STEP_METRICS,
    TIME,
    Thresholds,
    _shape_change,
    config_counts,
    measure,
)
from ssmprof.analysis.launches.frame import WEIGHT, time_weighted_by
from ssmprof.analysis.step.host import busy_ns
from ssmprof.analysis.trust.noise import Interval, launch_intervals
from ssmprof.schema import LAUNCH_CONFIG, RunInfo

WINDOW = 3  # fewest runs a change is judged against; runs after it its shift is taken over
LASTING = 2  # runs in a row that must all lie beyond the band: one is a spike, not a change
FEWEST_RUNS = WINDOW + LASTING  # runs a history needs before it can hold a change point
LONGEST_SEGMENT = 10  # runs before a position it is judged against, at most (the gate's --last)
Z95 = 1.959964
SERIES_KEY = ["scope", "kernel_name", "phase", "launch_op", "category", *LAUNCH_CONFIG, "metric"]


# --- one run's rows


def median_interval(values: list[float]) -> tuple[float, float, float]:
    """(median, low, high): the distribution-free 95 % interval of the median (order statistics at ranks
    n/2 -+ 1.96 sqrt(n)/2, clipped to the sample: the range for 5 values)."""
    ordered = np.sort(np.asarray(values, dtype=float))
    n = len(ordered)
    k = int(np.clip(np.floor((n - Z95 * np.sqrt(n)) / 2), 0, (n - 1) // 2))
    return float(np.median(ordered)), float(ordered[k]), float(ordered[n - 1 - k])


def _kernel_intervals(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per kernel (`GATE_KEY`): the 95 % interval of its mean time per launch, from its own launches problem by
    problem (`noise.launch_intervals`, the model compare uses); NaN for a kernel whose every problem is launched
    once (no spread of its own: the step's is not lent, it would widen the change-point band tenfold)."""
    frame = kernels.assign(launch_op=kernels["launch_op"].fillna("").astype(str))
    none = Interval(1.0, np.nan, np.nan, 1)
    table = launch_intervals(frame, GATE_KEY, none)
    launches = frame.groupby(GATE_KEY).size().rename("launches").reset_index()
    table = table.merge(launches, on=GATE_KEY)
    return table.assign(low=table["time_ns_low"] / table["launches"],
                        high=table["time_ns_high"] / table["launches"])[GATE_KEY + ["low", "high"]]


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
        filled = out[column].fillna(0 if column in LAUNCH_CONFIG else "")
        out[column] = filled.astype("int64" if column in LAUNCH_CONFIG else str)
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
           window: int = WINDOW) -> list[tuple[int, float, float, int]]:
    """Change points of one series (NaN: run without the value): [(position, shift, band, segment start)]; see
    the module docstring for the rule."""
    n, found = len(values), []
    start, i = 0, window
    while i <= n - LASTING:
        segment = values[max(start, i - LONGEST_SEGMENT):i]
        segment = segment[~np.isnan(segment)]
        after = values[i:i + window]
        if len(segment) < window or np.isnan(after[:LASTING]).any():
            i += 1
            continue
        center = float(np.median(segment))
        spread = MAD_TO_SIGMA * float(np.median(np.abs(segment - center)))
        halves = half_widths[max(start, i - LONGEST_SEGMENT):i + window]
        own = float(np.nanmedian(halves)) if not np.isnan(halves).all() else 0.0
        band = max(sigmas * spread, floor * abs(center), own)
        lead = after[:LASTING] - center
        shift = float(np.nanmedian(after)) - center
        if (np.all(lead > band) or np.all(lead < -band)) and abs(shift) > band and np.sign(shift) == np.sign(lead[0]):
            found.append((i, shift, band, max(start, i - LONGEST_SEGMENT)))
            start, i = i, i + window
            continue
        i += 1
    return found


def change_points(rows: pd.DataFrame, runs: pd.DataFrame, thresholds: Thresholds = Thresholds(),
                  window: int = WINDOW) -> pd.DataFrame:
    """Every change point of every series of one configuration. `rows`: history rows (`run_id`, the series key,
    value, low, high); `runs`: the configuration's runs in order (`run_id`, `commit`). One row per change point:
    the series key, `position` (index of the first run that changed), `since` (index of the first run of the
    segment it was judged against), `run_id`, `commit_before`, `commit_after`, `before` (the segment's median),
    `after` (the median of the runs from it on, up to `window`), `shift`, `band`; sorted by position."""
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
        for i, shift, band, since in detect(values, halves, floor, thresholds.sigmas, window):
            before = float(np.nanmedian(values[since:i]))
            out.append({**dict(zip(SERIES_KEY, key, strict=True)), "position": i, "since": since, "shift": shift,
                        "band": band, "before": before, "after": before + shift})
    columns = SERIES_KEY + ["position", "since", "shift", "band", "before", "after"]
    found = pd.DataFrame(out, columns=columns)
    found = _impact_floor(found, rows, thresholds)
    found["run_id"] = found["position"].map(lambda i: runs["run_id"].iloc[i])
    found["commit_before"] = found["position"].map(lambda i: runs["commit"].iloc[i - 1])
    found["commit_after"] = found["position"].map(lambda i: runs["commit"].iloc[i])
    return found.sort_values(["position", "scope", "metric"], kind="stable", ignore_index=True)


def _impact_floor(found: pd.DataFrame, rows: pd.DataFrame, thresholds: Thresholds) -> pd.DataFrame:
    """Time changes of a kernel, site, phase or category costing less than `min_impact` of the kernel time are
    not change points (the gate's floor: a sub-microsecond kernel's 5 %, or a category of a few microseconds'
    0.5 %, is noise in the step)."""
    total = rows[(rows["scope"] == "total") & (rows["metric"] == TIME)]["value"].median()
    launches = rows[(rows["scope"] == "kernel") & (rows["metric"] == LAUNCHES)].groupby(GATE_KEY)["value"].median()
    per_launch = found["metric"] == PER_LAUNCH
    cost = found["shift"].abs().where(~per_launch, found["shift"].abs() * pd.Series(
        [launches.get(tuple(r), 1.0) for r in found[GATE_KEY].itertuples(index=False)], index=found.index))
    timed = found["metric"].isin([TIME, PER_LAUNCH]) & found["scope"].isin(["site", "kernel", "phase", "category"])
    keep = ~timed | (cost >= thresholds.min_impact * total)
    return found[keep].reset_index(drop=True)


def moved(rows: pd.DataFrame, before: list[str], changed: str, thresholds: Thresholds = Thresholds()) -> pd.DataFrame:
    """The sites (kernel name, phase, launching op: the gate's matching) that moved at a change point, largest
    change first: those whose time in the first changed run (`changed`, a run id) differs from its median over the
    segment before it (`before`, run ids) by more than the kernel floor and the gate's impact floor (a site absent
    from a run counts 0 us there). Indexed by site; columns `was`, `now`, `change` (ns)."""
    sites = rows[(rows["scope"] == "site") & (rows["metric"] == TIME)]
    table = sites.pivot_table(index=SITE, columns="run_id", values="value", aggfunc="sum")
    table = table.reindex(columns=[*before, changed]).fillna(0.0)
    found = pd.DataFrame({"was": table[before].median(axis=1), "now": table[changed]})
    found["change"] = found["now"] - found["was"]
    total_was = _total(rows, before)
    keep = (found["change"].abs() > thresholds.min_effect * found["was"]) & \
           (found["change"].abs() >= thresholds.min_impact * total_was)
    found = found[keep]
    return found.loc[found["change"].abs().sort_values(ascending=False, kind="stable").index]


def _total(rows: pd.DataFrame, runs: list[str]) -> float:
    """The median total kernel time (ns) over `runs` (run ids)."""
    totals = rows[(rows["scope"] == "total") & (rows["metric"] == TIME)].set_index("run_id")["value"]
    return float(totals.reindex(runs).median())


def moved_sites(rows: pd.DataFrame, before: list[str], changed: str,
                thresholds: Thresholds = Thresholds()) -> list[str]:
    """What moved at a change point, in words, largest first: each site that moved (`moved`), with its launch
    configurations where they changed; then the total kernel time's change beside the sum of the sites listed, so
    that what is named can be checked against the change it explains."""
    found = moved(rows, before, changed, thresholds)
    if found.empty:
        return []
    total_was, total_now = _total(rows, before), _total(rows, [changed])
    shapes = _site_configs(rows, before, changed)
    lines = []
    for site, was, now, change in found[["was", "now", "change"]].itertuples(name=None):
        old, new = shapes.get(site, ([], []))
        what = "" if old == new else {0: " new kernel", 1: " removed kernel"}.get(
            0 if not old else 1 if not new else 2, f" config changed: {_shape_change(old, new)},")
        percent = f" ({100 * change / was:+.0f} %)" if was else ""
        lines.append(f"{site[0]} [{site[1]}]{what} {was / 1e3:.1f} -> {now / 1e3:.1f} us{percent}")
    lines.append(f"total kernel time {total_was / 1e3:.1f} -> {total_now / 1e3:.1f} us "
                 f"({100 * (total_now - total_was) / total_was:+.1f} %); the sites above: "
                 f"{found['change'].sum() / 1e3:+.1f} us")
    return lines


def _site_configs(rows: pd.DataFrame, before: list[str], changed: str) -> dict[tuple, tuple[list[str], list[str]]]:
    """Per site: its launch configurations (with launch counts) in most of the runs before, and in `changed`."""
    kernel = rows[(rows["scope"] == "kernel") & (rows["metric"] == LAUNCHES)].rename(columns={"value": "launches"})
    kernel = kernel.sort_values(LAUNCH_CONFIG)  # each site's configurations in order, labelled once for every run
    kernel = kernel.assign(config=config_counts(kernel))

    def configs(run_id: str) -> dict[tuple, tuple[str, ...]]:
        return {site: tuple(labels) for site, labels in kernel[kernel["run_id"] == run_id].groupby(SITE)["config"]}

    earlier = [configs(run_id) for run_id in before]
    usual = {}
    for site in set().union(*earlier):
        seen = pd.Series([shape.get(site, ()) for shape in earlier]).value_counts()
        usual[site] = list(seen.index[0])
    now = configs(changed)
    return {site: (usual.get(site, []), list(now.get(site, ()))) for site in set(usual) | set(now)}
