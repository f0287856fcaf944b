"""Hierarchical roofline: per kernel, intensity at DRAM/L2/L1, achieved FLOP/s, and what bounds it.

The ceilings are the run's own GPU's (`hardware.run_ceilings`: its device profile, else its datasheet row);
the returned frame says which (`ceiling_source`). Each kernel's roof is the lowest of its compute roof, its
DRAM intensity times DRAM bandwidth, where the L2 counters were collected its L2 intensity times L2's peak
and, where an L1 ceiling is measured, its L1 intensity times L1 bandwidth (the hierarchical
roofline), and `roof_limiter` names which. The L1 level counts global/local traffic through L1TEX
(`l1tex__t_bytes`) and, where the instruction-level counters measured it, shared-memory traffic as the data
pipe's wavefronts at 128 bytes each (DATA_PIPE_BYTES): both go through the SM's one L1 data pipe, one 128-byte
wavefront a cycle, so one roof (the L1 ceiling) bounds their sum.

One peak per unit, the same in the roofline and the limiters (`memory_pct_of_peak`: one number each). DRAM's
is the run's DRAM ceiling (the calibration's copy reaches 98 % of the H100's datasheet bandwidth). L2's is
Nsight Compute's own peak of the bytes the L2 slices serve (`lts__t_bytes`, ~13.1 TB/s on the H100), taken per
launch from its counters (`l2_peak_bytes_per_s`: the launch's L2 bytes/s over its % of that peak), so a
launch's % of its L2 roof is exactly its `l2_throughput_pct`. The calibration's L2 read probe (the device
profile's `l2_gb_s`, 7.7 TB/s on the H100) is the check beside it, not the roof: one streaming-read pattern
reaches 59 % of the slices' peak, while kernels that mix reads, writes and reuse are served at the slices'
rate; a roof at the probe's rate made L2 the lowest roof of 83 % of the H100 mamba2-lm SSM time while no SSM
launch's L2 counter passed half its peak, and Nsight Compute's rules, which use the counter's peak, agree with
the limiters' verdicts on 13 of the 15 SSD launches of tests/data/ncu-rules-mamba2-lm-h100 with it, 11 and one
apart with the probe's rate.

The compute roof of a kernel is that of its own mix: its tensor FLOPs at the tensor ceiling plus its vector
FLOPs at the vector ceiling, one after the other (`mix_peak_flop_per_s`). A Triton SSD kernel's elementwise
work consumes its dot products' results in the same warps, so the two do not overlap: `ddAcs` (92 % tensor
FLOPs) is bounded at ~440 TFLOP/s on the H100, not the tensor ceiling's 834. A pure tensor or vector kernel's
mix roof is its path's peak (`peak_flop_per_s`, what the chart draws). The special-function pipe is not in the
sum: only its rate is counted, not its instructions, so its time would be the measured time, not a bound.

A ceiling is what the GPU can do at best, so a checked launch that runs faster than one shows the calibration
fell short, not the kernel: `calibration_defects` lists those launches for the report to show, and the roof
stays where it was measured (raising it to the fastest launch would put that launch at 100 % by construction
and make a run's verdicts depend on the runs reported beside it).

The chart's points (`roofline_points`): one per kernel and launch configuration, not one per launch. A chart of
every launch grows with the run (a million launches gave a 94 MiB page) and draws the same kernel
hundreds of times on top of itself. Launches of one kernel, phase and launch configuration do the same work, so
they are summed into one point: its intensity is its FLOPs over its bytes, its rate its FLOPs over its counted
time, its % of roof time-weighted; its verdict and limiter stay those of its launches (they are grouping keys,
so a configuration whose launches fall on both sides of a ridge gives two points).

Headroom (`headroom`): the step time a kernel would give back if it ran at its roof, or at a reachable share of
it. Per launch with counters, the time at the roof is its FLOPs over the roof at its intensity (`roofline`), or,
for data movement (no FLOPs), its DRAM bytes at DRAM bandwidth. A roof is not reachable in practice: in
the bundled H100 LM runs with checked counters the fastest GEMM launch reaches 82 % of the dense bf16
datasheet peak and the fastest memory-bound launch 91-92 % of DRAM bandwidth (run.json
`counter_checks.max_fraction_of_peak`), so REACHABLE = 80 % of the roof is what a tuned kernel gets:
`saved_reachable_ms` is what an optimization effort could expect, `saved_at_roof_ms` its upper bound.
Launches without counters have no roof and count as no headroom (their time is shown).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssmprof.analysis.launches.frame import WEIGHT, time_weighted
from ssmprof.hardware import Ceilings
from ssmprof.schema import CHECKED_STATUSES, LAUNCH_CONFIG


def roofline(kernels: pd.DataFrame, ceilings: Ceilings) -> pd.DataFrame:
    """Per kernel: category, path (tensor/vector), AIs, achieved FLOP/s, the roof at its intensity,
    % of that roof, and the verdict (memory-bound / compute-bound / no counters). `kernels`: an `analysis_frame`."""
    frame = kernels.copy(deep=False)  # copy-on-write: the columns added here stay out of `kernels`
    tensor = frame["flops_tensor"].fillna(0) > frame["flops_vector"].fillna(0)
    peak = np.where(tensor, ceilings.bf16_tensor_tflops, ceilings.fp32_tflops) * 1e12
    bandwidth = ceilings.dram_gb_s * 1e9
    frame["path"] = np.where(tensor, "tensor", "vector")
    frame["peak_flop_per_s"] = peak
    frame["mix_peak_flop_per_s"] = mix_peak(frame, ceilings).fillna(pd.Series(peak, frame.index))
    frame["ridge_ai"] = peak / bandwidth
    l2_peak = l2_peak_bytes_per_s(frame)
    frame["l2_ridge_ai"] = peak / (l2_peak_gb_s(frame) * 1e9)  # the chart's L2 level: one per run
    frame["ai_l1_shared"] = frame["flops"] / l1_shared_bytes(frame).replace(0, np.nan)
    dram_roof = frame["ai_dram"] * bandwidth
    l2_roof = (frame["ai_l2"] * l2_peak).fillna(np.inf)
    l1_roof = _level_roof(frame["ai_l1_shared"], ceilings.l1_gb_s)
    memory_roof = np.minimum(dram_roof, np.minimum(l2_roof, l1_roof))
    compute_roof = frame["mix_peak_flop_per_s"]
    frame["roof_flop_per_s"] = np.minimum(compute_roof, memory_roof)
    frame["roof_limiter"] = np.select([frame["ai_dram"].isna(), frame["roof_flop_per_s"] >= compute_roof,
                                       dram_roof <= memory_roof, l2_roof <= memory_roof],
                                      ["", "compute", "DRAM", "L2"], "L1")
    # % of the roof at the kernel's intensity; undefined for kernels that do no arithmetic (copies), whose
    # measure is % of DRAM peak.
    frame["pct_of_roof"] = (100 * frame["flop_per_s"] / frame["roof_flop_per_s"]).where(frame["flops"] > 0)
    frame = frame.assign(**memory_pct_of_peak(frame, ceilings))
    # memory-bound where a memory level's roof is the lowest at the kernel's intensities (DRAM, or L2 / L1
    # where their peaks are known: `roof_limiter` says which), else compute-bound
    frame["verdict"] = np.select([frame["ai_dram"].isna(), frame["roof_limiter"].isin(["DRAM", "L2", "L1"])],
                                 ["no counters", "memory-bound"], "compute-bound")
    frame["ceiling_source"] = ceilings.source
    return frame


def mix_peak(kernels: pd.DataFrame, ceilings: Ceilings) -> pd.Series:
    """Per launch, its FLOPs over the time its tensor and vector FLOPs take at their ceilings, one after the other
    (the module's docstring says why additive); NaN where it does no arithmetic."""
    seconds = (kernels["flops_tensor"].fillna(0) / (ceilings.bf16_tensor_tflops * 1e12)
               + kernels["flops_vector"].fillna(0) / (ceilings.fp32_tflops * 1e12))
    return (kernels["flops"] / seconds).where(kernels["flops"] > 0)


def memory_pct_of_peak(kernels: pd.DataFrame, ceilings: Ceilings | None) -> dict[str, pd.Series]:
    """Per launch, DRAM and L2 as a % of their peaks (the module's docstring says which and why), the one number
    the roofline and the limiters show: DRAM bytes/s of the DRAM ceiling (Nsight Compute's own % without
    ceilings or bytes), L2 Nsight Compute's % of the slices' peak."""
    counted = kernels["dram_throughput_pct"] if "dram_throughput_pct" in kernels else pd.Series(np.nan, kernels.index)
    dram = counted
    if ceilings is not None and "dram_bytes" in kernels and "seconds" in kernels:
        dram = (100 * kernels["dram_bytes"] / kernels["seconds"] / (ceilings.dram_gb_s * 1e9)).fillna(counted)
    l2 = kernels["l2_throughput_pct"] if "l2_throughput_pct" in kernels else pd.Series(np.nan, kernels.index)
    return {"pct_of_dram_peak": dram, "pct_of_l2_peak": l2}


def l2_peak_gb_s(kernels: pd.DataFrame) -> float:
    """The run's L2 peak in GB/s, one number where one is needed (the chart's L2 level, the fused chain's L2 floor):
    the median over its launches of `l2_peak_bytes_per_s` (launches differ only by their clocks, 2 % on the
    bundled H100 runs); NaN without L2 counters."""
    return float(l2_peak_bytes_per_s(kernels).median() / 1e9)


def l2_peak_bytes_per_s(kernels: pd.DataFrame) -> pd.Series:
    """Per launch, the L2 slices' peak bytes/s as Nsight Compute counts it: the launch's L2 bytes/s over its % of
    that peak (NaN where either was not collected or the launch moved no L2 bytes)."""
    rate = kernels["l2_bytes"] / kernels["seconds"]
    return (rate * 100 / kernels["l2_throughput_pct"].where(kernels["l2_throughput_pct"] > 0)).where(rate > 0)


DATA_PIPE_BYTES = 128  # one wavefront of the L1 data pipe: a cycle, at most 128 bytes (A100, H100, H200)


def l1_shared_bytes(kernels: pd.DataFrame) -> pd.Series:
    """The bytes through the L1 data pipe: global/local through L1TEX plus, where counted, the shared-memory
    wavefronts at DATA_PIPE_BYTES each (what the pipe spends on them, broadcasts included)."""
    shared = kernels["shared_wavefronts"].fillna(0) * DATA_PIPE_BYTES if "shared_wavefronts" in kernels else 0.0
    return kernels["l1_bytes"] + shared


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




# How far past a calibrated ceiling a launch may run before it is a calibration defect, per ceiling. A probe's
# fastest repeat is within 1.5 % of its median, the ceiling (the 24 probes of two fresh H100 calibrations,
# tests/data/calibrate-probes-two-h100s), and the copy probe's bytes are accepted within 2 % of the analytic count:
# 2 % in general. A workload's GEMM beat the probe of its own shape and tile by 6.0 % (the hybrid's 8192x4096x4096
# TNT GEMM, 323.8 us under Nsight Compute on the host whose probe took 343.2 us; 2.2 % above the tensor ceiling):
# a probe streams random operands back to back, a workload's GEMM runs between lighter kernels on values that
# toggle less (the likely causes, not measured apart), so the tensor ceiling allows 6 %.
CALIBRATION_TOLERANCE = {"bf16_tensor_tflops": 0.06, "fp32_tflops": 0.02, "dram_gb_s": 0.02, "l1_gb_s": 0.02}
# What `calibration_defects` compares: (ceiling field, what it limits, unit, unit in the ceiling's scale).
_RATES = (("bf16_tensor_tflops", "tensor FLOP/s", "TFLOP/s", 1e12), ("fp32_tflops", "fp32 FLOP/s", "TFLOP/s", 1e12),
          ("dram_gb_s", "DRAM bytes/s", "GB/s", 1e9), ("l1_gb_s", "L1 bytes/s", "GB/s", 1e9))


def calibration_defects(ceilings: Ceilings, kernels: pd.DataFrame) -> pd.DataFrame:
    """The checked launches (`CHECKED_STATUSES`) whose rate exceeds a ceiling: tensor and fp32 FLOP/s, DRAM and
    L1 data-pipe bytes/s (the byte counts the roofline's intensities use; L2's roof is the counter's own peak,
    not a calibrated one), each on the counters' own duration, by more than its CALIBRATION_TOLERANCE. One row per
    launch and ceiling exceeded, fastest first within each ceiling; empty where the ceilings hold.
    Unchecked counters (schema-1 runs, lent across problems) prove nothing and are left out."""
    checked = kernels.loc[kernels["counter_status"].isin(CHECKED_STATUSES)]
    seconds = checked["seconds"]
    measured = {"bf16_tensor_tflops": checked["flops_tensor"], "fp32_tflops": checked["flops_fp32"],
                "dram_gb_s": checked["dram_bytes"], "l1_gb_s": l1_shared_bytes(checked)}
    frames = []
    for field, rate, unit, scale in _RATES:
        ceiling = getattr(ceilings, field)
        achieved = measured[field] / seconds / scale
        over = (achieved > ceiling * (1 + CALIBRATION_TOLERANCE[field]) if ceiling
                else pd.Series(False, achieved.index))
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


KEYS = ("kernel_name", "phase", "category", "path", "verdict", "roof_limiter", *LAUNCH_CONFIG)
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


def kernel_bounds(roofline: pd.DataFrame) -> pd.DataFrame:
    """Per kernel (short name and phase) with counters: time, share of its time memory-bound, time-weighted %
    of roof, and the verdict of the majority of its time."""
    rows = []
    measured = roofline[roofline["verdict"] != "no counters"]
    for (name, phase), group in measured.groupby(["kernel_name", "phase"], sort=False):
        weight = group[WEIGHT]
        memory = weight[group["verdict"] == "memory-bound"].sum() / weight.sum() if weight.sum() else float("nan")
        rows.append({"kernel_name": name, "phase": phase, "memory_bound_share": memory,
                     "pct_of_roof": time_weighted(group["pct_of_roof"], weight),
                     "verdict": "memory-bound" if memory >= 0.5 else "compute-bound"})
    return pd.DataFrame(rows, columns=["kernel_name", "phase", "memory_bound_share", "pct_of_roof", "verdict"])
