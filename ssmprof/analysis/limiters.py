"""What limits each kernel, with the counters that say so.

A roofline position says memory- or compute-bound by arithmetic intensity alone; a kernel left of the
ridge at 30 % of DRAM bandwidth is limited by something else. Rules, first match wins, each on the
launch's own checked counters:

1. launch overhead: shorter than SHORT_NS (about what launching it costs);
2. a unit at speed of light: DRAM, L2, tensor pipe or FMA pipe busy at least BUSY_PCT of its peak
   (Nsight Compute's own rule of thumb: under 60 % of peak on both compute and memory means latency
   issues), the busiest such unit named;
3. too few thread blocks: the grid fills under one wave of the GPU's SMs (waves_per_sm < 1);
4. occupancy: the theoretical occupancy (resident warps the launch configuration allows, MAX_WARPS per
   SM) at most LOW_OCCUPANCY, named by what caps it (registers, shared memory, warp or block slots);
5. latency, by elimination: no unit busy, enough blocks, occupancy not capped. Warp-stall counters are not
   collected yet, so which latency (memory, barrier, dependency) is not said.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SHORT_NS = 10_000
BUSY_PCT = 60.0
LOW_OCCUPANCY = 0.25
MAX_WARPS = 64  # resident warps per SM on A100, H100, H200 and B200
_UNITS = {"DRAM bandwidth": "dram_throughput_pct", "L2 bandwidth": "l2_throughput_pct",
          "tensor pipe": "tensor_pipe_pct", "FMA pipe": "fma_pipe_pct"}
_CAPS = {"registers": "occupancy_limit_registers", "shared memory": "occupancy_limit_shared_mem",
         "warp slots": "occupancy_limit_warps", "block slots": "occupancy_limit_blocks"}


def theoretical_occupancy(kernels: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """(resident warps / MAX_WARPS, what caps the resident blocks) per launch, from the launch attributes."""
    caps = kernels[list(_CAPS.values())]
    blocks = caps.min(axis=1)
    warps_per_block = np.ceil(kernels["block_x"] * kernels["block_y"] * kernels["block_z"] / 32)
    occupancy = (blocks * warps_per_block / MAX_WARPS).clip(upper=1)
    cap = caps.fillna(np.inf).idxmin(axis=1).map({v: k for k, v in _CAPS.items()})
    return occupancy, cap.where(blocks.notna(), "")


def limiters(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per launch: `limiter` (the rule that matched) and `evidence` (the numbers it rests on).
    `kernels`: an analysis frame."""
    frame = kernels.copy()
    occupancy, cap = theoretical_occupancy(frame)
    units = frame[list(_UNITS.values())]
    busiest = units.fillna(-np.inf).idxmax(axis=1).map({v: k for k, v in _UNITS.items()})
    peak = units.max(axis=1)
    counted = frame["ncu_duration_ns"].notna()
    frame["theoretical_occupancy_pct"] = 100 * occupancy
    frame["limiter"] = np.select(
        [~counted, frame["duration_ns"] < SHORT_NS, peak >= BUSY_PCT, frame["waves_per_sm"] < 1,
         occupancy <= LOW_OCCUPANCY],
        ["no counters", "launch overhead", busiest.fillna(""), "too few thread blocks", "occupancy (" + cap + ")"],
        "latency (by elimination)")
    frame["evidence"] = [_evidence(row, p) for row, p in zip(frame.itertuples(), peak, strict=True)]
    return frame


def _evidence(row, peak: float) -> str:
    if np.isnan(row.ncu_duration_ns):
        return ""
    busy = ", ".join(f"{name} {getattr(row, column):.0f} %" for name, column in _UNITS.items()
                     if not np.isnan(getattr(row, column)))
    return (f"{row.duration_ns / 1e3:.1f} us; busiest unit {peak:.0f} % ({busy}); waves {row.waves_per_sm:.1f}; "
            f"occupancy {row.theoretical_occupancy_pct:.0f} % theoretical, {row.registers_per_thread:.0f} registers")


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
