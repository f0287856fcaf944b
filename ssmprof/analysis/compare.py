"""Two runs side by side: per category and per kernel (matched by name, launch configuration and phase)."""

from __future__ import annotations

import pandas as pd

from ssmprof.analysis.breakdown import by_category
from ssmprof.analysis.frame import LAUNCH_KEY, time_weighted_by
from ssmprof.analysis.host import busy_ns
from ssmprof.errors import SsmprofError

WEIGHTED = ["dram_throughput_pct", "l2_hit_rate_pct", "l1_hit_rate_pct", "ai_dram"]


class IncomparableRuns(SsmprofError):
    pass


def check_comparable(info_a: dict, info_b: dict) -> list[str]:
    """Refuse runs of different workloads; return notes on other differences (config, GPU)."""
    a, b = info_a["workload"], info_b["workload"]
    if a["name"] != b["name"]:
        raise IncomparableRuns(f"runs are of different workloads ({a['name']} vs {b['name']}): compare, project "
                               "and regress need the same workload")
    notes = []
    if a["config"] != b["config"]:
        changed = sorted(k for k in set(a["config"]) | set(b["config"]) if a["config"].get(k) != b["config"].get(k))
        notes.append(f"configs differ in: {', '.join(changed)}")
    if info_a["gpu"]["name"] != info_b["gpu"]["name"]:
        notes.append(f"GPUs: {info_a['gpu']['name']} vs {info_b['gpu']['name']}")
    hosts = [info.get("host", {}).get("cpu", "not recorded") for info in (info_a, info_b)]
    if hosts[0] != hosts[1]:
        notes.append(f"different hosts (CPU {hosts[0]} vs {hosts[1]}): the part of each step the GPU waits for "
                     "the host is not comparable")
    return notes


def step_split(info: dict, kernels: pd.DataFrame) -> str:
    """`step X ms = GPU busy Y ms + host wait Z ms`: what a GPU comparison can and cannot explain."""
    step = info["harness"]["step_ms"]
    busy = busy_ns(kernels) / 1e6
    return f"{info['gpu']['name']}: step {step:.2f} ms = GPU busy {busy:.2f} ms + waiting for the host " \
           f"{max(step - busy, 0):.2f} ms ({100 * busy / step:.0f} % busy)"


def per_kernel(kernels: pd.DataFrame) -> pd.DataFrame:
    """One row per (kernel, launch configuration, phase): launches, time and time-weighted rates (over the
    launches with counters; NaN where none has them). `kernels`: a run's `analysis_frame`."""
    grouped = kernels.groupby(LAUNCH_KEY, as_index=False).agg(
        launches=("launch_idx", "size"), time_ns=("duration_ns", "sum"))
    rates = time_weighted_by(kernels, LAUNCH_KEY, WEIGHTED)
    measured = kernels[kernels["flops"].notna()]
    work = measured.groupby(LAUNCH_KEY, as_index=False)[["flops", "seconds"]].sum()
    work["flop_per_s"] = work["flops"] / work["seconds"]
    return (grouped.merge(rates, on=LAUNCH_KEY, how="left")
            .merge(work[LAUNCH_KEY + ["flop_per_s"]], on=LAUNCH_KEY, how="left"))


def compare_kernels(kernels_a: pd.DataFrame, kernels_b: pd.DataFrame) -> pd.DataFrame:
    """Outer join of the per-kernel rows; `match` is both / only_a / only_b; speedup = time_a / time_b."""
    merged = per_kernel(kernels_a).merge(per_kernel(kernels_b), on=LAUNCH_KEY, how="outer", suffixes=("_a", "_b"),
                                         indicator="match")
    merged["match"] = merged["match"].map({"both": "both", "left_only": "only_a", "right_only": "only_b"})
    merged["speedup"] = merged["time_ns_a"] / merged["time_ns_b"]
    merged["ai_shift"] = merged["ai_dram_b"] / merged["ai_dram_a"]
    return merged.sort_values("time_ns_a", ascending=False, na_position="last", ignore_index=True)


def compare_categories(kernels_a: pd.DataFrame, kernels_b: pd.DataFrame) -> pd.DataFrame:
    a, b = by_category(kernels_a), by_category(kernels_b)
    merged = a.merge(b, on="category", how="outer", suffixes=("_a", "_b")).fillna({"time_ms_a": 0, "time_ms_b": 0})
    merged["speedup"] = merged["time_ms_a"] / merged["time_ms_b"]
    return merged.sort_values("time_ms_a", ascending=False, ignore_index=True)
