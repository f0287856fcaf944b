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
from ssmprof.analysis.findings.sweep import sweep_findings
from ssmprof.analysis.launches.categories import SSM
from ssmprof.analysis.launches.frame import WEIGHT, has_counters, time_weighted
from ssmprof.analysis.limits.analytic_work import analytic_vs_measured, forward_model
from ssmprof.analysis.limits.limiters import NO_COUNTERS, limiters
from ssmprof.analysis.limits.roofline import roofline
from ssmprof.analysis.step.host import busy_ns, slow_iteration
from ssmprof.analysis.step.profiled_iteration import iteration_check
from ssmprof.analysis.trust.noise import (
    FASTER,
    SLOWER,
    WITHIN_NOISE,
    Interval,
    kept_steps,
    ratio_interval,
    speedup_verdict,
)
from ssmprof.hardware import Ceilings
from ssmprof.schema import RunInfo

# What a limiter (`analysis.limits.limiters`) means on a regime map: bandwidth (a memory level's bytes, shared memory
# included), compute, or latency (every limiter that is neither: latency by elimination, too few blocks, capped
# occupancy, instruction issue or issue slots).
BANDWIDTH, COMPUTE, LATENCY = "bandwidth", "compute", "latency"
REGIMES = {"DRAM bandwidth": BANDWIDTH, "L2 bandwidth": BANDWIDTH, "shared memory": BANDWIDTH,
           "tensor pipe": COMPUTE, "FMA pipe": COMPUTE, NO_COUNTERS: NO_COUNTERS}
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


@dataclass(frozen=True, kw_only=True, repr=False)
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
    # the sweep in words (`findings.sweep.sweep_findings`): `regime_tables` adds them last, from the tables above
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


def regime_tables(runs: list[SweepRun], axes: list[str], points: pd.DataFrame) -> RegimeTables:
    """The regime frames of a sweep's complete points (`runs`, over the settings `axes`), with the table of
    every point (`points`: run or not, how each ended) and the findings."""
    items = per_item(runs)
    ssm = ssm_kernels(runs)
    samples = step_samples(runs)
    tables = RegimeTables(points=points, per_item=items, category_time=category_time(runs), ssm_kernels=ssm,
                          regime_map=regime_map(ssm, axes), model=ssd_model_check(runs), steps=samples,
                          crossover=_crossovers(items, axes, samples), best=_best_values(items, axes, samples))
    return replace(tables, findings=sweep_findings(axes, points, items, ssm, tables.model, tables.crossover,
                                                   tables.best))


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
