"""Project a measured run onto another GPU: roofline-bounded, carrying each kernel's measured efficiency.

For a kernel with counters, its roofline floor on GPU X is max(DRAM bytes / DRAM bandwidth_X, FLOPs /
peak_X) (peak of its path: tensor or vector). The kernel ran at efficiency e = floor_A / time_A on the
measured GPU; the projection assumes the same bytes, FLOPs and efficiency on the target:
time_B = floor_B / e = time_A * floor_B / floor_A. Kernels without counters keep their measured time
(said so in `method`). A projection, not a measurement: every frame says so.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssmprof.analysis.categories import with_categories
from ssmprof.analysis.derived import derive
from ssmprof.analysis.roofline import Ceilings


def _floor_seconds(frame: pd.DataFrame, ceilings: Ceilings) -> pd.Series:
    tensor = frame["flops_tensor"].fillna(0) > frame["flops_vector"].fillna(0)
    peak = np.where(tensor, ceilings.bf16_tensor_tflops, ceilings.fp32_tflops) * 1e12
    return np.maximum(frame["dram_bytes"] / (ceilings.dram_gb_s * 1e9), frame["flops"].fillna(0) / peak)


def project(kernels: pd.DataFrame, source: Ceilings, target: Ceilings) -> pd.DataFrame:
    """Per launch: measured time, projected time on the target, the ratio and how it was obtained."""
    frame = derive(kernels if "category" in kernels.columns else with_categories(kernels))
    floor_a, floor_b = _floor_seconds(frame, source), _floor_seconds(frame, target)
    ratio = (floor_b / floor_a).where(floor_a > 0)
    frame["projected_ns"] = (frame["duration_ns"] * ratio).fillna(frame["duration_ns"])
    frame["method"] = np.where(ratio.notna(), "roofline ratio at measured efficiency",
                               "no counters: measured time carried over")
    return frame[["launch_idx", "kernel_name", "phase", "category", "duration_ns", "projected_ns", "method"]]


def project_categories(projected: pd.DataFrame) -> pd.DataFrame:
    table = projected.groupby("category", as_index=False)[["duration_ns", "projected_ns"]].sum()
    table["measured_ms"] = table.pop("duration_ns") / 1e6
    table["projected_ms"] = table.pop("projected_ns") / 1e6
    table["speedup"] = table["measured_ms"] / table["projected_ms"]
    return table.sort_values("measured_ms", ascending=False, ignore_index=True)


def projection_error(projected_categories: pd.DataFrame, measured_target: pd.DataFrame,
                     min_share: float = 0.05) -> pd.DataFrame:
    """Per category above `min_share` of the measured target time: projected vs measured on the target, error %."""
    actual = measured_target.groupby("category", as_index=False)["duration_ns"].sum()
    actual["target_ms"] = actual.pop("duration_ns") / 1e6
    table = projected_categories.merge(actual, on="category", how="inner")
    table = table[table["target_ms"] / table["target_ms"].sum() >= min_share]
    table["error_pct"] = 100 * (table["projected_ms"] - table["target_ms"]) / table["target_ms"]
    return table[["category", "measured_ms", "projected_ms", "target_ms", "error_pct"]]
