"""Instruction-level bounds: what holds a kernel that sits under every FLOP roof.

A FLOP roofline places a kernel by its floating-point work alone. A kernel whose time goes to exponentials (the
XU pipe, which no FLOP counter counts), integer and address arithmetic (ALU), loads and stores (LSU), shared
memory, or simply to issuing instructions, sits far under both the tensor and the fp32 roof and right of the DRAM
ridge, and no roof says why. Ding & Williams' instruction roofline (NERSC) counts warp instructions instead:
instructions issued per second against the issue peak (each scheduler issues one warp instruction a cycle), and
instruction intensity, warp instructions per memory transaction, at each level of the hierarchy, shared memory
a level of its own (the L1 level excludes it).

A kernel's compute bound is the tightest of the units that execute its instructions, read as Nsight Compute's
percentage of each unit's peak while the SM is active: the busiest pipe among tensor, FMA, ALU, XU and LSU, the
issue slots, and shared memory (its wavefronts against the data pipe's one a cycle per SM). Each is a fraction of
the same active cycles, so the largest is the one the kernel can least exceed; it binds at 100 %. A run recorded
before the issue and shared-memory counters were collected says so ("not collected") and binds on what it has:
the pipes and the scheduler's issue-active share (an issue slot used is a warp instruction issued).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssmprof.analysis.launches.categories import SSM
from ssmprof.analysis.launches.frame import time_weighted_by
from ssmprof.schema import CHECKED_STATUSES

# The pipes by the names every page and verdict gives them (`analysis.limits.limiters` ranks the same units).
PIPES = {"tensor pipe": "tensor_pipe_pct", "FMA pipe": "fma_pipe_pct", "ALU pipe": "alu_pipe_pct",
         "XU pipe (special functions)": "xu_pipe_pct", "load/store pipe": "lsu_pipe_pct"}
SECTOR_BYTES = 32  # an L1, L2 or DRAM transaction: one 32-byte sector
SCHEDULERS_PER_SM = 4  # warp schedulers per SM, one warp instruction a cycle each (A100, H100, H200, B200)
NOT_COLLECTED = "not collected"
# The counters added for these bounds, absent from runs recorded before them: what a bound then lacks.
OPTIONAL = {"shared memory": "shared_pipe_pct", "instructions executed": "inst_issue_pct"}


def issue_peak_per_s(gpu: dict) -> float:
    """The GPU's warp-instruction issue peak (instructions per second) at the SM clock run.json recorded; NaN
    where it recorded none."""
    mhz = gpu.get("clocks", {}).get("sm_mhz")
    sms = gpu.get("sm_count")
    return float(SCHEDULERS_PER_SM * sms * mhz * 1e6) if mhz and sms else float("nan")


def launch_bounds(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per launch (index-aligned with `kernels`, an analysis frame): the busiest pipe and its %, the issue %
    (`inst_issue_pct`, else the older `issue_active_pct`: `issue_source` says which), the shared-memory %, and the
    compute bound: the unit with the largest % (`bound`, `bound_pct`); `missing` names what was not collected.
    Launches without checked counters get `bound` "no counters". This is what the limiter verdicts can call."""
    pipes = kernels[list(PIPES.values())]
    busiest = pipes.fillna(-np.inf).idxmax(axis=1).map({column: name for name, column in PIPES.items()})
    issue = kernels["inst_issue_pct"].fillna(kernels["issue_active_pct"])
    issue_source = np.where(kernels["inst_issue_pct"].notna(), "instructions executed",
                            np.where(kernels["issue_active_pct"].notna(), "issue-active cycles", NOT_COLLECTED))
    candidates = pd.DataFrame({"pipe": pipes.max(axis=1), "issue slots": issue,
                               "shared memory": kernels["shared_pipe_pct"]})
    bound = candidates.fillna(-np.inf).idxmax(axis=1)
    bound = bound.where(bound != "pipe", busiest)
    counted = kernels["counter_status"].isin(CHECKED_STATUSES) & candidates.notna().any(axis=1)
    codes = sum(kernels[column].isna().to_numpy() * (1 << i) for i, column in enumerate(OPTIONAL.values()))
    words = [", ".join(name for i, name in enumerate(OPTIONAL) if code >> i & 1) for code in range(1 << len(OPTIONAL))]
    missing = np.array(words, dtype=object)[codes]  # what each launch lacks, one bit per optional counter
    return pd.DataFrame({
        "busiest_pipe": busiest.where(counted, ""), "busiest_pipe_pct": pipes.max(axis=1).where(counted),
        "issue_pct": issue.where(counted), "issue_source": np.where(counted, issue_source, ""),
        "shared_pct": kernels["shared_pipe_pct"].where(counted), "bound": bound.where(counted, "no counters"),
        "bound_pct": candidates.max(axis=1).where(counted), "missing": np.where(counted, missing, ""),
    }, index=kernels.index)


def instruction_roofline(kernels: pd.DataFrame, gpu: dict) -> pd.DataFrame:
    """Per launch, Ding & Williams' coordinates: warp instructions per second (`inst_per_s`) against the issue
    peak (`issue_peak_per_s`), and instruction intensity, warp instructions per transaction, at each level:
    shared memory (wavefronts), L1, L2 and DRAM (32-byte sectors). NaN where the counters are missing."""
    inst = kernels["warp_inst_executed"]
    seconds = kernels["duration_ns"] / 1e9
    dram_bytes = kernels["dram_read_bytes"] + kernels["dram_write_bytes"]
    return pd.DataFrame({
        "inst_per_s": inst / seconds, "issue_peak_per_s": issue_peak_per_s(gpu),
        "inst_per_shared_wavefront": inst / kernels["shared_wavefronts"].where(kernels["shared_wavefronts"] > 0),
        "inst_per_l1_sector": inst / (kernels["l1_bytes"] / SECTOR_BYTES).where(kernels["l1_bytes"] > 0),
        "inst_per_l2_sector": inst / (kernels["l2_bytes"] / SECTOR_BYTES).where(kernels["l2_bytes"] > 0),
        "inst_per_dram_sector": inst / (dram_bytes / SECTOR_BYTES).where(dram_bytes > 0),
    }, index=kernels.index)


NUMBERS = ["busiest_pipe_pct", "issue_pct", "shared_pct", "inst_rate_pct_of_issue_peak", "inst_per_shared_wavefront",
           "inst_per_l2_sector", "inst_per_dram_sector"]
READ = ["kernel_name", "phase", "duration_ns", "counter_status", *PIPES.values(), "inst_issue_pct", "issue_active_pct",
        "shared_pipe_pct", "warp_inst_executed", "shared_wavefronts", "l1_bytes", "l2_bytes", "dram_read_bytes",
        "dram_write_bytes"]
SUMMARY_COLUMNS = ["kernel_name", "phase", "launches", "time_ms", "bound", "bound_pct", "busiest_pipe", *NUMBERS,
                   "missing"]


def instruction_bounds(kernels: pd.DataFrame, gpu: dict, category: str | None = SSM,
                       top: int = 30) -> pd.DataFrame:
    """Per kernel and phase (of `category`; every kernel where None), largest time first: the compute bound of most
    of its time with its % (`bound_pct`, time-weighted over the launches bound by it), the busiest pipe and its %,
    the issue and shared-memory %, instructions per second as % of the issue peak, instruction intensities (per
    shared wavefront, per L2 and DRAM sector; time-weighted) and what was not collected."""
    chosen = (kernels["duration_ns"] > 0) & (kernels["category"] == category if category is not None else True)
    frame = kernels.loc[chosen, READ]  # the columns the bounds read, before any row is taken
    bounds, coordinates = launch_bounds(frame), instruction_roofline(frame, gpu)
    joined = pd.concat([frame[["kernel_name", "phase", "duration_ns"]], bounds, coordinates], axis=1)
    joined["inst_rate_pct_of_issue_peak"] = 100 * joined["inst_per_s"] / joined["issue_peak_per_s"]
    rows = []
    for (name, phase), group in joined.groupby(["kernel_name", "phase"], sort=False):
        by_bound = group.groupby("bound")["duration_ns"].sum()
        bound = by_bound.idxmax()
        held = group[group["bound"] == bound]
        means = time_weighted_by(group.assign(_all=0), "_all", NUMBERS).iloc[0]
        pipe = group.groupby("busiest_pipe")["duration_ns"].sum().idxmax()
        rows.append({"kernel_name": name, "phase": phase, "launches": len(group),
                     "time_ms": group["duration_ns"].sum() / 1e6, "bound": bound,
                     "bound_pct": time_weighted_by(held.assign(_all=0), "_all", ["bound_pct"]).iloc[0]["bound_pct"],
                     "busiest_pipe": pipe, **{column: means[column] for column in NUMBERS},
                     "missing": ", ".join(sorted(set(group["missing"].unique()) - {""})) or ""})
    table = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    return table.sort_values("time_ms", ascending=False, ignore_index=True).head(top)


def bound_sentence(row: pd.Series) -> str:
    """One kernel's bound in words, e.g. "XU pipe (special functions) 47 % (shared memory not collected)"."""
    if row["bound"] == "no counters":
        return "no counters"
    text = f"{row['bound']} {row['bound_pct']:.0f} %"
    return text + (f" ({row['missing']} {NOT_COLLECTED})" if row["missing"] else "")
