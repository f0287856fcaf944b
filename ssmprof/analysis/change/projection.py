"""Project a measured run onto another GPU: roofline-bounded, carrying what the roofline does not explain.

For a kernel with counters, its roofline floor on GPU X is max(DRAM bytes / DRAM bandwidth_X, FLOPs /
peak_X) (peak of its path: tensor or vector). Its measured time splits into that floor and the rest (latency,
occupancy, launch and tail effects: time the saturated resource does not account for). The floor follows the
target's ceilings, the rest is carried over: time_B = time_A - floor_A + floor_B. A kernel at 90 % of DRAM
bandwidth thus speeds up almost with the bandwidth; one at 10 % hardly at all.

Why not scale the whole time by floor_B / floor_A (constant efficiency)? Most SSM kernels run far below DRAM
peak, so the H200's extra bandwidth speeds them up much less than it raises their floor: on the bundled paper
runs constant efficiency projected their H200 time a quarter too low (README, "project"; the numbers are
checked in tests/test_readme_numbers.py). Carrying the rest unchanged assumes the same SMs and clocks, true for
H100 <-> H200 (the same SM count in the datasheet table);
across generations (A100 <-> H100) it is a lower bound on the change. Kernels without counters keep their
measured time (said so in `method`). A projection, not a measurement: every frame says so.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssmprof.analysis.trust.noise import kept_steps, step_interval
from ssmprof.hardware import Ceilings
from ssmprof.schema import RunInfo


def _floor_seconds(frame: pd.DataFrame, ceilings: Ceilings) -> pd.Series:
    tensor = frame["flops_tensor"].fillna(0) > frame["flops_vector"].fillna(0)
    peak = np.where(tensor, ceilings.bf16_tensor_tflops, ceilings.fp32_tflops) * 1e12
    return np.maximum(frame["dram_bytes"] / (ceilings.dram_gb_s * 1e9), frame["flops"].fillna(0) / peak)


def project_kernels(kernels: pd.DataFrame, source: Ceilings, target: Ceilings) -> pd.DataFrame:
    """Per launch: measured time, projected time on the target, the ratio and how it was obtained.
    `kernels`: an `analysis_frame`."""
    frame = kernels.copy()
    raw_a, raw_b = _floor_seconds(frame, source) * 1e9, _floor_seconds(frame, target) * 1e9
    # a floor above the measured time (counter noise on tiny kernels) is scaled down to that time, both sides
    cap = np.minimum(1.0, frame["duration_ns"] / raw_a.where(raw_a > 0))
    floor_a, floor_b = raw_a * cap, raw_b * cap
    known = floor_a.notna() & floor_b.notna()
    frame["projected_ns"] = (frame["duration_ns"] - floor_a + floor_b).where(known, frame["duration_ns"])
    frame["method"] = np.where(known, "roofline floor on the target + measured time above the floor",
                               "no counters: measured time carried over")
    return frame[["launch_idx", "kernel_name", "phase", "category", "duration_ns", "projected_ns", "method"]]


def project_categories(projected: pd.DataFrame) -> pd.DataFrame:
    table = projected.groupby("category", as_index=False)[["duration_ns", "projected_ns"]].sum()
    table["measured_ms"] = table.pop("duration_ns") / 1e6
    table["projected_ms"] = table.pop("projected_ns") / 1e6
    table["speedup"] = table["measured_ms"] / table["projected_ms"]
    return table.sort_values("measured_ms", ascending=False, ignore_index=True)


# The share of a measured target's kernel time under which a category's projection error is left out of the error
# table: a few ms of a small category swing its error by tens of %.
ERROR_MIN_SHARE = 0.05


def projection_error(projected_categories: pd.DataFrame, measured_target: pd.DataFrame,
                     min_share: float = ERROR_MIN_SHARE) -> pd.DataFrame:
    """Per category above `min_share` of the measured target time: projected vs measured on the target, error %."""
    actual = measured_target.groupby("category", as_index=False)["duration_ns"].sum()
    actual["target_ms"] = actual.pop("duration_ns") / 1e6
    table = projected_categories.merge(actual, on="category", how="inner")
    table = table[table["target_ms"] / table["target_ms"].sum() >= min_share]
    table["error_pct"] = 100 * (table["projected_ms"] - table["target_ms"]) / table["target_ms"]
    return table[["category", "measured_ms", "projected_ms", "target_ms", "error_pct"]]


def project_step(info: RunInfo, projected: pd.DataFrame, target: RunInfo | None = None) -> pd.DataFrame:
    """The step on the target GPU, what a user asks first: the measured step (median of the kept timed steps, with
    its 95 % interval) with its kernels' measured time replaced by their projected time (`projected`:
    `project_kernels`), the host's wait and any overlap carried over as measured. The interval is the measured
    steps' noise moved by the same amount: the projection's own error is not in it, and is known only against a
    run measured on the target (`target`: its step and the error beside it)."""
    interval = step_interval(kept_steps(info))
    moved_ms = (projected["projected_ns"].sum() - projected["duration_ns"].sum()) / 1e6
    row = {"measured_step_ms": interval.value, "measured_step_low_ms": interval.low,
           "measured_step_high_ms": interval.high, "projected_step_ms": interval.value + moved_ms,
           "projected_step_low_ms": interval.low + moved_ms, "projected_step_high_ms": interval.high + moved_ms,
           "speedup": interval.value / (interval.value + moved_ms)}
    if target is not None:
        row["target_step_ms"] = target.harness.step_ms
        row["error_pct"] = 100 * (row["projected_step_ms"] - target.harness.step_ms) / target.harness.step_ms
    return pd.DataFrame([row])


def left_out(projected_categories: pd.DataFrame, errors: pd.DataFrame) -> list[str]:
    """The categories a projection projects but its error table leaves out (`projection_error`: under its share of
    the target's time), so that the page can say so."""
    return [c for c in projected_categories["category"] if c not in set(errors["category"])]
