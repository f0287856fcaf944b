"""Caches and bandwidth: L1/L2 hit rates and DRAM throughput, per kernel and time-weighted per category."""

from __future__ import annotations

import pandas as pd

from ssmprof.analysis.categories import with_categories

RATES = ("l1_hit_rate_pct", "l2_hit_rate_pct", "dram_throughput_pct")


def cache_summary(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per category: time, and each rate weighted by kernel time (launches without counters left out)."""
    frame = kernels if "category" in kernels.columns else with_categories(kernels)
    rows = []
    for category, group in frame.groupby("category"):
        row = {"category": category, "time_ms": group["duration_ns"].sum() / 1e6}
        for rate in RATES:
            valid = group[rate].notna()
            weight = group.loc[valid, "duration_ns"]
            row[rate] = float((group.loc[valid, rate] * weight).sum() / weight.sum()) if weight.sum() else float("nan")
        rows.append(row)
    return pd.DataFrame(rows).sort_values("time_ms", ascending=False, ignore_index=True)
