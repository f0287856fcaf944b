"""Caches and bandwidth: L1/L2 hit rates and DRAM throughput, per kernel and time-weighted per category."""

from __future__ import annotations

import pandas as pd

from ssmprof.analysis.launches.frame import WEIGHT, time_weighted

RATES = ("l1_hit_rate_pct", "l2_hit_rate_pct", "dram_throughput_pct")


def cache_summary(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per category: time, and each rate weighted by kernel time (launches without counters left out)."""
    rows = []
    for category, group in kernels[["category", WEIGHT, *RATES]].groupby("category"):
        row = {"category": category, "time_ms": group["duration_ns"].sum() / 1e6}
        row.update({rate: time_weighted(group[rate], group[WEIGHT]) for rate in RATES})
        rows.append(row)
    return pd.DataFrame(rows).sort_values("time_ms", ascending=False, ignore_index=True)
