"""Two runs side by side: per category and per kernel (matched by name, launch configuration and phase)."""

from __future__ import annotations

import pandas as pd

from ssmprof.analysis.launches.frame import LAUNCH_KEY, time_weighted_by
from ssmprof.analysis.step.breakdown import by_category
from ssmprof.analysis.step.host import busy_ns, slow_iteration_note
from ssmprof.analysis.step.profiled_iteration import iteration_check, iteration_note
from ssmprof.analysis.trust.noise import (
    FASTER,
    LAUNCHES,
    SLOWER,
    STEPS,
    Interval,
    kept_steps,
    kernel_speedups,
    launch_intervals,
    ratio_interval,
    speedup_verdict,
)
from ssmprof.errors import SsmprofError
from ssmprof.schema import CHECKED_STATUSES, RunInfo, config_label

WEIGHTED = ["dram_throughput_pct", "l2_hit_rate_pct", "l1_hit_rate_pct", "ai_dram"]
# Relative difference of two runs' host launch cost (run.json `collectors.harness.host_launch_us`) past which
# compare says the hosts differ. A guess until reruns on one host say how much it varies (run.json records
# it; `gpu_check.sh suite` prints it).
HOST_LAUNCH_TOLERANCE = 0.10


class IncomparableRuns(SsmprofError):
    pass


def changed_entries(a: dict, b: dict) -> str:
    """`key old -> new` for each key whose value differs between two dicts (a missing key reads None)."""
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return ", ".join(f"{k} {a.get(k)} -> {b.get(k)}" for k in keys)


def check_comparable(info_a: RunInfo, info_b: RunInfo) -> list[str]:
    """Refuse runs of different workloads; return notes on other differences (config, GPU, host, library versions
    and where a kernel library came from: `profiler.environment.software_versions`)."""
    a, b = info_a.workload, info_b.workload
    if a.name != b.name:
        raise IncomparableRuns(f"runs are of different workloads ({a.name} vs {b.name}): compare, project "
                               "and regress need the same workload")
    notes = []
    if a.config != b.config:
        changed = sorted(k for k in set(a.config) | set(b.config) if a.config.get(k) != b.config.get(k))
        notes.append(f"configs differ in: {', '.join(changed)}")
    if info_a.gpu.name != info_b.gpu.name:
        notes.append(f"GPUs: {info_a.gpu.name} vs {info_b.gpu.name}")
    hosts = [info.host.cpu for info in (info_a, info_b)]
    if hosts[0] != hosts[1]:
        notes.append(f"different hosts (CPU {hosts[0]} vs {hosts[1]}): the part of each step the GPU waits for "
                     "the host is not comparable")
    launch = [info.collectors.harness.host_launch_us for info in (info_a, info_b)]
    if launch[0] is not None and launch[1] is not None and abs(launch[1] / launch[0] - 1) > HOST_LAUNCH_TOLERANCE:
        notes.append(f"the hosts launch kernels at different rates ({launch[0]:.1f} vs {launch[1]:.1f} us per tiny "
                     "launch): the part of each step the GPU waits for the host is not comparable")
    versions = changed_entries(info_a.versions, info_b.versions)
    if versions:
        notes.append(f"library versions differ: {versions}")
    return notes


def step_split(info: RunInfo, kernels: pd.DataFrame) -> str:
    """`step X ms = GPU busy Y ms + host wait Z ms`: what a GPU comparison can and cannot explain."""
    step = info.harness.step_ms
    busy = busy_ns(kernels) / 1e6
    return f"{info.gpu.name}: step {step:.2f} ms = GPU busy {busy:.2f} ms + waiting for the host " \
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


# Honest comparison: per launch, launch counts side by side, launches that moved between kernels, speedups only
# where both runs launch the kernel the same number of times.
SAME, COUNT_DIFFERS, ONLY_A, ONLY_B = "same launches", "launch count differs", "only in A", "only in B"


def _per_config(kernels: pd.DataFrame) -> pd.DataFrame:
    """`per_kernel` plus the launching op(s) of each kernel and launch configuration."""
    ops = (kernels.groupby(LAUNCH_KEY)["launch_op"].agg(lambda v: ", ".join(sorted(set(v.dropna()))))
           .rename("launch_op").reset_index())
    return per_kernel(kernels).merge(ops, on=LAUNCH_KEY, how="left")


def compare_launches(kernels_a: pd.DataFrame, kernels_b: pd.DataFrame,
                     steps: tuple[Interval, Interval] | None = None) -> pd.DataFrame:
    """Per (kernel, launch configuration, phase), A beside B: launches, total and per-launch time, and `status`
    (same launches / launch count differs / only in A / only in B). `speedup` (A's time over B's) only where
    the launches are the same; `per_launch_speedup` wherever both run it. `moved_to`: where launches were
    lost or gained, the kernel (same phase and launching op, another name or configuration) that most likely
    took them over or gave them up, with the count. Sorted by the larger of the two times. With `steps` (each
    run's `noise.step_interval`): the speedup's interval and verdict (`with_kernel_intervals`)."""
    a, b = _per_config(kernels_a), _per_config(kernels_b)
    merged = a.merge(b, on=LAUNCH_KEY, how="outer", suffixes=("_a", "_b"), indicator="status")
    merged["launch_op"] = merged["launch_op_a"].fillna(merged["launch_op_b"])
    for side in ("a", "b"):
        merged[f"launches_{side}"] = merged[f"launches_{side}"].fillna(0).astype("int64")
        merged[f"per_launch_ns_{side}"] = (merged[f"time_ns_{side}"].astype("float64")
                                           / merged[f"launches_{side}"].where(merged[f"launches_{side}"] > 0))
    both = merged["status"] == "both"
    same = both & (merged["launches_a"] == merged["launches_b"])
    merged["status"] = (merged["status"].map({"both": COUNT_DIFFERS, "left_only": ONLY_A, "right_only": ONLY_B})
                        .astype("object").where(~same, SAME))
    merged["per_launch_speedup"] = (merged["per_launch_ns_a"] / merged["per_launch_ns_b"]).where(both)
    merged["speedup"] = (merged["time_ns_a"] / merged["time_ns_b"]).where(same)
    merged["config"] = merged.apply(lambda row: f"{row['kernel_name']} [{config_label(row)}]", axis=1)
    merged["moved_to"] = _moves(merged)
    merged["time_ns_max"] = merged[["time_ns_a", "time_ns_b"]].max(axis=1, skipna=True)
    merged = merged.sort_values("time_ns_max", ascending=False, ignore_index=True).drop(columns="time_ns_max")
    noise = []
    if steps is not None:
        merged = with_kernel_intervals(merged, kernels_a, kernels_b, steps)
        noise = ["speedup_low", "speedup_high", "vs_noise", "basis"]
    return merged[["kernel_name", "config", "phase", "launch_op", "status", "launches_a", "launches_b",
                   "per_launch_ns_a", "per_launch_ns_b", "per_launch_speedup", "time_ns_a", "time_ns_b", "speedup",
                   *noise, "moved_to", "dram_throughput_pct_a", "dram_throughput_pct_b", "flop_per_s_a",
                   "flop_per_s_b", *LAUNCH_KEY[2:]]]


def with_kernel_intervals(merged: pd.DataFrame, kernels_a: pd.DataFrame, kernels_b: pd.DataFrame,
                          steps: tuple[Interval, Interval]) -> pd.DataFrame:
    """`merged` (rows per LAUNCH_KEY with `time_ns_{a,b}` and `speedup`) with the speedup's interval
    (`noise.kernel_speedups`), its verdict (`vs_noise`, empty where no speedup is shown) and the `basis` of the
    intervals: "launches" where both sides launch the kernel several times, else "steps"."""
    sides = [launch_intervals(kernels, LAUNCH_KEY, interval).rename(
        columns={"time_ns_low": f"time_ns_{side}_low", "time_ns_high": f"time_ns_{side}_high", "basis": side})
        for side, kernels, interval in (("a", kernels_a, steps[0]), ("b", kernels_b, steps[1]))]
    joined = merged.merge(sides[0], on=LAUNCH_KEY, how="left").merge(sides[1], on=LAUNCH_KEY, how="left")
    joined["basis"] = joined["a"].where(joined["a"] == joined["b"], "steps").where(joined["speedup"].notna(), "")
    return kernel_speedups(joined).drop(columns=["a", "b"])


def step_speedup(info_a: RunInfo, info_b: RunInfo) -> pd.DataFrame:
    """One row: B's speedup over A on the median step (A's over B's) with its bootstrap interval over both runs'
    kept steps (`noise.ratio_interval`), and the verdict (faster / slower / within noise)."""
    steps_a, steps_b = kept_steps(info_a), kept_steps(info_b)
    ratio = ratio_interval(steps_a, steps_b)
    return pd.DataFrame([{"step_ms_a": info_a.harness.step_ms, "step_ms_b": info_b.harness.step_ms,
                          "steps_a": len(steps_a), "steps_b": len(steps_b), "speedup": ratio.value,
                          "speedup_low": ratio.low, "speedup_high": ratio.high, "vs_noise": speedup_verdict(ratio)}])


def _moves(merged: pd.DataFrame) -> pd.Series:
    """For each row that lost (gained) launches from A to B, the row of the same phase and a shared launching op
    that gained (lost) launches, the same kernel name first, then the closest count:
    "-> name [config] (+n launches in B)" or "<- ... (-n launches in B)"."""
    delta = merged["launches_b"] - merged["launches_a"]
    ops = {index: set(str(text).split(", ")) - {"", "nan"} for index, text in merged["launch_op"].items()}
    out = pd.Series("", index=merged.index, dtype="object")
    for index in merged.index[delta != 0]:
        row, change = merged.loc[index], int(delta[index])
        peers = [peer for peer in merged.index[(merged["phase"] == row["phase"]) & (delta * change < 0)]
                 if ops[peer] & ops[index]]
        if not peers:
            continue
        peer = min(peers, key=lambda p: (merged.loc[p, "kernel_name"] != row["kernel_name"],
                                         abs(int(delta[p]) + change)))
        arrow = "->" if change < 0 else "<-"
        out[index] = f"{arrow} {merged.loc[peer, 'config']} ({int(delta[peer]):+d} launches in B)"
    return out


def step_split_table(runs: dict[str, tuple[RunInfo, pd.DataFrame]]) -> pd.DataFrame:
    """Per run (label -> (run.json, analysis frame)): GPU, step time, GPU busy time, time the GPU waits for the
    host, busy share and host CPU; `step_split` as a table."""
    rows = []
    for label, (info, kernels) in runs.items():
        step = info.harness.step_ms
        busy = busy_ns(kernels) / 1e6
        rows.append({"run": label, "gpu": info.gpu.name, "step_ms": step, "gpu_busy_ms": busy,
                     "host_wait_ms": max(step - busy, 0.0), "busy_share_pct": 100 * busy / step if step else None,
                     "host": info.host.cpu})
    return pd.DataFrame(rows)


def compare_categories_launches(kernels_a: pd.DataFrame, kernels_b: pd.DataFrame,
                                steps: tuple[Interval, Interval] | None = None) -> pd.DataFrame:
    """`compare_categories` with the launch counts of each side and `speedup` only where they are equal (a
    category whose launches differ does different work: split GEMMs, extra reductions). With `steps` (each run's
    `noise.step_interval`): each speedup's interval from the category's own launches, problem by problem
    (`noise.launch_intervals`; the steps' interval lent only to a category of single launches), its `basis` and
    its verdict."""
    table = compare_categories(kernels_a, kernels_b)
    for side in ("a", "b"):
        table[f"launches_{side}"] = table[f"launches_{side}"].fillna(0).astype("int64")
    same = table["launches_a"] == table["launches_b"]
    table["status"] = same.map({True: SAME, False: COUNT_DIFFERS})
    table["speedup"] = table["speedup"].where(same)
    noise = []
    if steps is not None:
        sides = [launch_intervals(kernels, ["category"], interval).rename(
            columns={"time_ns_low": f"time_ns_{side}_low", "time_ns_high": f"time_ns_{side}_high", "basis": side})
            for side, kernels, interval in (("a", kernels_a, steps[0]), ("b", kernels_b, steps[1]))]
        joined = table.assign(category=table["category"].astype(str)).merge(sides[0], on="category", how="left") \
            .merge(sides[1], on="category", how="left")
        joined["basis"] = joined["a"].where(joined["a"] == joined["b"], STEPS).where(joined["speedup"].notna(), "")
        for side in ("a", "b"):  # the intervals are of times in ns, the table's times in ms
            joined[f"time_ns_{side}"] = joined[f"time_ms_{side}"] * 1e6
        table = kernel_speedups(joined)
        noise = ["speedup_low", "speedup_high", "vs_noise", "basis"]
    return table[["category", "status", "launches_a", "launches_b", "time_ms_a", "time_ms_b", "speedup", *noise,
                  "share_a", "share_b"]]


SYSTEMATIC_FEWEST = 3  # configurations of one category that must move together to call it a systematic shift


def systematic_shifts(kernels: pd.DataFrame, kernels_a: pd.DataFrame, kernels_b: pd.DataFrame,
                      tensor_peaks: tuple[float | None, float | None] = (None, None)) -> tuple[pd.DataFrame, list[str]]:
    """Shifts of a whole category between A and B, named as such. `kernels`: `compare_launches` with intervals
    of the runs' analysis frames `kernels_a`, `kernels_b` (which give each row its category). Where at least
    `SYSTEMATIC_FEWEST` configurations of a category are judged on their own launches, every one whose interval
    excludes 1 moves the same way and those are at least three quarters of them, the category moved as one: a
    GPU's clocks, power limit or silicon, or the host, not its kernels one by one. Those rows' verdicts say so,
    and a note gives the shift's size with, for GEMMs, the two runs' bf16 tensor peaks (`tensor_peaks`: A's and
    B's ceilings, TFLOP/s). Returns (kernels, notes)."""
    named = pd.concat([kernels_a, kernels_b]).drop_duplicates(LAUNCH_KEY)[LAUNCH_KEY + ["category"]]
    table = kernels.merge(named.assign(category=named["category"].astype(str)), on=LAUNCH_KEY, how="left")
    judged = table[(table["status"] == SAME) & (table["basis"] == LAUNCHES)]
    notes = []
    for category, rows in judged.groupby("category", sort=True):
        moved = rows[rows["vs_noise"].isin([FASTER, SLOWER])]
        directions = set(moved["vs_noise"])
        if len(rows) < SYSTEMATIC_FEWEST or len(directions) != 1 or 4 * len(moved) < 3 * len(rows):
            continue
        (direction,) = directions
        total = moved["time_ns_a"].sum() / moved["time_ns_b"].sum()
        note = (f"systematic: {len(moved)} of {len(rows)} {category} configurations {direction} on B, median "
                f"{moved['speedup'].median():.3f}x ({moved['speedup'].min():.3f}-{moved['speedup'].max():.3f}x, each "
                f"outside its own interval; {total:.3f}x of their time together): the category moved as one "
                "(clocks, power, the GPU or the host), not kernel by kernel")
        if category == "GEMM":
            note += _peak_note(tensor_peaks, direction)
        notes.append(note)
        table.loc[moved.index, "vs_noise"] = f"{direction} (systematic, {category})"
    return table.drop(columns="category"), notes


def _peak_note(peaks: tuple[float | None, float | None], direction: str) -> str:
    """The two runs' bf16 tensor peaks beside a systematic GEMM shift (`direction`: FASTER or SLOWER on B): whether
    B's ceiling moved the same way as its GEMMs, which it could explain, or the other way, which it cannot."""
    a, b = peaks
    if a is None or b is None:
        return ""
    if a == b:
        return f"; both runs stand on the same bf16 tensor peak ({a:.1f} TFLOP/s): no calibration of B's own says why"
    change = 100 * (b / a - 1)
    agrees = (change > 0) == (direction == FASTER)
    return (f"; B's calibrated bf16 tensor peak is {abs(change):.1f} % {'lower' if change < 0 else 'higher'} "
            f"({b:.1f} vs {a:.1f} TFLOP/s)" + (": in line with the shift" if agrees else
                                              f": the other way, so the peaks do not explain GEMMs {direction} on B"))


def iteration_notes(runs: dict[str, tuple[RunInfo, pd.DataFrame]]) -> list[str]:
    """A note for each run (label -> (run.json, kernels)) whose profiled iteration is not one of its timed steps
    (`profiled_iteration.iteration_check`: its span or busy time outside the steps' spread), else whose profiled
    iteration kept the GPU busy longer than its median step allows (`host.slow_iteration`): its kernel times or its
    gaps describe a slower step than the timed ones."""
    notes = []
    for label, (info, kernels) in runs.items():
        whose = f"the profiled iteration of {label}"
        note = (iteration_note(iteration_check(kernels, info), whose)
                or slow_iteration_note(busy_ns(kernels) / 1e6, info.harness.step_ms, whose))
        if note:
            notes.append(f"{note}; compare kernel times with care")
    return notes


def counter_notes(kernels_a: pd.DataFrame, kernels_b: pd.DataFrame) -> list[str]:
    """A note for a run whose counters were never checked (schema 1) when the other's passed the self-checks: its
    rates may belong to other launches, so rate columns do not compare like for like. (A run without counters
    compares no rates: no note.)"""
    runs = {"A": kernels_a["counter_status"], "B": kernels_b["counter_status"]}
    unchecked = [label for label, status in runs.items() if (status == "unchecked").any()]
    checked = [label for label, status in runs.items() if status.isin(CHECKED_STATUSES).any()]
    if len(unchecked) == 1 and len(checked) == 1 and unchecked != checked:
        return [f"counters of {unchecked[0]} are unchecked (a schema-1 run) while the other run's passed the "
                "self-checks: compare times with confidence, rates (DRAM %, FLOP/s, roofline) with care"]
    return []
