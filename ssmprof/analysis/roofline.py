"""Hierarchical roofline: per kernel, intensity at DRAM/L2/L1, achieved FLOP/s, and what bounds it.

The ceilings are the run's own GPU's (`hardware.run_ceilings`: its device profile, else its datasheet row);
the returned frame says which (`ceiling_source`). Where an L2 ceiling is known (measured), each kernel's roof
is the lowest of the compute peak, its DRAM intensity times DRAM bandwidth, its L2 intensity times L2
bandwidth and, where an L1 ceiling is measured, its L1 intensity times L1 bandwidth (the hierarchical
roofline), and `roof_limiter` names which. L1 intensity counts global/local traffic through L1TEX
(`l1tex__t_bytes`); shared-memory traffic is not in it.

A ceiling is what the GPU can do at best, so a checked launch that runs faster than one shows the calibration
fell short, not the kernel: `calibration_defects` lists those launches for the report to show, and the roof
stays where it was measured (raising it to the fastest launch would put that launch at 100 % by construction
and make a run's verdicts depend on the runs reported beside it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssmprof.analysis.frame import WEIGHT, time_weighted
from ssmprof.hardware import Ceilings
from ssmprof.schema import CHECKED_STATUSES


def roofline(kernels: pd.DataFrame, ceilings: Ceilings) -> pd.DataFrame:
    """Per kernel: category, path (tensor/vector), AIs, achieved FLOP/s, the roof at its intensity,
    % of that roof, and the verdict (memory-bound / compute-bound / no counters). `kernels`: an `analysis_frame`."""
    frame = kernels.copy(deep=False)  # copy-on-write: the columns added here stay out of `kernels`
    tensor = frame["flops_tensor"].fillna(0) > frame["flops_vector"].fillna(0)
    peak = np.where(tensor, ceilings.bf16_tensor_tflops, ceilings.fp32_tflops) * 1e12
    bandwidth = ceilings.dram_gb_s * 1e9
    frame["path"] = np.where(tensor, "tensor", "vector")
    frame["peak_flop_per_s"] = peak
    frame["ridge_ai"] = peak / bandwidth
    frame["l2_ridge_ai"] = peak / (ceilings.l2_gb_s * 1e9) if ceilings.l2_gb_s else np.nan
    dram_roof = frame["ai_dram"] * bandwidth
    l2_roof = _level_roof(frame["ai_l2"], ceilings.l2_gb_s)
    l1_roof = _level_roof(frame["ai_l1"], ceilings.l1_gb_s)
    memory_roof = np.minimum(dram_roof, np.minimum(l2_roof, l1_roof))
    frame["roof_flop_per_s"] = np.minimum(peak, memory_roof)
    frame["roof_limiter"] = np.select([frame["ai_dram"].isna(), frame["roof_flop_per_s"] >= peak,
                                       dram_roof <= memory_roof, l2_roof <= memory_roof],
                                      ["", "compute", "DRAM", "L2"], "L1")
    # % of the roof at the kernel's intensity; undefined for kernels that do no arithmetic (copies), whose
    # measure is % of DRAM peak.
    frame["pct_of_roof"] = (100 * frame["flop_per_s"] / frame["roof_flop_per_s"]).where(frame["flops"] > 0)
    frame["pct_of_dram_peak"] = 100 * frame["dram_bytes_per_s"] / bandwidth
    # memory-bound where a memory level's roof is the lowest at the kernel's intensities (DRAM, or L2 / L1
    # where their ceilings are measured: `roof_limiter` says which), else compute-bound
    frame["verdict"] = np.select([frame["ai_dram"].isna(), frame["roof_limiter"].isin(["DRAM", "L2", "L1"])],
                                 ["no counters", "memory-bound"], "compute-bound")
    frame["ceiling_source"] = ceilings.source
    return frame


def _level_roof(intensity: pd.Series, gb_s: float | None) -> pd.Series:
    """A memory level's roof at each kernel's intensity there; no roof (infinite) without a ceiling."""
    return (intensity * gb_s * 1e9).fillna(np.inf) if gb_s else pd.Series(np.inf, intensity.index)


def roofline_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Time-weighted by category: share of time memory- vs compute-bound, mean % of roof and of DRAM peak."""
    rows = []
    frame = frame[["category", WEIGHT, "verdict", "pct_of_roof", "pct_of_dram_peak"]]
    for category, group in frame.groupby("category"):
        weight = group[WEIGHT]
        measured = group["verdict"] != "no counters"
        rows.append({
            "category": category,
            "time_ms": weight.sum() / 1e6,
            "memory_bound_share": weight[group["verdict"] == "memory-bound"].sum() / weight.sum(),
            "compute_bound_share": weight[group["verdict"] == "compute-bound"].sum() / weight.sum(),
            "pct_of_roof": time_weighted(group.loc[measured, "pct_of_roof"], weight[measured]),
            "pct_of_dram_peak": time_weighted(group.loc[measured, "pct_of_dram_peak"], weight[measured]),
        })
    return pd.DataFrame(rows).sort_values("time_ms", ascending=False, ignore_index=True)




# What `calibration_defects` compares: (ceiling field, what it limits, unit, unit in the ceiling's scale).
_RATES = (("bf16_tensor_tflops", "tensor FLOP/s", "TFLOP/s", 1e12), ("fp32_tflops", "fp32 FLOP/s", "TFLOP/s", 1e12),
          ("dram_gb_s", "DRAM bytes/s", "GB/s", 1e9), ("l2_gb_s", "L2 bytes/s", "GB/s", 1e9),
          ("l1_gb_s", "L1 bytes/s", "GB/s", 1e9))


def calibration_defects(ceilings: Ceilings, kernels: pd.DataFrame) -> pd.DataFrame:
    """The checked launches (`CHECKED_STATUSES`) whose rate exceeds a ceiling: tensor and fp32 FLOP/s, DRAM, L2
    and L1 bytes/s (the byte counts the roofline's intensities use), each on the counters' own duration. One
    row per launch and ceiling exceeded, fastest first within each ceiling; empty where the ceilings hold.
    Unchecked counters (schema-1 runs, lent across problems) prove nothing and are left out."""
    columns = ["launch_idx", "kernel_name", "phase", "seconds", "flops_tensor", "flops_fp32", "dram_bytes",
               "l2_bytes", "l1_bytes"]
    checked = kernels.loc[kernels["counter_status"].isin(CHECKED_STATUSES), columns]
    seconds = checked["seconds"]
    measured = {"bf16_tensor_tflops": checked["flops_tensor"], "fp32_tflops": checked["flops_fp32"],
                "dram_gb_s": checked["dram_bytes"], "l2_gb_s": checked["l2_bytes"], "l1_gb_s": checked["l1_bytes"]}
    frames = []
    for field, rate, unit, scale in _RATES:
        ceiling = getattr(ceilings, field)
        achieved = measured[field] / seconds / scale
        over = achieved > ceiling if ceiling else pd.Series(False, achieved.index)
        if over.any():
            frames.append(checked.loc[over, ["launch_idx", "kernel_name", "phase"]].assign(
                rate=rate, achieved=achieved[over], ceiling=ceiling, unit=unit,
                pct_of_ceiling=100 * achieved[over] / ceiling, ceiling_source=ceilings.source,
            ).sort_values("achieved", ascending=False))
    columns = ["launch_idx", "kernel_name", "phase", "rate", "achieved", "ceiling", "unit", "pct_of_ceiling",
               "ceiling_source"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def defects_by_kernel(defects: pd.DataFrame) -> pd.DataFrame:
    """`calibration_defects` per kernel, phase and rate (what a report lists): how many launches exceed the
    ceiling, the fastest of them and its % of the ceiling; the rate with the largest excess first."""
    if defects.empty:
        return pd.DataFrame(columns=["rate", "kernel_name", "phase", "launches", "achieved", "ceiling", "unit",
                                     "pct_of_ceiling", "ceiling_source"])
    table = defects.groupby(["rate", "kernel_name", "phase"], as_index=False, sort=False).agg(
        launches=("launch_idx", "size"), achieved=("achieved", "max"), ceiling=("ceiling", "first"),
        unit=("unit", "first"), pct_of_ceiling=("pct_of_ceiling", "max"), ceiling_source=("ceiling_source", "first"))
    return table.sort_values(["rate", "pct_of_ceiling"], ascending=[True, False], ignore_index=True)


def defects_note(by_kernel: pd.DataFrame) -> str | None:
    """One line for a report's warnings where checked launches exceed a ceiling (`defects_by_kernel`; None where
    none does)."""
    if by_kernel.empty:
        return None
    worst = by_kernel.loc[by_kernel.groupby("rate", sort=False)["pct_of_ceiling"].idxmax()]
    each = "; ".join(f"{r.rate} {r.achieved:,.0f} {r.unit} by {r.kernel_name} ({r.phase}) against "
                     f"{r.ceiling:,.0f}" for r in worst.itertuples())
    launches, kernels = by_kernel["launches"].sum(), by_kernel["kernel_name"].nunique()
    return (f"calibration defect: {launches} checked launches of {kernels} kernels run faster than a ceiling "
            f"({worst.iloc[0].ceiling_source}), up to {each}; the roof is left where it was measured "
            "(table 'Calibration defects')")
