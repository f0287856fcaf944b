"""Hierarchical roofline: per kernel, intensity at DRAM/L2/L1, achieved FLOP/s, and what bounds it.

Ceilings come from a device profile measured by `ssmprof calibrate` when one is given, else from the
datasheet table; the returned frame says which (`ceiling_source`). A ceiling is never below what a launch
of the run achieves (`at_least_achieved`): the workloads' own GEMMs reach more than calibrate's one GEMM
shape, and a roof under a measured point would put it at 105 % of its roof. Where an L2 ceiling is known
(measured), each kernel's roof is the lowest of the compute peak, its DRAM intensity times DRAM bandwidth,
its L2 intensity times L2 bandwidth and, where an L1 ceiling is measured, its L1 intensity times L1
bandwidth (the hierarchical roofline), and `roof_limiter` names which. L1 intensity counts global/local
traffic through L1TEX (`l1tex__t_bytes`); shared-memory traffic is not in it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ssmprof.analysis.frame import WEIGHT, time_weighted
from ssmprof.schema import CHECKED_STATUSES


@dataclass(frozen=True)
class Ceilings:
    dram_gb_s: float
    l2_gb_s: float | None
    bf16_tensor_tflops: float
    fp32_tflops: float
    source: str  # "measured by ssmprof calibrate" or "datasheet"
    l1_gb_s: float | None = None  # measured only (no datasheet figure)

    @classmethod
    def from_profile(cls, measured: dict) -> Ceilings:
        return cls(measured["dram_gb_s"], measured.get("l2_gb_s"), measured["bf16_tensor_tflops"],
                   measured["fp32_tflops"], measured.get("source", "measured"), measured.get("l1_gb_s"))

    @classmethod
    def from_datasheet(cls, spec) -> Ceilings:
        return cls(spec.dram_tb_s * 1e3, None, spec.bf16_tflops, spec.fp32_tflops, "datasheet")


def roofline(kernels: pd.DataFrame, ceilings: Ceilings) -> pd.DataFrame:
    """Per kernel: category, path (tensor/vector), AIs, achieved FLOP/s, the roof at its intensity,
    % of that roof, and the verdict (memory-bound / compute-bound / no counters). `kernels`: an `analysis_frame`."""
    frame = kernels.copy()
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



def at_least_achieved(ceilings: Ceilings, kernels: pd.DataFrame) -> tuple[Ceilings, list[str]]:
    """`ceilings` raised to the highest rate a launch of the run reaches on its checked counters (tensor and
    fp32 FLOP/s, DRAM and L2 bytes/s, each on the counters' own duration), with a note per raised ceiling.
    Unchecked counters (schema-1 runs, lent across problems) raise nothing."""
    kernels = kernels[kernels["counter_status"].isin(CHECKED_STATUSES)]
    seconds = kernels["seconds"]
    achieved = {
        "bf16_tensor_tflops": (kernels["flops_tensor"] / seconds / 1e12, "TFLOP/s"),
        "fp32_tflops": (kernels["flops_fp32"] / seconds / 1e12, "TFLOP/s"),
        "dram_gb_s": (kernels["dram_bytes_per_s"] / 1e9, "GB/s"),
        "l2_gb_s": (kernels["l2_bytes"] / seconds / 1e9, "GB/s"),
        "l1_gb_s": (kernels["l1_bytes"] / seconds / 1e9, "GB/s"),
    }
    raised, notes = {}, []
    for field, (rates, unit) in achieved.items():
        current = getattr(ceilings, field)
        if current is None or rates.dropna().empty or rates.max() <= current:
            continue
        best = rates.idxmax()
        raised[field] = float(rates.max())
        notes.append(f"{field} ceiling {current:,.0f} {unit} ({ceilings.source}) is below what "
                     f"{kernels.at[best, 'kernel_name']} ({kernels.at[best, 'phase']}) reaches on this GPU: "
                     f"using {rates.max():,.0f} {unit}")
    if not raised:
        return ceilings, []
    return replace(ceilings, **raised, source=f"{ceilings.source}, raised to achieved"), notes
