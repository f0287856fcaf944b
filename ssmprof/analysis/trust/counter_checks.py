"""Self-checks of every launch's counters: what fails is removed, counted and named, never silently used.

Run on the joined kernel table before the run directory is written (the pipeline hands it to the profiler
through `pipeline.measure.check_run_counters`; pure: frame in, frame and summary out). Per launch with
counters (`measured` or `lent`):

- duration: the Nsight Compute duration the counters were measured over against this launch's timeline
  duration. Tolerance, chosen on the 12 paper runs bundled before schema 2 (H100 + H200, 1,242 profiled
  launches compared with themselves): the two collectors differ by up to 4.2 us on kernels under 10 us
  (p99; ncu replays with flushed caches and adds launch overhead) and within 0.85-1.27x (p5-p95) above
  10 us. A launch passes within DURATION_FLOOR_NS or within DURATION_RATIO either way; 98.4 % of those
  launches pass, while counters lent across problems (a 360 us launch carrying a 4 ms GEMM's) fail.
- rates, on the counters' own duration: DRAM bytes/s, tensor and fp32 FLOP/s at most the GPU's datasheet
  peak; L2 throughput at most 100 % of ncu's peak. A rate past the hardware means the counters and the
  duration describe different work.
- hit rates within 0-100 %: ncu's sector accounting reads up to ~0.2 % over 100 on tiny kernels
  (gpu-facts); values up to HIT_RATE_SLACK over are clipped to 100, beyond that the launch fails. A kernel that
  only stores (DRAM reads under STORE_ONLY_READ_SHARE of its L2 bytes: fills, `arange`) is allowed
  STORE_HIT_RATE_SLACK: under the counter set's replay passes its L2 hit rate reads up to 105.3 % on an H100 (48
  fills of 128 to 411 M elements, fp32 and bf16; 95-103 % with a dozen metrics; tests/data/ncu-fill-hit-rate-h100),
  and the 1 % slack had removed every such kernel's counters: 4-5 % of hf:granite-4.0-hybrid's kernel time.
- GEMMs: tensor FLOPs against 2*M*N*K (times the batch) from the launching op's input shapes. A launch
  passes from GEMM_RATIO_BAND[0] x 2MNK up to GEMM_RATIO_BAND[1] x the work with M, N and K padded to the
  kernel's tile (`padded_gemm_flops`). Why padded: a tensor-core GEMM computes whole CTA tiles, and every
  MMA it issues is counted, zeros or not (out-of-bounds rows and columns are loaded as zeros, the last K
  step runs a whole K tile), so a dimension of 6, 10 or 38 costs a tile's work. On the H100 graph-mamba
  paper run, a band of 0.8-1.25 x 2MNK removed the counters of 107 launches of skinny GEMMs (about 6 % of
  kernel time; dimensions of 6, 10, 38 and 96 under tiles of 16-256 a side), while the GEMMs that passed
  summed to 1.005 (forward) and 1.009 (backward) x 2MNK. Their counters were removed, so no measured ratio
  of theirs is known: the padded bound is what the tiles allow, not a fit to them.
  The tile comes from the kernel's name (the full name where recorded): cuBLAS's nvjet
  (`nvjet_sm90_tst_96x256_64x4_...`: M x N CTA tile, K tile x stages), CUTLASS 2
  (`cutlass::Kernel2<cutlass_80_tensorop_..._gemm_bf16_128x64_64x3_tt_align2>`, whose short name is just
  `Kernel2`), CUTLASS 3 and cuBLAS's xmma (`..._128x256x64_...`, `tilesize128x128x64`). Which GEMM dimension
  lies along the tile's M and which along its N depends on the transposes (cuBLAS is column-major, PyTorch
  row-major), so both orientations are padded and the larger taken. A kernel whose name carries no tile is
  padded to DEFAULT_TILE, 128 x 128 x 64. The MMA shapes give only the smallest step (Hopper's wgmma: 64 rows
  per warpgroup, N in steps of 8, K in steps of 16 for bf16; Ampere's mma.sync m16n8k16), and library CTA
  tiles are multiples of them, 16-256 a side with K tiles of 32-64 (128 in CUTLASS's wmma kernels): 128 x 128
  x 64 is a common middle, not a ceiling, so a tile-less kernel running a 256-wide tile over a tiny dimension
  can still fail.
  Tight where it matters: for a large GEMM the padding is a few % at most, so another problem's counters
  (12x the work: a 4 ms GEMM's on a 360 us launch) still fail. Where a dimension is far below the tile the
  bound is wide (36x for a [192, 28544] x [28544, 6] product under the default tile); there the duration
  check is what catches counters of another problem.
  Beside the band, `gemm_work` sums each phase's checked GEMMs against 2MNK and against the work whole tiles
  issue the cheaper way round (`issued_gemm_flops`). On the seven bundled H100 runs, forward and backward, the
  counters are within 1.000-1.028x of the work whole tiles issue, and within 1.002-1.037x 2MNK except
  graph-mamba's 1.35x 2MNK: 26 % of graph-mamba's issued GEMM work is padding (K = 96 run as two 64-deep steps,
  a 38-wide output as a 64-wide tile).

Warp stalls (their own pass, `stall_lender` set) are checked apart, and removed apart:
- duration: the stall pass's Nsight Compute duration against the timeline's, with the tolerance above;
- the reasons add up: by definition the warps stalled per issue cycle, summed over the reasons, are the warps
  resident per issue cycle (`stall_warps_per_issue`); a sum off by more than STALL_SUM_TOLERANCE means the
  reasons were not all counted over the same launch. Set at 10 % before any stall pass ran; on the H100 paper
  runs bundled since (run.json `checks.stalls`, measured again 2026-11-27) the worst kept launch is off by
  4.1 % (mamba2-lm, 400 launches), 2.8 % (graph-mamba, 113), 9.0 % (hybrid, 201) and 4.7 % (transformer, 76);
  none was removed (the H100 runs of 2026-11-24 02:00: 3.6, 3.8, 3.2 and 0.7 %, one graph-mamba launch removed at
  56 %; of that morning: 3.9, 7.6, 3.5 and 0.7 %, one graph-mamba launch removed at 35 %; of 2026-11-23: 3.4, 4.0,
  3.9 and 1.2 %, one launch each of graph-mamba, the hybrid and the transformer removed at 41, 16 and 57 %).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ssmprof.analysis.launches.derived import derive, tensor_flops
from ssmprof.analysis.launches.distinct import per_distinct
from ssmprof.hardware import Peaks
from ssmprof.op_work import gemm_flops, gemm_problem
from ssmprof.schema import (
    CHECKED_STATUSES,
    COUNTER_COLUMNS,
    PHASES,
    STALL_COLUMNS,
    STALL_REASONS,
    RejectedGroup,
    countable,
)

DURATION_FLOOR_NS = 4000
DURATION_RATIO = 1.5
HIT_RATE_SLACK = 1.0
STORE_HIT_RATE_SLACK = 6.0
STORE_ONLY_READ_SHARE = 0.01
# Tensor FLOPs of a GEMM launch: at least [0] x 2MNK, at most [1] x the work padded to the kernel's tile.
GEMM_RATIO_BAND = (0.8, 1.25)
STALL_SUM_TOLERANCE = 0.1
@dataclass(frozen=True)
class Tile:
    """A GEMM kernel's CTA tile: rows x columns of the output it computes, and the K step of its main loop."""

    m: int
    n: int
    k: int


# The tile of a kernel whose name carries none (see the module docstring for why 128 x 128 x 64).
DEFAULT_TILE = Tile(128, 128, 64)
# Tiles in kernel names, first match wins: M x N x K (CUTLASS 3 `_128x256x64_1x2x1_`, cuBLAS xmma
# `tilesize128x128x64`); M x N _ K x stages (nvjet `tst_96x256_64x4_`, CUTLASS 2 `gemm_bf16_128x64_64x3_`);
# M x N alone (CUTLASS 2 `s1688gemm_bf16_64x64_nt`: K is DEFAULT_TILE's).
_TILE_PATTERNS = (re.compile(r"(?:gemm\w*?_|tilesize)(\d+)x(\d+)x(\d+)_"),
                  re.compile(r"(?:nvjet|gemm)\w*?_(\d+)x(\d+)_(\d+)x\d+_"),
                  re.compile(r"gemm\w*?_(\d+)x(\d+)_"))


def kernel_tile(kernel_name: str) -> Tile | None:
    """The CTA tile a GEMM kernel's name carries (nvjet, CUTLASS 2 and 3, cuBLAS xmma); None where it has none."""
    for number, pattern in enumerate(_TILE_PATTERNS):
        found = pattern.search(kernel_name or "")
        if found:
            m, n = int(found[1]), int(found[2])
            k = int(found[3]) if number < 2 else DEFAULT_TILE.k
            if m > 0 and n > 0 and k > 0:
                return Tile(m, n, k)
    return None


def padded_gemm_flops(launch_op: str, launch_shapes: str, kernel_name: str) -> float:
    """2*M*N*K (x batch) with M, N and K rounded up to the kernel's tile (`kernel_tile`, else DEFAULT_TILE):
    the most tensor work whole tiles can issue. M and N are padded both ways round (which lies along the tile's
    rows depends on the transposes) and the larger taken; NaN where the op or shapes say nothing."""
    return _tiled_gemm_flops(launch_op, launch_shapes, kernel_name, max)


def issued_gemm_flops(launch_op: str, launch_shapes: str, kernel_name: str) -> float:
    """As `padded_gemm_flops`, with the smaller of the two orientations: the tensor work whole tiles issue
    where the GEMM's output lies along the tile the cheaper way round. The measured work of every GEMM on the
    bundled H100 runs is within a few % of it (module docstring); NaN where the op or shapes say nothing."""
    return _tiled_gemm_flops(launch_op, launch_shapes, kernel_name, min)


def _tiled_gemm_flops(launch_op: str, launch_shapes: str, kernel_name: str, orientation) -> float:
    problem = gemm_problem(launch_op, launch_shapes)
    if problem is None:
        return float("nan")
    batch, m, n, k = problem
    tile = kernel_tile(kernel_name) or DEFAULT_TILE
    output = orientation(_round_up(m, tile.m) * _round_up(n, tile.n), _round_up(m, tile.n) * _round_up(n, tile.m))
    return 2.0 * batch * output * _round_up(k, tile.k)


def _tile_names(kernels: pd.DataFrame) -> pd.Series:
    """Per launch, the name a GEMM's tile is read from: the full (demangled) name where recorded, which carries
    CUTLASS's template, else the short one."""
    return kernels["kernel_name_full"].where(kernels["kernel_name_full"].fillna("") != "", kernels["kernel_name"])


def _round_up(size: int, step: int) -> int:
    return math.ceil(size / step) * step


def check_counters(kernels: pd.DataFrame, peaks: Peaks | None) -> tuple[pd.DataFrame, dict]:
    """(the table with failing launches' counters removed and `counter_status` = "rejected: <check>",
    the summary for run.json)."""
    frame = derive(kernels)
    counted = kernels["counter_status"].isin(CHECKED_STATUSES) & kernels["ncu_duration_ns"].notna()
    duration_ok = _durations_agree(kernels["ncu_duration_ns"], kernels["duration_ns"])
    fractions = _fractions_of_peak(frame, peaks)
    rate_ok = ~(fractions > 1).any(axis=1)
    hit = kernels[["l1_hit_rate_pct", "l2_hit_rate_pct"]]
    stores_only = kernels["dram_read_bytes"] < STORE_ONLY_READ_SHARE * kernels["l2_bytes"]
    slack = np.where(stores_only, STORE_HIT_RATE_SLACK, HIT_RATE_SLACK)
    hit_ok = ~((hit < 0) | hit.gt(100 + slack, axis=0)).any(axis=1)
    analytic = pd.Series([gemm_flops(op, shapes) for op, shapes in zip(kernels["launch_op"], kernels["launch_shapes"],
                                                                       strict=True)], index=kernels.index)
    names = _tile_names(kernels)
    padded = pd.Series([padded_gemm_flops(op, shapes, name) for op, shapes, name
                        in zip(kernels["launch_op"], kernels["launch_shapes"], names, strict=True)],
                       index=kernels.index, dtype=float)
    gemm = analytic.notna() & (frame["flops_tensor"] > 0)
    gemm_ratio = frame["flops_tensor"] / analytic
    gemm_allowed = GEMM_RATIO_BAND[1] * padded / analytic  # the upper bound, as a ratio to 2MNK
    gemm_ok = ~gemm | ((gemm_ratio >= GEMM_RATIO_BAND[0]) & (gemm_ratio <= gemm_allowed))
    reason = np.select([~duration_ok, ~rate_ok, ~hit_ok, ~gemm_ok],
                       ["rejected: duration", "rejected: rate above peak", "rejected: hit rate",
                        "rejected: GEMM FLOPs"], "")
    rejected = counted & (reason != "")
    out = kernels.copy()
    out.loc[rejected, list(COUNTER_COLUMNS)] = np.nan
    out.loc[rejected, "counter_status"] = reason[rejected.to_numpy()]
    for column in ("l1_hit_rate_pct", "l2_hit_rate_pct"):
        out[column] = out[column].clip(upper=100)
    kept = counted & ~rejected
    gemm_failed = out["counter_status"] == "rejected: GEMM FLOPs"
    evidence = out[rejected].assign(gemm_ratio=gemm_ratio.where(gemm_failed),
                                    gemm_ratio_max=gemm_allowed.where(gemm_failed))
    out, stalls = _check_stalls(out)
    summary = {
        "duration_tolerance": {"floor_ns": DURATION_FLOOR_NS, "ratio": DURATION_RATIO},
        "status_time_fraction": _time_shares(out),
        "status_launches": {k: int(v) for k, v in out["counter_status"].value_counts().items()},
        "gemm_ratio_band": {"min": GEMM_RATIO_BAND[0], "max_over_padded": GEMM_RATIO_BAND[1],
                            "default_tile": [DEFAULT_TILE.m, DEFAULT_TILE.n, DEFAULT_TILE.k]},
        "rejected": _rejected_table(evidence),
        "max_fraction_of_peak": ({k: _max(v[kept]) for k, v in fractions.items()} if peaks else
                                 "GPU not in the datasheet table: rates not checked"),
        "hit_rates_clipped": int((hit[kept] > 100).any(axis=1).sum()),
        "gemm_flops": _gemm_summary(gemm_work(out)),
        "stalls": stalls,
    }
    return out, summary


def _durations_agree(ncu: pd.Series, timeline: pd.Series) -> pd.Series:
    timeline = timeline.astype(float)
    ratio = ncu / timeline.replace(0, np.nan)
    return ((ncu - timeline).abs() <= DURATION_FLOOR_NS) | ratio.between(1 / DURATION_RATIO, DURATION_RATIO)


def _check_stalls(kernels: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """(the table with failing launches' warp stalls removed, the stall summary for run.json `checks`)."""
    has = kernels["stall_lender"].notna()
    reasons = kernels[[f"stall_{reason}" for reason in STALL_REASONS]].sum(axis=1, min_count=1)
    sum_error = (reasons / kernels["stall_warps_per_issue"] - 1).abs()
    duration_ok = _durations_agree(kernels["stall_duration_ns"], kernels["duration_ns"])
    sum_ok = sum_error <= STALL_SUM_TOLERANCE
    failed = has & ~(duration_ok & sum_ok)
    out = kernels.copy()
    out.loc[failed, list(STALL_COLUMNS)] = np.nan
    total = kernels["duration_ns"].sum()
    return out, {
        "sum_tolerance": STALL_SUM_TOLERANCE,
        "launches": int(has.sum()),
        "rejected": {"duration": int((has & ~duration_ok).sum()), "reasons do not add up": int((has & ~sum_ok).sum())},
        "max_sum_error": _max(sum_error[has]),
        "time_fraction": float(kernels.loc[has & ~failed, "duration_ns"].sum() / total) if total else 0.0,
    }


def _fractions_of_peak(frame: pd.DataFrame, peaks: Peaks | None) -> pd.DataFrame:
    """Per launch, each rate as a fraction of its peak (on the counters' own duration)."""
    if peaks is None:
        return pd.DataFrame(index=frame.index)
    seconds = frame["ncu_duration_ns"] / 1e9
    tensor_time = ((frame["tensor_ops_bf16"].fillna(0) + frame["tensor_ops_fp16"].fillna(0)) / peaks.bf16_flops
                   + frame["tensor_ops_tf32"].fillna(0) / peaks.tf32_flops
                   + frame["tensor_ops_fp8"].fillna(0) / (2 * peaks.bf16_flops))
    return pd.DataFrame({
        "dram": frame["dram_bytes"] / seconds / peaks.dram_bytes,
        "tensor": tensor_time / seconds,
        "fp32": frame["flops_fp32"] / seconds / peaks.fp32_flops,
        "l2": frame["l2_throughput_pct"] / 100,
    })


def _time_shares(kernels: pd.DataFrame) -> dict:
    status = kernels["counter_status"].where(~kernels["counter_status"].str.startswith("rejected"), "rejected")
    total = kernels["duration_ns"].sum()
    return {k: float(v / total) for k, v in kernels.groupby(status)["duration_ns"].sum().items()} if total else {}


def _rejected_table(rejected: pd.DataFrame) -> list[dict]:
    """Per kernel, launching op, phase and check (a short name such as `vectorized_elementwise_kernel` serves
    many ops): launches and time removed, largest first, every group (the sums are the totals); for the GEMM
    FLOPs check also the evidence, medians over the group's launches (a kernel name may run several shapes):
    `gemm_ratio` = measured tensor FLOPs / 2MNK and `gemm_ratio_max` = the upper bound it was held to
    (GEMM_RATIO_BAND[1] x padded / 2MNK; the lower bound is GEMM_RATIO_BAND[0]). None for the other checks."""
    if "gemm_ratio" not in rejected:
        rejected = rejected.assign(gemm_ratio=np.nan, gemm_ratio_max=np.nan)
    grouped = (rejected.assign(launch_op=rejected["launch_op"].fillna(""))
               .groupby(["kernel_name", "launch_op", "phase", "counter_status"], as_index=False)
               .agg(launches=("launch_idx", "size"), time_ns=("duration_ns", "sum"),
                    gemm_ratio=("gemm_ratio", "median"), gemm_ratio_max=("gemm_ratio_max", "median"))
               .sort_values("time_ns", ascending=False))
    return [{"kernel_name": r.kernel_name, "launch_op": r.launch_op, "phase": r.phase,
             "check": r.counter_status.removeprefix("rejected: "), "launches": int(r.launches),
             "time_ns": int(r.time_ns), "gemm_ratio": _number(r.gemm_ratio),
             "gemm_ratio_max": _number(r.gemm_ratio_max)} for r in grouped.itertuples()]


def describe_removed(rejected: list[RejectedGroup], kernel_time_ns: float) -> str:
    """run.json `checks.rejected` in one phrase: "removed the counters of N launches (x % of kernel time,
    y ms), e.g." the three that hold the most time; "" where nothing was removed."""
    if not rejected:
        return ""
    launches = sum(row.launches for row in rejected)
    time_ns = sum(row.time_ns for row in rejected)
    share = f"{100 * time_ns / kernel_time_ns:.1f} % of kernel time, " if kernel_time_ns else ""
    return (f"removed the counters of {launches:,} launch{'es' * (launches != 1)} ({share}{time_ns / 1e6:.2f} ms), "
            f"e.g. {', '.join(describe_rejected(row) for row in rejected[:3])}")


def describe_rejected(row: RejectedGroup) -> str:
    """A row of run.json `checks.rejected` in words: "kernel (phase, check)", for the GEMM FLOPs check with the
    measured ratio to 2MNK and the band it was held to (n/a where the run recorded none: runs before them)."""
    op = f" [{row.launch_op}]" if row.launch_op else ""  # older runs grouped without the op
    text = f"{row.kernel_name}{op} ({row.phase}, {row.check}"
    if row.check == "GEMM FLOPs":
        ratio, allowed = row.gemm_ratio, row.gemm_ratio_max
        if ratio is None and allowed is None:
            text += ", measured/2MNK n/a"
        else:
            text += f": measured/2MNK {_times(ratio)}, allowed {GEMM_RATIO_BAND[0]:g}-{_times(allowed)}"
    return text + ")"


def _gemm_summary(work: pd.DataFrame) -> dict:
    """`gemm_work` per phase for run.json: `ratio` is measured / 2MNK (the key runs have carried since the
    checks began), `ratio_to_issued` measured / the work whole tiles issue."""
    return {row.phase: {"launches": int(row.launches), "measured_flops": float(row.measured_flops),
                        "analytic_flops": float(row.analytic_flops), "ratio": float(row.ratio_to_2mnk),
                        "issued_flops": float(row.issued_flops), "ratio_to_issued": float(row.ratio_to_issued)}
            for row in work.itertuples()}


def _max(values: pd.Series) -> float | None:
    return None if values.dropna().empty else float(values.max())


def _times(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.3g}x"


def _number(value: float) -> float | None:
    return None if pd.isna(value) else float(value)


def status_table(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per counter status (measured, lent, rejected: <check>, unmatched, ...): launches and share of the kernel time
    counters can describe (`schema.countable`, as run.json's coverage)."""
    kernels = countable(kernels)
    total = kernels["duration_ns"].sum()
    table = (kernels.groupby("counter_status", as_index=False)
             .agg(launches=("launch_idx", "size"), time_ns=("duration_ns", "sum")))
    table["time_share"] = table["time_ns"] / total if total else np.nan
    return table.sort_values("time_ns", ascending=False, ignore_index=True)


def gemm_work(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per phase, the GEMM launches whose counters passed the checks: measured tensor FLOPs against 2MNK (what
    the model asks for) and against the work whole tiles issue (`issued_gemm_flops`), and the share of the
    issued work that is tile padding. Empty where no GEMM carries checked counters."""
    measured = tensor_flops(kernels)
    candidates = kernels[["phase", "launch_op", "launch_shapes", "kernel_name", "kernel_name_full"]][
        kernels["counter_status"].isin(CHECKED_STATUSES) & (measured > 0)]
    launches = [candidates["launch_op"], candidates["launch_shapes"], _tile_names(candidates)]
    work = pd.DataFrame({
        "phase": candidates["phase"],
        "measured_flops": measured[candidates.index],
        "analytic_flops": per_distinct(launches[:2], gemm_flops).astype(float),
        "issued_flops": per_distinct(launches, issued_gemm_flops).astype(float),
    }, index=candidates.index)
    work = work[work["analytic_flops"].notna()]
    table = work.groupby("phase", as_index=False).agg(
        launches=("measured_flops", "size"), measured_flops=("measured_flops", "sum"),
        analytic_flops=("analytic_flops", "sum"), issued_flops=("issued_flops", "sum"))
    table["ratio_to_2mnk"] = table["measured_flops"] / table["analytic_flops"]
    table["ratio_to_issued"] = table["measured_flops"] / table["issued_flops"]
    table["padding_share"] = 1 - table["analytic_flops"] / table["issued_flops"]
    return table.sort_values("phase", key=lambda p: p.map(PHASES.index), ignore_index=True)
