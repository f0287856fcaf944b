"""Headroom: the step time a kernel would give back if it ran at its roof, or at a reachable share of it.

Per launch with counters, the time at the roof is its FLOPs over the roof at its intensity (`roofline`), or,
for data movement (no FLOPs), its DRAM bytes at DRAM bandwidth. A roof is not reachable in practice: in
the bundled H100 LM runs with checked counters the fastest GEMM launch reaches 82-83 % of the dense bf16
datasheet peak and the fastest memory-bound launch 97 % of DRAM bandwidth (run.json
`checks.max_fraction_of_peak`), so REACHABLE = 80 % of the roof is what a tuned kernel gets:
`saved_reachable_ms` is what an optimization effort could expect, `saved_at_roof_ms` its upper bound.
Launches without counters have no roof and count as no headroom (their time is shown).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

REACHABLE = 0.8


def headroom(per_kernel: pd.DataFrame, dram_gb_s: float) -> pd.DataFrame:
    """Per launch: time at roof and time saved at the roof and at REACHABLE of it. `per_kernel`: `roofline`'s
    frame."""
    frame = per_kernel.copy(deep=False)  # copy-on-write: the columns added here stay out of `per_kernel`
    at_roof_s = (frame["flops"] / frame["roof_flop_per_s"]).where(frame["flops"] > 0,
                                                                 frame["dram_bytes"] / (dram_gb_s * 1e9))
    actual_ms = frame["duration_ns"] / 1e6
    frame["roof_ms"] = at_roof_s * 1e3
    frame["saved_at_roof_ms"] = (actual_ms - frame["roof_ms"]).clip(lower=0)
    frame["saved_reachable_ms"] = (actual_ms - frame["roof_ms"] / REACHABLE).clip(lower=0)
    return frame


def headroom_summary(frame: pd.DataFrame, by: str = "kernel_name", top: int = 15) -> pd.DataFrame:
    """Time and savings summed per `by` (kernel name or category), largest reachable saving first, with the
    share of the run's kernel time each saving is."""
    total_ms = frame["duration_ns"].sum() / 1e6
    grouped = frame.groupby(by, as_index=False).agg(
        launches=("launch_idx", "size"), time_ms=("duration_ns", lambda d: d.sum() / 1e6),
        roof_ms=("roof_ms", lambda v: v.sum(min_count=1)), saved_at_roof_ms=("saved_at_roof_ms", "sum"),
        saved_reachable_ms=("saved_reachable_ms", "sum"))
    grouped["saved_reachable_pct_of_kernel_time"] = 100 * grouped["saved_reachable_ms"] / total_ms if total_ms \
        else np.nan
    return grouped.sort_values("saved_reachable_ms", ascending=False, ignore_index=True).head(top)
