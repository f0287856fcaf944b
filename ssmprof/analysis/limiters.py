"""What limits each kernel, with the counters that say so.

A roofline position says memory- or compute-bound by arithmetic intensity alone; a kernel left of the
ridge at 30 % of DRAM bandwidth is limited by something else. Rules, first match wins, each on the
launch's own checked counters:

1. launch overhead: shorter than SHORT_NS (about what launching it costs), with counters or without (the
   sampled passes leave out the functions that hold almost no time, mostly such kernels);
2. a unit at speed of light: DRAM, L2, a pipe (tensor, FMA, ALU, XU special functions, load/store) or the
   warp schedulers' issue slots busy at least BUSY_PCT of their peak (Nsight Compute's own rule of thumb:
   under 60 % of peak on both compute and memory means latency issues), the busiest such unit named;
3. too few thread blocks: the grid fills under one wave of the GPU's SMs (waves_per_sm < 1);
4. tail effect: the last wave leaves at least TAIL_IDLE of the SMs' block slots idle over the waves
   (1 - waves / ceil(waves), blocks assumed to take equal time);
5. occupancy: the theoretical occupancy (resident warps the launch configuration allows, MAX_WARPS per
   SM) at most LOW_OCCUPANCY, named by what caps it (registers, shared memory, warp or block slots); or the
   achieved occupancy under ACHIEVED_SHORTFALL of the theoretical (blocks ending unevenly, imbalance);
6. latency: no unit busy, enough blocks, occupancy not the cap. Where the warp-stall pass measured the
   launch (`stall_*`), named by what warps wait on most (ignoring `selected` and `not_selected`, which
   are issuing, not waiting); else "by elimination".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssmprof.schema import STALL_REASONS

SHORT_NS = 10_000
BUSY_PCT = 60.0
TAIL_IDLE = 0.25
LOW_OCCUPANCY = 0.25
ACHIEVED_SHORTFALL = 0.5
MAX_WARPS = 64  # resident warps per SM on A100, H100, H200 and B200
_UNITS = {"DRAM bandwidth": "dram_throughput_pct", "L2 bandwidth": "l2_throughput_pct",
          "tensor pipe": "tensor_pipe_pct", "FMA pipe": "fma_pipe_pct", "ALU pipe": "alu_pipe_pct",
          "XU pipe (special functions)": "xu_pipe_pct", "load/store pipe": "lsu_pipe_pct",
          "instruction issue": "issue_active_pct"}
_CAPS = {"registers": "occupancy_limit_registers", "shared memory": "occupancy_limit_shared_mem",
         "warp slots": "occupancy_limit_warps", "block slots": "occupancy_limit_blocks"}
# What a waiting warp can wait on: every stall reason but issuing
WAITS = [reason for reason in STALL_REASONS if reason not in ("selected", "not_selected")]


def theoretical_occupancy(kernels: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """(resident warps / MAX_WARPS, what caps the resident blocks) per launch, from the launch attributes."""
    caps = kernels[list(_CAPS.values())]
    blocks = caps.min(axis=1)
    warps_per_block = np.ceil(kernels["block_x"] * kernels["block_y"] * kernels["block_z"] / 32)
    occupancy = (blocks * warps_per_block / MAX_WARPS).clip(upper=1)
    cap = caps.fillna(np.inf).idxmin(axis=1).map({v: k for k, v in _CAPS.items()})
    return occupancy, cap.where(blocks.notna(), "")


def limiters(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per launch: `limiter` (the rule that matched), `top_stall` (what its warps wait on most, "" without the
    stall pass) and `evidence` (the numbers it rests on). `kernels`: an analysis frame."""
    frame = kernels.copy()
    occupancy, cap = theoretical_occupancy(frame)
    units = frame[list(_UNITS.values())]
    busiest = units.fillna(-np.inf).idxmax(axis=1).map({v: k for k, v in _UNITS.items()})
    peak = units.max(axis=1)
    counted = frame["ncu_duration_ns"].notna()
    waves = frame["waves_per_sm"]
    tail_idle = 1 - waves / np.ceil(waves)
    achieved = frame["achieved_occupancy_pct"] / 100
    frame["theoretical_occupancy_pct"] = 100 * occupancy
    frame["top_stall"] = top_stalls(frame).fillna("")
    frame["limiter"] = np.select(
        [frame["duration_ns"] < SHORT_NS, ~counted, peak >= BUSY_PCT, waves < 1, tail_idle >= TAIL_IDLE,
         occupancy <= LOW_OCCUPANCY, achieved < ACHIEVED_SHORTFALL * occupancy, frame["top_stall"] != ""],
        ["launch overhead", "no counters", busiest.fillna(""), "too few thread blocks", "tail effect",
         "occupancy (" + cap + ")", "occupancy (achieved under half of theoretical)",
         "latency: " + frame["top_stall"].str.replace("_", " ")],
        "latency (by elimination)")
    frame["evidence"] = [_evidence(row, p) for row, p in zip(frame.itertuples(), peak, strict=True)]
    return frame


def top_stalls(kernels: pd.DataFrame) -> pd.Series:
    """Per launch, the stall reason most warps wait on (NaN where the stall pass did not measure it)."""
    waits = kernels[[f"stall_{reason}" for reason in WAITS]]
    measured = waits.notna().any(axis=1)
    return waits.fillna(-1).idxmax(axis=1).str.removeprefix("stall_").where(measured)


def stall_shares(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per launch, each stall reason's share of the warps resident per issue cycle (rows sum to about 1)."""
    reasons = kernels[[f"stall_{reason}" for reason in STALL_REASONS]]
    return reasons.div(kernels["stall_warps_per_issue"], axis=0).set_axis(list(STALL_REASONS), axis=1)


def _evidence(row, peak: float) -> str:
    if np.isnan(row.ncu_duration_ns):
        return f"{row.duration_ns / 1e3:.1f} us, no counters" if row.duration_ns < SHORT_NS else ""
    busy = ", ".join(f"{name} {getattr(row, column):.0f} %" for name, column in _UNITS.items()
                     if not np.isnan(getattr(row, column)))
    text = (f"{row.duration_ns / 1e3:.1f} us; busiest unit {peak:.0f} % ({busy}); waves {row.waves_per_sm:.1f}; "
            f"occupancy {row.theoretical_occupancy_pct:.0f} % theoretical")
    if not np.isnan(row.achieved_occupancy_pct):
        text += f", {row.achieved_occupancy_pct:.0f} % achieved"
    text += f", {row.registers_per_thread:.0f} registers"
    if row.top_stall:
        shares = {reason: getattr(row, f"stall_{reason}") / row.stall_warps_per_issue for reason in WAITS}
        ranked = sorted(((v, k) for k, v in shares.items() if not np.isnan(v)), reverse=True)[:2]
        text += "; warps wait on " + ", ".join(f"{k.replace('_', ' ')} {100 * v:.0f} %" for v, k in ranked)
    return text


def limiter_summary(frame: pd.DataFrame, category: str | None = None, top: int = 20) -> pd.DataFrame:
    """Per kernel and phase (optionally one category), largest time first: launches, time, the limiter of
    most of its time, and the evidence of its longest launch."""
    if category is not None:
        frame = frame[frame["category"] == category]
    rows = []
    for (name, phase), group in frame.groupby(["kernel_name", "phase"]):
        by_limiter = group.groupby("limiter")["duration_ns"].sum()
        longest = group.loc[group["duration_ns"].idxmax()]
        rows.append({"kernel_name": name, "phase": phase, "launches": len(group),
                     "time_ms": group["duration_ns"].sum() / 1e6, "limiter": by_limiter.idxmax(),
                     "evidence": longest["evidence"]})
    table = pd.DataFrame(rows, columns=["kernel_name", "phase", "launches", "time_ms", "limiter", "evidence"])
    return table.sort_values("time_ms", ascending=False, ignore_index=True).head(top)


def stall_summary(frame: pd.DataFrame, category: str | None = None, top: int = 20) -> pd.DataFrame:
    """Per kernel and phase with warp-stall counters (optionally one category), largest time first: the time,
    the three reasons most warps wait on (`top_waits`, for a page) and each stall reason's share of the warps
    resident per issue cycle (`<reason>_share`, for the chart and the CSV), time-weighted over its launches."""
    if category is not None:
        frame = frame[frame["category"] == category]
    frame = frame[frame["stall_warps_per_issue"].notna()]
    shares = stall_shares(frame).mul(frame["duration_ns"], axis=0)
    grouped = shares.groupby([frame["kernel_name"], frame["phase"]])
    time = frame.groupby(["kernel_name", "phase"])["duration_ns"].sum()
    table = grouped.sum(min_count=1).div(time, axis=0).add_suffix("_share").reset_index()
    table.insert(2, "time_ms", (time / 1e6).to_numpy())
    waits = table[[f"{reason}_share" for reason in WAITS]]
    table.insert(3, "top_waits", [", ".join(f"{name.removesuffix('_share').replace('_', ' ')} {100 * share:.0f} %"
                                            for name, share in row.dropna().nlargest(3).items())
                                  for _, row in waits.iterrows()])
    return table.sort_values("time_ms", ascending=False, ignore_index=True).head(top)
