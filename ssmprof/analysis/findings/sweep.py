"""A sweep's findings: its regime tables (`summaries.sweep`) in sentences, as typed rows (`phrases.Finding`).

Crossovers and best values carry their noise verdicts (a tie, a crossover's bracket, `trust.noise`); the kernels
whose regime changes over the grid, the analytic model's agreement, slow or unrepresentative points and failed
points follow.
"""

from __future__ import annotations

import math

import pandas as pd

from ssmprof.analysis.findings.phrases import Finding, ranked
from ssmprof.analysis.limits.limiters import NO_COUNTERS
from ssmprof.analysis.step.host import slow_iteration_note
from ssmprof.analysis.trust.noise import RERUN_SPREAD_PCT, WITHIN_NOISE
from ssmprof.schema import FAILED


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


def _crossover_finding(r, columns) -> Finding:
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
    status = getattr(r, "noise_verdict", "crossover" if value != "none" else "none")
    return Finding("crossover", status, value, text, "crossover")


def _best_finding(r, columns) -> Finding:
    """One best-value row in words, with the runner-up's excess and its interval, or the tie."""
    axis = next(c for c in columns if c.startswith("best_") and not c.endswith("_ssm_time"))
    name = axis.removeprefix("best_")
    fixed = columns[columns.get_loc("gpu") + 1:columns.get_loc("points")]
    at = f" at {', '.join(f'{c}={getattr(r, c)}' for c in fixed)}" if len(fixed) else ""
    best, runner_up = getattr(r, axis), getattr(r, "runner_up_" + name)
    excess = f"runner-up {runner_up} is {r.runner_up_slower_pct:.1f} % slower"
    verdict = getattr(r, "noise_verdict", None)
    if verdict is None:
        return Finding("best", "best", str(best), f"best {name} for {r.workload} on {r.gpu}{at}: {best} ({excess})",
                       "best")
    interval = f"95 % interval {r.runner_up_slower_low_pct:+.1f} % to {r.runner_up_slower_high_pct:+.1f} %"
    if verdict == "tie":
        text = (f"{name} for {r.workload} on {r.gpu}{at}: a tie of {best} with {r.tied_with} (step time; {excess}, "
                f"{interval}, within noise or the {RERUN_SPREAD_PCT} % one configuration moves between runs)")
        return Finding("best", "tie", f"tie: {best}, {r.tied_with}", text, "best")
    return Finding("best", "best", str(best),
                   f"best {name} for {r.workload} on {r.gpu}{at}: {best} (step time; {excess}, {interval})", "best")


def sweep_findings(axes: list[str], points: pd.DataFrame, per_item: pd.DataFrame, ssm_kernels: pd.DataFrame,
                   model: pd.DataFrame, crossover: pd.DataFrame | None = None,
                   best: pd.DataFrame | None = None) -> pd.DataFrame:
    """The sweep's findings from its regime tables (`summaries.sweep.regime_tables`, over the settings `axes`):
    crossovers, best values, the regimes the heaviest SSM kernels pass through, the analytic model's agreement,
    points whose profiled iteration was slower than their timed steps, failed points. A sweep's findings are about
    many steps, none of which they cost: they have no impact and keep this order."""
    rows: list[Finding] = []
    if crossover is not None:
        rows += [_crossover_finding(r, crossover.columns) for r in crossover.itertuples()]
    if best is not None:
        rows += [_best_finding(r, best.columns) for r in best.itertuples()]
    if len(ssm_kernels) and axes:
        measured = ssm_kernels[ssm_kernels["regime"] != NO_COUNTERS]  # a gap in the counters is no change of regime
        for (name, phase), group in measured.groupby(["kernel_name", "phase"], sort=False):
            regimes = group.groupby("regime")["us_per_item"].size()
            if len(regimes) > 1:
                spread = ", ".join(f"{regime} at {count} points" for regime, count in regimes.items())
                rows.append(Finding("regime", "changes regime", f"{len(regimes)} regimes",
                                    f"{name} ({phase}) changes regime over the grid: {spread}", "ssm_kernels"))
    if len(model):
        flops = model.dropna(subset=["flops_ratio"])
        if len(flops):
            per_kernel = flops.groupby("kernel", sort=False)["flops_ratio"].agg(["min", "max"])
            spread = ", ".join(f"{kernel} {low:.2f}" + (f"-{high:.2f}" if f"{high:.2f}" != f"{low:.2f}" else "")
                               for kernel, (low, high) in per_kernel.iterrows())
            rows.append(Finding("model", "measured", f"{flops['flops_ratio'].median():.2f}",
                                f"measured / analytic FLOPs of the SSM forward kernels across the grid: {spread}",
                                "model"))
    items = per_item
    for r in items[items["busy_past_step_pct"].notna()].itertuples() if len(items) else []:
        at = ", ".join(f"{axis}={getattr(r, axis)}" for axis in axes)
        rows.append(Finding("slow", "slow iteration", f"{r.busy_past_step_pct:.1f} %",
                            f"{r.workload} {at}: {slow_iteration_note(r.busy_ms, r.step_ms)}", "per_item"))
    odd = items[items["representative"].eq(False)] if "representative" in items else items.iloc[0:0]
    if len(odd):
        named = "; ".join(f"{r.workload} {', '.join(f'{axis}={getattr(r, axis)}' for axis in axes)} "
                          f"{r.profiled_span_ms:.1f} vs {r.step_ms:.1f} ms" for r in odd.itertuples())
        rows.append(Finding("iteration", "not representative", f"{len(odd)} points",
                            f"{len(odd)} of {len(items)} points' profiled iterations are not among their "
                            f"timed steps (kernel span or busy time outside the steps' spread of the median): {named}; "
                            "their kernel times stand, their gaps and waits describe slower iterations", "per_item"))
    failed = int(points["result"].str.startswith(FAILED).sum()) if len(points) else 0
    if failed:
        rows.append(Finding("failed", "failed", str(failed), f"{failed} point(s) failed: see the points table",
                            "points"))
    return ranked(rows)
