"""Regime maps: how time per token, the SSM kernels' limiters and the analytic SSD model move over a sweep's
grid; where one workload overtakes another; which value of a setting (chunk size) is best.

Every function takes the sweep's complete points as `SweepRun`s (a run's settings, run.json and analysis
frame) or the frames made from them here, and returns a frame; a point's key is its workload, its GPU and
the value of each varied setting (`keys`). Crossovers interpolate in log(setting), the scale sequence
lengths are swept on; a crossing is reported between the two grid points that bracket it, never beyond
the grid. Each crossover is computed twice, on step time and on GPU kernel time per token: where they
disagree, the host (launch gaps) moves the crossing, and the table shows both.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ssmprof.analysis.frame import WEIGHT, has_counters, time_weighted
from ssmprof.analysis.host import busy_ns, slow_iteration, slow_iteration_note
from ssmprof.analysis.limiters import limiters
from ssmprof.analysis.roofline import Ceilings, roofline
from ssmprof.analysis.scan_models import forward_model
from ssmprof.analysis.ssd_model import analytic_vs_measured
from ssmprof.analysis.suite import SSM

# What a limiter (`analysis.limiters`) means on a regime map: bandwidth, compute, or latency (every limiter
# that is neither: latency by elimination, too few blocks, capped occupancy, launch overhead).
BANDWIDTH, COMPUTE, LATENCY, NO_COUNTERS = "bandwidth", "compute", "latency", "no counters"
REGIMES = {"DRAM bandwidth": BANDWIDTH, "L2 bandwidth": BANDWIDTH, "tensor pipe": COMPUTE, "FMA pipe": COMPUTE,
           "no counters": NO_COUNTERS}
STEP_METRIC = "step_us_per_item"  # harness step time per token (sample), the end-to-end measure
KERNEL_METRIC = "kernel_us_per_item"  # GPU kernel time per token: the step without the host's gaps
SSM_METRIC = "ssm_us_per_item"  # the SSM kernels' time per token: what chunk size and state size act on


@dataclass(frozen=True)
class SweepRun:
    """One complete point: its varied settings, run.json, analysis frame, and its GPU's ceilings (or None)."""

    settings: dict[str, Any]
    info: dict
    kernels: pd.DataFrame
    ceilings: Ceilings | None = None

    @property
    def key(self) -> dict[str, Any]:
        return {"workload": self.info["workload"]["name"], "gpu": self.info["gpu"]["name"], **self.settings}


def regime_of(limiter: str) -> str:
    return REGIMES.get(limiter, LATENCY)


def keys(axes: list[str]) -> list[str]:
    """A point's key columns: workload, GPU, and the varied settings."""
    return ["workload", "gpu", *axes]


def per_item(runs: list[SweepRun]) -> pd.DataFrame:
    """One row per point: items (tokens) per step, step time, and step, kernel and SSM-kernel time per item."""
    rows = []
    for run in runs:
        harness, items = run.info["harness"], run.info["harness"]["items_per_step"]
        kernels = run.kernels
        # where the profiled iteration was slower than the timed steps, its kernel times describe a slower step
        busy_ms = busy_ns(kernels) / 1e6
        excess = slow_iteration(busy_ms, harness["step_ms"])
        rows.append({**run.key, "unit": harness["unit"], "items_per_step": items, "step_ms": harness["step_ms"],
                     STEP_METRIC: 1e3 * harness["step_ms"] / items,
                     KERNEL_METRIC: kernels["duration_ns"].sum() / 1e3 / items,
                     SSM_METRIC: kernels.loc[kernels["category"] == SSM, "duration_ns"].sum() / 1e3 / items,
                     "peak_gib": (harness.get("peak_memory_bytes") or 0) / 2**30, "busy_ms": busy_ms,
                     "busy_past_step_pct": 100 * excess if excess is not None else np.nan})
    return pd.DataFrame(rows)


def category_time(runs: list[SweepRun]) -> pd.DataFrame:
    """Long: per point and category, GPU kernel time per item (us) and its share of the point's kernel time."""
    frames = []
    for run in runs:
        by = run.kernels.groupby("category", as_index=False)["duration_ns"].sum()
        items = run.info["harness"]["items_per_step"]
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
        judged = limiters(ssm)
        if run.ceilings is not None and has_counters(ssm):
            judged = judged.join(roofline(ssm, run.ceilings)[["verdict", "pct_of_roof"]])
        items = run.info["harness"]["items_per_step"]
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


def crossover(frame: pd.DataFrame, axis: str, metric: str = STEP_METRIC, by: list[str] | None = None
              ) -> pd.DataFrame:
    """For each pair of workloads (in the frame's order) and each group of `by` (default: GPU): the value of
    `axis` where their `metric` curves cross, interpolated linearly in log(axis) between the two grid points
    that bracket the first change of sign; who is faster below and above it. No crossing in the grid: NaN,
    and who is faster throughout. Points where either workload has no value are left out."""
    by = by if by is not None else ["gpu"]
    workloads = list(dict.fromkeys(frame["workload"]))
    rows = []
    for group, points in frame.groupby(by, sort=False) if by else [((), frame)]:
        labels = dict(zip(by, group if isinstance(group, tuple) else (group,), strict=True))
        for a, b in itertools.combinations(workloads, 2):
            curve = (points[points["workload"] == a].set_index(axis)[metric]
                     .sub(points[points["workload"] == b].set_index(axis)[metric])).dropna().sort_index()
            rows.append({**labels, "workload_a": a, "workload_b": b, **_crossing(curve, a, b, axis)})
    return pd.DataFrame(rows)


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
        at, below, above = x[0], "", nonzero[0]
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


# How much one configuration's step time varied between runs on one GPU: mamba2-lm at the paper shape, measured in
# the bundled suite, the d_state x chunk_size sweep and the seq_len sweep (2026-11-24): 214.7, 218.3 and 219.2 ms on
# the H100 (2.1 %), 203.5, 209.2 and 207.7 ms on the H200 (2.8 %; the suite run measured again later, 207.2 ms, is the
# one bundled now). A best value closer than this to its runner-up is a tie.
SAME_CONFIG_SPREAD_PCT = 2.8


def best_value(frame: pd.DataFrame, axis: str, metric: str = STEP_METRIC, by: list[str] | None = None
               ) -> pd.DataFrame:
    """Per group of `by` (default: workload and GPU; add the other varied settings for a map over several):
    the value of `axis` with the lowest `metric`, that metric, the runner-up value and by how much it is
    slower (%). Ties go to the smaller value."""
    by = by if by is not None else ["workload", "gpu"]
    rows = []
    for group, points in frame.dropna(subset=[metric]).groupby(by, sort=False):
        ranked = points.sort_values([metric, axis], ignore_index=True)
        labels = dict(zip(by, group if isinstance(group, tuple) else (group,), strict=True))
        row = {**labels, "points": len(ranked), f"best_{axis}": ranked.at[0, axis], metric: ranked.at[0, metric],
               f"runner_up_{axis}": ranked.at[1, axis] if len(ranked) > 1 else None,
               "runner_up_slower_pct": 100 * (ranked.at[1, metric] / ranked.at[0, metric] - 1)
               if len(ranked) > 1 else math.nan}
        rows.append(row)
    return pd.DataFrame(rows)


def ssd_model_check(runs: list[SweepRun]) -> pd.DataFrame:
    """Per point whose sequence mixer has an analytic model (`scan_models.forward_model`: the SSD chain,
    Mamba-3 SISO, Gated DeltaNet) and counters on its forward scan kernels: the model beside the measured
    FLOPs and DRAM bytes per launch, and their ratios."""
    frames = []
    for run in runs:
        model = forward_model(run.info["workload"]["config"])
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


def regime_findings(crossovers: pd.DataFrame, best: pd.DataFrame, ssm: pd.DataFrame, model: pd.DataFrame,
                    axes: list[str], failed: int, points: pd.DataFrame) -> pd.DataFrame:
    """The sweep in sentences (topic, finding, value, anchor), as a run's findings: crossovers, best values,
    the regimes the heaviest SSM kernels pass through, the analytic model's agreement, points whose profiled
    iteration was slower than their timed steps (`points`: `per_item`), failed points."""
    rows = []
    for r in crossovers.itertuples() if len(crossovers) else []:
        axis = next(c for c in crossovers.columns if c.startswith("crossover_"))
        at = getattr(r, axis)
        setting = axis.removeprefix("crossover_")
        if math.isnan(at):
            rows.append(("crossover", f"{r.faster_below} is faster per token than "
                         f"{r.workload_b if r.faster_below == r.workload_a else r.workload_a} at every {setting} of "
                         f"the sweep on {r.gpu} ({r.points} points): no crossover", "none", "crossover"))
        else:
            rows.append(("crossover", f"{r.faster_above} overtakes {r.faster_below} per token at {setting} ≈ "
                         f"{at:,.0f} on {r.gpu} (interpolated in log {setting}, step time"
                         + (f"; crosses {r.crossings} times" if r.crossings > 1 else "") + ")", f"{at:,.0f}",
                         "crossover"))
    for r in best.itertuples() if len(best) else []:
        axis = next(c for c in best.columns if c.startswith("best_"))
        fixed = best.columns[best.columns.get_loc("gpu") + 1:best.columns.get_loc("points")]
        at = f" at {', '.join(f'{c}={getattr(r, c)}' for c in fixed)}" if len(fixed) else ""
        tie = (f", within the {SAME_CONFIG_SPREAD_PCT} % one configuration's step varied between runs: a tie"
               if r.runner_up_slower_pct < SAME_CONFIG_SPREAD_PCT else "")
        rows.append(("best", f"best {axis.removeprefix('best_')} for {r.workload} on {r.gpu}{at}: "
                     f"{getattr(r, axis)} (runner-up {getattr(r, 'runner_up_' + axis.removeprefix('best_'))} is "
                     f"{r.runner_up_slower_pct:.1f} % slower{tie})", str(getattr(r, axis)), "best"))
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
    for r in points[points["busy_past_step_pct"].notna()].itertuples() if len(points) else []:
        at = ", ".join(f"{axis}={getattr(r, axis)}" for axis in axes)
        rows.append(("slow", f"{r.workload} {at}: {slow_iteration_note(r.busy_ms, r.step_ms)}",
                     f"{r.busy_past_step_pct:.1f} %", "per_item"))
    if failed:
        rows.append(("failed", f"{failed} point(s) failed: see the points table", str(failed), "points"))
    return pd.DataFrame(rows, columns=["topic", "finding", "value", "anchor"])
