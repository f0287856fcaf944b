"""Regime maps: how time per token, the SSM kernels' limiters and the analytic SSD model move over a sweep's
grid; where one workload overtakes another; which value of a setting (chunk size) is best.

Every function takes the sweep's complete points as `SweepRun`s (a run's settings, run.json and analysis
frame) or the frames made from them here, and returns a frame; a point's key is its workload, its GPU and
the value of each varied setting (`keys`). Crossovers interpolate in log(setting), the scale sequence
lengths are swept on; a crossing is reported between the two grid points that bracket it, never beyond
the grid. Each crossover is computed twice, on step time and on GPU kernel time per token: where they
disagree, the host (launch gaps) moves the crossing, and the table shows both.

Noise (`analysis.trust.noise`): given the points' kept steps (`step_samples`), each comparison of two points carries the
interval of their ratio, from the bootstrap of their median steps; a metric other than step time (kernel time
from the one profiled iteration) borrows the steps' relative interval. A best value within noise of another is
a tie with it; a crossover is said only where each side has a point beyond noise, and its interval is the two
grid points that bracket the points within noise.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from ssmprof.analysis.common.sections import Sections
from ssmprof.analysis.launches.frame import WEIGHT, has_counters, time_weighted
from ssmprof.analysis.limits.analytic_work import analytic_vs_measured, forward_model
from ssmprof.analysis.limits.limiters import limiters
from ssmprof.analysis.limits.roofline import roofline
from ssmprof.analysis.step.host import busy_ns, slow_iteration, slow_iteration_note
from ssmprof.analysis.step.profiled_iteration import iteration_check
from ssmprof.analysis.summaries.suite import SSM
from ssmprof.analysis.trust.noise import (
    FASTER,
    RERUN_SPREAD_PCT,
    SLOWER,
    WITHIN_NOISE,
    Interval,
    kept_steps,
    ratio_interval,
    speedup_verdict,
)
from ssmprof.hardware import Ceilings
from ssmprof.schema import FAILED, RunInfo

# What a limiter (`analysis.limits.limiters`) means on a regime map: bandwidth (a memory level's bytes, shared memory
# included), compute, or latency (every limiter that is neither: latency by elimination, too few blocks, capped
# occupancy, instruction issue or issue slots).
BANDWIDTH, COMPUTE, LATENCY, NO_COUNTERS = "bandwidth", "compute", "latency", "no counters"
REGIMES = {"DRAM bandwidth": BANDWIDTH, "L2 bandwidth": BANDWIDTH, "shared memory": BANDWIDTH,
           "tensor pipe": COMPUTE, "FMA pipe": COMPUTE, "no counters": NO_COUNTERS}
STEP_METRIC = "step_us_per_item"  # harness step time per token (sample), the end-to-end measure
KERNEL_METRIC = "kernel_us_per_item"  # GPU kernel time per token: the step without the host's gaps
SSM_METRIC = "ssm_us_per_item"  # the SSM kernels' time per token: what chunk size and state size act on

CROSSOVER_AXIS = "seq_len"  # workloads cross over in sequence length (attention's cost per token grows with it)
BEST_AXIS = "chunk_size"  # the SSD setting with a best value per GPU


@dataclass(frozen=True)
class SweepRun:
    """One complete point: its varied settings, run.json, analysis frame, and its GPU's ceilings (or None)."""

    settings: dict[str, Any]
    info: RunInfo
    kernels: pd.DataFrame
    ceilings: Ceilings | None = None

    @property
    def key(self) -> dict[str, Any]:
        return {"workload": self.info.workload.name, "gpu": self.info.gpu.name, **self.settings}


@dataclass(frozen=True, kw_only=True)
class RegimeTables(Sections):
    """The regime frames of a sweep (`regime_tables`), one field a table: what the sweep page shows and `--csv`
    writes, under the field's name. `crossover` is None where the complete points hold one workload, `best`
    where the sweep does not vary BEST_AXIS or no point is complete. Fields are in the order of the sweep's CSV
    files."""

    points: pd.DataFrame
    per_item: pd.DataFrame
    category_time: pd.DataFrame
    ssm_kernels: pd.DataFrame
    regime_map: pd.DataFrame
    model: pd.DataFrame
    steps: pd.DataFrame
    crossover: pd.DataFrame | None = None
    best: pd.DataFrame | None = None
    # the sweep in words: `regime_tables` adds them last, from the tables above
    findings: pd.DataFrame = field(default_factory=pd.DataFrame)


def regime_of(limiter: str) -> str:
    return REGIMES.get(limiter, LATENCY)


def keys(axes: list[str]) -> list[str]:
    """A point's key columns: workload, GPU, and the varied settings."""
    return ["workload", "gpu", *axes]


def per_item(runs: list[SweepRun]) -> pd.DataFrame:
    """One row per point: items (tokens) per step, step time, and step, kernel and SSM-kernel time per item."""
    rows = []
    for run in runs:
        harness, items = run.info.harness, run.info.harness.items_per_step or math.nan  # none: no rate
        kernels = run.kernels
        # where the profiled iteration was slower than the timed steps, its kernel times describe a slower step
        busy_ms = busy_ns(kernels) / 1e6
        excess = slow_iteration(busy_ms, harness.step_ms)
        check = iteration_check(kernels, run.info).iloc[0]
        rows.append({**run.key, "unit": harness.unit, "items_per_step": items, "step_ms": harness.step_ms,
                     STEP_METRIC: 1e3 * harness.step_ms / items,
                     KERNEL_METRIC: kernels["duration_ns"].sum() / 1e3 / items,
                     SSM_METRIC: kernels.loc[kernels["category"] == SSM, "duration_ns"].sum() / 1e3 / items,
                     "peak_gib": (harness.peak_memory_bytes or 0) / 2**30, "busy_ms": busy_ms,
                     "busy_past_step_pct": 100 * excess if excess is not None else np.nan,
                     "profiled_span_ms": check["span_ms"], "representative": check["representative"]})
    return pd.DataFrame(rows)


def step_samples(runs: list[SweepRun]) -> pd.DataFrame:
    """Long: every kept timed step of every point (its key, `step`: its index, `step_ms`)."""
    rows = [{**run.key, "step": index, "step_ms": float(ms)} for run in runs
            for index, ms in enumerate(kept_steps(run.info))]
    return pd.DataFrame(rows)


def _samples(steps: pd.DataFrame, key: list[str]) -> dict[tuple, np.ndarray]:
    """A point's key (the values of `key`) -> its kept steps."""
    return {group if isinstance(group, tuple) else (group,): rows["step_ms"].to_numpy()
            for group, rows in steps.groupby(key, sort=False)}


def _ratio(value_a: float, value_b: float, steps_a: np.ndarray, steps_b: np.ndarray) -> Interval:
    """`value_a / value_b` with the relative interval of the two points' step ratio (`noise.ratio_interval`)."""
    return ratio_interval(steps_a, steps_b).scaled(value_a / value_b)


def category_time(runs: list[SweepRun]) -> pd.DataFrame:
    """Long: per point and category, GPU kernel time per item (us) and its share of the point's kernel time."""
    frames = []
    for run in runs:
        by = run.kernels.groupby("category", as_index=False)["duration_ns"].sum()
        items = run.info.harness.items_per_step
        frames.append(by.assign(us_per_item=by["duration_ns"] / 1e3 / items,
                                share=by["duration_ns"] / by["duration_ns"].sum(), **run.key)
                      .drop(columns="duration_ns"))
    if not frames:
        return pd.DataFrame(columns=["workload", "gpu", "category", "us_per_item", "share"])
    table = pd.concat(frames, ignore_index=True)
    first = [c for c in table.columns if c not in ("category", "us_per_item", "share")]
    return table[[*first, "category", "us_per_item", "share"]]


def ssm_kernels(runs: list[SweepRun]) -> pd.DataFrame:
    """Per point and SSM kernel (short name, phase): time per item, the limiter of most of its time and its
    regime (bandwidth / compute / latency), DRAM throughput (% of peak, time-weighted, Nsight Compute), and
    where the point has ceilings, the roofline verdict of most of its time and % of roof."""
    rows = []
    for run in runs:
        ssm = run.kernels[run.kernels["category"] == SSM]
        if ssm.empty:
            continue
        judged = limiters(ssm, ceilings=run.ceilings)
        if run.ceilings is not None and has_counters(ssm):
            judged = judged.join(roofline(ssm, run.ceilings)[["verdict", "pct_of_roof"]])
        items = run.info.harness.items_per_step
        for (name, phase), group in judged.groupby(["kernel_name", "phase"], sort=False):
            limiter = group.groupby("limiter")[WEIGHT].sum().idxmax()
            row = {**run.key, "kernel_name": name, "phase": phase, "launches": len(group),
                   "us_per_item": group[WEIGHT].sum() / 1e3 / items, "limiter": limiter,
                   "regime": regime_of(limiter),
                   "dram_throughput_pct": time_weighted(group["dram_throughput_pct"], group[WEIGHT])}
            if "verdict" in group:
                row["verdict"] = group.groupby("verdict")[WEIGHT].sum().idxmax()
                row["pct_of_roof"] = time_weighted(group["pct_of_roof"], group[WEIGHT])
            rows.append(row)
    return pd.DataFrame(rows)


def crossover(frame: pd.DataFrame, axis: str, metric: str = STEP_METRIC, by: list[str] | None = None,
              steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """For each pair of workloads (in the frame's order) and each group of `by` (default: GPU): the value of
    `axis` where their `metric` curves cross, interpolated linearly in log(axis) between the two grid points
    that bracket the first change of sign; who is faster below and above it. No crossing in the grid: NaN,
    and who is faster throughout. Points where either workload has no value are left out. With `steps`
    (`step_samples`): the crossing judged against noise (`_noise_bracket`)."""
    by = by if by is not None else ["gpu"]
    workloads = list(dict.fromkeys(frame["workload"]))
    samples = _samples(steps, ["workload", *by, axis]) if steps is not None else None
    rows = []
    for group, points in frame.groupby(by, sort=False) if by else [((), frame)]:
        values = group if isinstance(group, tuple) else (group,)
        labels = dict(zip(by, values, strict=True))
        for a, b in itertools.combinations(workloads, 2):
            curves = [points[points["workload"] == w].set_index(axis)[metric] for w in (a, b)]
            curve = curves[0].sub(curves[1]).dropna().sort_index()
            row = {**labels, "workload_a": a, "workload_b": b, **_crossing(curve, a, b, axis)}
            if samples is not None:
                ratios = {x: _ratio(curves[0][x], curves[1][x], samples[(a, *values) + (x,)],
                                    samples[(b, *values) + (x,)]) for x in curve.index}
                row.update(_noise_bracket(ratios, a, b))
            rows.append(row)
    return pd.DataFrame(rows)


def _noise_bracket(ratios: dict, a: str, b: str) -> dict:
    """Per grid value (sorted), a's metric over b's with its interval: where each is faster beyond noise
    (`noise.speedup_verdict`), the values within noise (`tied_at`), and the crossover's bracket: the last value
    where the first one faster beyond noise is, and the first where the other is (`crossover_low`,
    `crossover_high`). `noise_verdict`: "crossover" where both brackets exist, "within noise" where no value is
    beyond noise, else "no crossover" (one is faster beyond noise, or tied)."""
    verdicts = {x: speedup_verdict(ratio) for x, ratio in sorted(ratios.items())}
    faster = {x: (b if v == FASTER else a) for x, v in verdicts.items() if v in (FASTER, SLOWER)}
    out = {"crossover_low": math.nan, "crossover_high": math.nan, "noise_verdict": WITHIN_NOISE,
           "tied_at": ", ".join(f"{x:,}" for x, v in verdicts.items() if v == WITHIN_NOISE),
           "tied_gap_pct": ", ".join(f"{100 * abs(ratios[x].value - 1):.1f}" for x, v in verdicts.items()
                                     if v == WITHIN_NOISE)}
    if not faster:
        return out
    first = next(iter(faster.values()))
    later = [x for x, who in faster.items() if who != first]
    if not later:
        return {**out, "noise_verdict": "no crossover"}
    out["crossover_high"] = later[0]
    out["crossover_low"] = max(x for x, who in faster.items() if who == first and x < later[0])
    return {**out, "noise_verdict": "crossover"}


def _crossing(diff: pd.Series, a: str, b: str, axis: str) -> dict:
    """`diff` = a's metric - b's over the axis (sorted): the first crossing and who is faster on each side.
    A point where they are equal is the crossing itself; `crossings` counts the changes of the faster one."""
    out = {"points": len(diff), f"crossover_{axis}": math.nan, "faster_below": "", "faster_above": "",
           "crossings": 0}
    x, d = np.log(diff.index.to_numpy(dtype=float)), diff.to_numpy()
    nonzero = np.flatnonzero(d)
    if len(nonzero) == 0:
        return out
    faster = lambda value: a if value < 0 else b  # noqa: E731 -- the lower time is the faster
    signs = np.sign(d[nonzero])
    out["crossings"] = int((signs[1:] != signs[:-1]).sum())
    if out["crossings"] == 0 and len(nonzero) == len(d):
        out["faster_below"] = out["faster_above"] = faster(d[0])
        return out
    if d[0] == 0:  # equal at the first point
        at, above = x[0], nonzero[0]
    else:
        below = 0
        while d[below + 1] != 0 and np.sign(d[below + 1]) == np.sign(d[below]):
            below += 1
        above = below + 1
        # equal at a grid point: that point; else linear in log(axis) between the bracketing points
        at = x[above] if d[above] == 0 else x[below] - d[below] * (x[above] - x[below]) / (d[above] - d[below])
        out["faster_below"] = faster(d[below])
        above = next((i for i in nonzero if i >= above), None)
    out[f"crossover_{axis}"] = math.exp(at)
    out["faster_above"] = faster(d[above]) if above is not None else ""
    return out


def best_value(frame: pd.DataFrame, axis: str, metric: str = STEP_METRIC, by: list[str] | None = None,
               steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per group of `by` (default: workload and GPU; add the other varied settings for a map over several):
    the value of `axis` with the lowest `metric`, that metric, the runner-up value and by how much it is
    slower (%). Ties go to the smaller value. With `steps` (`step_samples`): the interval of the runner-up's
    excess (`runner_up_slower_low_pct`, `_high_pct`), every value within noise of the best (`tied_with`) and
    `noise_verdict`: "best" where none is, else "tie"."""
    by = by if by is not None else ["workload", "gpu"]
    samples = _samples(steps, [*by, axis]) if steps is not None else None
    rows = []
    for group, points in frame.dropna(subset=[metric]).groupby(by, sort=False):
        ranked = points.sort_values([metric, axis], ignore_index=True)
        values = group if isinstance(group, tuple) else (group,)
        labels = dict(zip(by, values, strict=True))
        row = {**labels, "points": len(ranked), f"best_{axis}": ranked.at[0, axis], metric: ranked.at[0, metric],
               f"runner_up_{axis}": ranked.at[1, axis] if len(ranked) > 1 else None,
               "runner_up_slower_pct": 100 * (ranked.at[1, metric] / ranked.at[0, metric] - 1)
               if len(ranked) > 1 else math.nan}
        if samples is not None and len(ranked) > 1:
            best = samples[values + (ranked.at[0, axis],)]
            ratios = [_ratio(ranked.at[i, metric], ranked.at[0, metric], samples[values + (ranked.at[i, axis],)],
                             best) for i in range(1, len(ranked))]
            tied = [ranked.at[i, axis] for i, ratio in enumerate(ratios, 1)
                    if speedup_verdict(ratio) == WITHIN_NOISE]
            row.update({"runner_up_slower_low_pct": 100 * (ratios[0].low - 1),
                        "runner_up_slower_high_pct": 100 * (ratios[0].high - 1),
                        "tied_with": ", ".join(str(v) for v in tied), "noise_verdict": "tie" if tied else "best"})
        rows.append(row)
    return pd.DataFrame(rows)


def ssd_model_check(runs: list[SweepRun]) -> pd.DataFrame:
    """Per point whose sequence mixer has an analytic model (`analytic_work.forward_model`: the SSD chain,
    Mamba-3 SISO, Gated DeltaNet) and counters on its forward scan kernels: the model beside the measured
    FLOPs and DRAM bytes per launch, and their ratios."""
    frames = []
    for run in runs:
        model = forward_model(run.info.workload.config)
        if model is None:
            continue
        checked = analytic_vs_measured(run.kernels, model)
        checked = checked[checked["launches"] > 0]
        if len(checked) and checked["measured_flops"].notna().any():
            frames.append(checked.assign(**run.key))
    if not frames:
        return pd.DataFrame()
    table = pd.concat(frames, ignore_index=True)
    first = list(runs[0].key)
    return table[first + [c for c in table.columns if c not in first]]


def regime_map(ssm: pd.DataFrame, axes: list[str], top: int = 4) -> pd.DataFrame:
    """The `top` SSM kernels (name and phase) with the most time over the sweep, one row per point: their
    regime and DRAM %; what the heatmaps and lines draw."""
    if ssm.empty:
        return ssm
    heaviest = ssm.groupby(["kernel_name", "phase"])["us_per_item"].sum().nlargest(top).index
    chosen = ssm.set_index(["kernel_name", "phase"]).loc[heaviest].reset_index()
    return chosen[[*keys(axes), "kernel_name", "phase", "us_per_item", "regime", "limiter",
                   "dram_throughput_pct"]]


def _bracket(r, prefix: str = "") -> str:
    """`; beyond noise between 2,048 and 8,192, within noise at 4,096 (0.3 %)` from a row of `crossover`."""
    verdict = getattr(r, f"{prefix}noise_verdict", None)
    if verdict is None:
        return ""
    tied = getattr(r, f"{prefix}tied_at")
    ties = f"within noise at {tied} ({getattr(r, f'{prefix}tied_gap_pct')} %)" if tied else ""
    if verdict == "crossover":
        low, high = getattr(r, f"{prefix}crossover_low"), getattr(r, f"{prefix}crossover_high")
        return f"; beyond noise only between {low:,.0f} and {high:,.0f}" + (f", {ties}" if ties else "")
    if verdict == WITHIN_NOISE:
        return "; a tie: within noise at every point"
    return f"; {ties}, no crossover beyond noise" if ties else ""


def _crossover_finding(r, columns) -> tuple:
    """One crossover row in words, on step time, and on kernel time where that crossing differs."""
    axis = next(c for c in columns if c.startswith("crossover_") and c.removeprefix("crossover_") not in
                ("low", "high"))
    setting, at = axis.removeprefix("crossover_"), getattr(r, axis)
    kernel = getattr(r, f"{axis}_kernel_time", math.nan)
    other = r.workload_b if r.faster_below == r.workload_a else r.workload_a
    if math.isnan(at):
        text = (f"{r.faster_below} is faster per token than {other} at every {setting} of the sweep on {r.gpu} "
                f"({r.points} points, step time{_bracket(r)}): no crossover")
        value = "none"
    else:
        text = (f"{r.faster_above} overtakes {r.faster_below} per token at {setting} ≈ {at:,.0f} on {r.gpu} "
                f"(step time, interpolated in log {setting}" + (f"; crosses {r.crossings} times" if r.crossings > 1
                                                                 else "") + f"{_bracket(r)})")
        value = f"{at:,.0f}" if getattr(r, "noise_verdict", "crossover") == "crossover" else "tie"
    if not (math.isnan(kernel) and math.isnan(at)) and f"{kernel:,.0f}" != f"{at:,.0f}":
        where = "no crossing" if math.isnan(kernel) else f"≈ {kernel:,.0f}"
        same = getattr(r, "noise_verdict", "") == getattr(r, "kernel_noise_verdict", "") and all(
            pd.Series([getattr(r, column, math.nan), getattr(r, f"kernel_{column}", math.nan)]).nunique() <= 1
            for column in ("crossover_low", "crossover_high"))
        text += (f"; on GPU kernel time, without the host's gaps, {where} (the steps' spread lent to it"
                 f"{_bracket(r, 'kernel_')})" + ("" if same else ": step and kernel time disagree, the host's gaps "
                                                 "move the crossing"))
    return "crossover", text, value, "crossover"


def _best_finding(r, columns) -> tuple:
    """One best-value row in words, with the runner-up's excess and its interval, or the tie."""
    axis = next(c for c in columns if c.startswith("best_") and not c.endswith("_ssm_time"))
    name = axis.removeprefix("best_")
    fixed = columns[columns.get_loc("gpu") + 1:columns.get_loc("points")]
    at = f" at {', '.join(f'{c}={getattr(r, c)}' for c in fixed)}" if len(fixed) else ""
    best, runner_up = getattr(r, axis), getattr(r, "runner_up_" + name)
    excess = f"runner-up {runner_up} is {r.runner_up_slower_pct:.1f} % slower"
    verdict = getattr(r, "noise_verdict", None)
    if verdict is None:
        return "best", f"best {name} for {r.workload} on {r.gpu}{at}: {best} ({excess})", str(best), "best"
    interval = f"95 % interval {r.runner_up_slower_low_pct:+.1f} % to {r.runner_up_slower_high_pct:+.1f} %"
    if verdict == "tie":
        text = (f"{name} for {r.workload} on {r.gpu}{at}: a tie of {best} with {r.tied_with} (step time; {excess}, "
                f"{interval}, within noise or the {RERUN_SPREAD_PCT} % one configuration moves between runs)")
        return "best", text, f"tie: {best}, {r.tied_with}", "best"
    return ("best", f"best {name} for {r.workload} on {r.gpu}{at}: {best} (step time; {excess}, {interval})",
            str(best), "best")


def regime_findings(tables: RegimeTables, axes: list[str]) -> pd.DataFrame:
    """The sweep in sentences (topic, finding, value, anchor), as a run's findings: crossovers, best values,
    the regimes the heaviest SSM kernels pass through, the analytic model's agreement, points whose profiled
    iteration was slower than their timed steps, failed points."""
    rows: list[tuple] = []
    if tables.crossover is not None:
        rows += [_crossover_finding(r, tables.crossover.columns) for r in tables.crossover.itertuples()]
    if tables.best is not None:
        rows += [_best_finding(r, tables.best.columns) for r in tables.best.itertuples()]
    ssm, model, items = tables.ssm_kernels, tables.model, tables.per_item
    if len(ssm) and axes:
        measured = ssm[ssm["regime"] != NO_COUNTERS]  # a gap in the counters is no change of regime
        for (name, phase), group in measured.groupby(["kernel_name", "phase"], sort=False):
            regimes = group.groupby("regime")["us_per_item"].size()
            if len(regimes) > 1:
                spread = ", ".join(f"{regime} at {count} points" for regime, count in regimes.items())
                rows.append(("regime", f"{name} ({phase}) changes regime over the grid: {spread}",
                             f"{len(regimes)} regimes", "ssm_kernels"))
    if len(model):
        flops = model.dropna(subset=["flops_ratio"])
        if len(flops):
            per_kernel = flops.groupby("kernel", sort=False)["flops_ratio"].agg(["min", "max"])
            spread = ", ".join(f"{kernel} {low:.2f}" + (f"-{high:.2f}" if f"{high:.2f}" != f"{low:.2f}" else "")
                               for kernel, (low, high) in per_kernel.iterrows())
            rows.append(("model", f"measured / analytic FLOPs of the SSM forward kernels across the grid: {spread}",
                         f"{flops['flops_ratio'].median():.2f}", "model"))
    for r in items[items["busy_past_step_pct"].notna()].itertuples() if len(items) else []:
        at = ", ".join(f"{axis}={getattr(r, axis)}" for axis in axes)
        rows.append(("slow", f"{r.workload} {at}: {slow_iteration_note(r.busy_ms, r.step_ms)}",
                     f"{r.busy_past_step_pct:.1f} %", "per_item"))
    odd = items[items["representative"].eq(False)] if "representative" in items else items.iloc[0:0]
    if len(odd):
        named = "; ".join(f"{r.workload} {', '.join(f'{axis}={getattr(r, axis)}' for axis in axes)} "
                          f"{r.profiled_span_ms:.1f} vs {r.step_ms:.1f} ms" for r in odd.itertuples())
        rows.append(("iteration", f"{len(odd)} of {len(items)} points' profiled iterations are not among their "
                     f"timed steps (kernel span or busy time outside the steps' spread of the median): {named}; "
                     "their kernel times stand, their gaps and waits describe slower iterations",
                     f"{len(odd)} points", "per_item"))
    failed = int(tables.points["result"].str.startswith(FAILED).sum()) if len(tables.points) else 0
    if failed:
        rows.append(("failed", f"{failed} point(s) failed: see the points table", str(failed), "points"))
    return pd.DataFrame(rows, columns=["topic", "finding", "value", "anchor"])


def regime_tables(runs: list[SweepRun], axes: list[str], points: pd.DataFrame) -> RegimeTables:
    """The regime frames of a sweep's complete points (`runs`, over the settings `axes`), with the table of
    every point (`points`: run or not, how each ended) and the findings."""
    items = per_item(runs)
    ssm = ssm_kernels(runs)
    samples = step_samples(runs)
    tables = RegimeTables(points=points, per_item=items, category_time=category_time(runs), ssm_kernels=ssm,
                          regime_map=regime_map(ssm, axes), model=ssd_model_check(runs), steps=samples,
                          crossover=_crossovers(items, axes, samples), best=_best_values(items, axes, samples))
    return replace(tables, findings=regime_findings(tables, axes))


def _crossovers(items: pd.DataFrame, axes: list[str], samples: pd.DataFrame) -> pd.DataFrame | None:
    """Where one workload overtakes another over CROSSOVER_AXIS (else the first varied setting), per GPU and
    value of the other settings: on step time, kernel time's crossing and noise beside it. None where the
    complete points hold one workload."""
    if not len(items) or items["workload"].nunique() < 2:
        return None
    axis = CROSSOVER_AXIS if CROSSOVER_AXIS in axes else axes[0]
    by = ["gpu", *(a for a in axes if a != axis)]
    steps = crossover(items, axis, STEP_METRIC, by, samples)
    kernel = crossover(items, axis, KERNEL_METRIC, by, samples)
    noise = ["crossover_low", "crossover_high", "noise_verdict", "tied_at", "tied_gap_pct"]
    return steps.assign(**{f"crossover_{axis}_kernel_time": kernel[f"crossover_{axis}"]},
                        **{f"kernel_{column}": kernel[column] for column in noise})


def _best_values(items: pd.DataFrame, axes: list[str], samples: pd.DataFrame) -> pd.DataFrame | None:
    """The best value of BEST_AXIS per workload, GPU and value of the other settings: on step time, the SSM
    kernels' best and ties beside it. None where the sweep does not vary BEST_AXIS or no point is complete."""
    if BEST_AXIS not in axes or not len(items):
        return None
    by = ["workload", "gpu", *(a for a in axes if a != BEST_AXIS)]
    best = best_value(items, BEST_AXIS, STEP_METRIC, by, samples)
    ssm_best = best_value(items, BEST_AXIS, SSM_METRIC, by, samples)
    return best.assign(**{f"best_{BEST_AXIS}_ssm_time": ssm_best[f"best_{BEST_AXIS}"],
                          "ssm_time_tied_with": ssm_best["tied_with"]})
