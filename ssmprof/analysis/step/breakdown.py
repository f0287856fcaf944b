"""Where the time goes: kernel time by category and phase, and the top kernels."""

from __future__ import annotations

import pandas as pd

from ssmprof.analysis.launches.categories import KernelFilter

OTHER_WARNING_SHARE = 0.05


def breakdown(kernels: pd.DataFrame, where: KernelFilter | None = None) -> pd.DataFrame:
    """Time by category x phase: columns category, phase, launches, time_ms, share (of the selection).
    `kernels`: an `analysis_frame` (as every analysis takes)."""
    frame = kernels if where is None else kernels[where(kernels)]
    grouped = frame.groupby(["category", "phase"], as_index=False).agg(
        launches=("launch_idx", "size"), time_ns=("duration_ns", "sum"))
    total = grouped["time_ns"].sum()
    grouped["time_ms"] = grouped["time_ns"] / 1e6
    grouped["share"] = grouped["time_ns"] / total if total else 0.0
    return grouped.drop(columns="time_ns").sort_values("time_ms", ascending=False, ignore_index=True)


def by_category(kernels: pd.DataFrame, where: KernelFilter | None = None) -> pd.DataFrame:
    """Time by category over all phases, largest first."""
    table = breakdown(kernels, where)
    return (table.groupby("category", as_index=False)[["launches", "time_ms", "share"]].sum()
            .sort_values("time_ms", ascending=False, ignore_index=True))


def top_kernels(kernels: pd.DataFrame, n: int = 20) -> pd.DataFrame:
    """The n kernels (by short name and phase) with the most total time."""
    table = kernels.groupby(["kernel_name", "phase", "category"], as_index=False).agg(
        launches=("launch_idx", "size"), time_ns=("duration_ns", "sum"), mean_ns=("duration_ns", "mean"))
    table["share"] = table["time_ns"] / kernels["duration_ns"].sum()
    return table.sort_values("time_ns", ascending=False, ignore_index=True).head(n)


def other_share_warning(kernels: pd.DataFrame) -> str | None:
    """A warning when uncategorized kernels take more than 5 % of the time (the rule table needs a rule)."""
    table = by_category(kernels)
    share = table.loc[table["category"] == "other", "share"].sum()
    if share > OTHER_WARNING_SHARE:
        names = top_kernels(kernels[kernels["category"] == "other"], 3)["kernel_name"]
        return f"{share:.0%} of kernel time is uncategorized ('other'), e.g. {', '.join(names)}"
    return None
