"""The points a roofline chart draws: one per kernel and launch configuration, not one per launch.

A chart of every launch grows with the run (a million launches gave a 94 MiB page) and draws the same kernel
hundreds of times on top of itself. Launches of one kernel, phase and launch configuration do the same work, so
they are summed into one point: its intensity is its FLOPs over its bytes, its rate its FLOPs over its counted
time, its % of roof time-weighted; its verdict and limiter stay those of its launches (they are grouping keys,
so a configuration whose launches fall on both sides of a ridge gives two points).
"""

from __future__ import annotations

import pandas as pd

from ssmprof.analysis.frame import WEIGHT, time_weighted

CONFIG = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
KEYS = ("kernel_name", "phase", "category", "path", "verdict", "roof_limiter", *CONFIG)
CONSTANT = ("peak_flop_per_s", "ridge_ai", "l2_ridge_ai", "ceiling_source")  # the ceilings: one per GPU


def roofline_points(per_launch: pd.DataFrame, by: tuple[str, ...] = ()) -> pd.DataFrame:
    """`roofline.roofline`'s per-launch frame (with counters) summed per kernel, phase, launch configuration,
    verdict and limiter (and `by`, e.g. the workload of a suite): launches, time, FLOPs, intensities at DRAM and
    L2, achieved FLOP/s, time-weighted % of roof, and the ceilings."""
    if per_launch.empty or "verdict" not in per_launch.columns:  # no run with counters and ceilings
        return pd.DataFrame()
    keys = [k for k in (*by, *KEYS) if k in per_launch.columns]
    read = [*keys, *[c for c in ("flops", "flop_per_s", WEIGHT, "ai_dram", "ai_l2", "pct_of_roof", *CONSTANT)
                     if c in per_launch.columns and c not in keys]]
    measured = per_launch.loc[(per_launch["verdict"] != "no counters") & (per_launch["flops"] > 0), read]
    rows = []
    for values, group in measured.groupby(keys, sort=False, dropna=False):
        flops = group["flops"].sum()
        seconds = (group["flops"] / group["flop_per_s"]).sum()
        row = dict(zip(keys, values, strict=True))
        row.update({"launches": len(group), "duration_ns": group[WEIGHT].sum(), "flops": flops,
                    "ai_dram": _intensity(group, "ai_dram"), "ai_l2": _intensity(group, "ai_l2"),
                    "flop_per_s": flops / seconds if seconds else float("nan"),
                    "pct_of_roof": time_weighted(group["pct_of_roof"], group[WEIGHT])})
        row.update({c: group[c].iloc[0] for c in CONSTANT if c in group})
        rows.append(row)
    columns = [*keys, "launches", "duration_ns", "flops", "ai_dram", "ai_l2", "flop_per_s", "pct_of_roof",
               *[c for c in CONSTANT if c in measured.columns]]
    return pd.DataFrame(rows, columns=columns).sort_values("duration_ns", ascending=False, ignore_index=True)


def _intensity(group: pd.DataFrame, column: str) -> float:
    """The launches' FLOPs over their bytes at one level (each launch's bytes: its FLOPs over its intensity);
    NaN where the level's bytes are unknown or none were counted."""
    if column not in group:
        return float("nan")
    byte_count = (group["flops"] / group[column]).sum(min_count=1)
    return float(group["flops"].sum() / byte_count) if byte_count and byte_count == byte_count else float("nan")
