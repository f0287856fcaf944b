"""Several ranks as one step: each rank's collective time split into transfer and waiting, its busy time, the
rank the others wait for (the critical path across ranks), what made it late and what it costs, and how the
step scales against the single-GPU run.

Transfer and waiting. A collective's kernel starts on each rank when that rank reaches it and ends once every
rank has, so on all but the last rank to arrive its duration holds waiting. Each collective instance is matched
across ranks by kind and order (the i-th collective of every rank, where every rank launches the same sequence:
`communication.with_transfer_times`); its transfer time is its shortest duration over the ranks (the rank that
arrived last waits least), and each rank's waiting is its duration less that. Rank clocks are never compared
(each rank's timeline has its own zero): durations alone decide.

Busy, per rank: the union of the rank's kernel intervals with each collective cut to its transfer part (the
kernel's end; its waiting is its beginning), over the rank's span of the profiled iteration: never above 100 %.
NCCL kernels spinning while they wait move nothing and are not busy.

The late rank. At each collective instance the rank with the shortest kernel arrived last; what it alone cost
that collective is the least any other rank waited (the next-to-last rank's wait): had it arrived with the
others, the collective would have ended that much sooner. Summed over the instances it arrived last at, that is
its cost to the iteration; the rank with the largest cost is the late rank, and the largest cost of any other
rank is the noise of that figure (what the same rule finds on ranks nobody delayed). What made it late is read
beside the other ranks (their median): the host's launch gaps (time between the rank's consecutive kernels,
where nothing, not even a waiting collective, runs), its compute kernels' time, its SM clock during the timed
steps and other processes on its GPU
(run.json, per rank). The cause named is the larger of the host's extra idle time and the kernels' extra time.

The hosts pace the step. Where the host's gaps set the late rank apart on GPUs and the step (the low end of its
median's 95 % interval) outlasts the late rank's GPU work (its compute plus transfer) by HOST_LIMITED_SHARE of the
step or more, the step runs at the pace that rank's host issues launches, not at its GPU's: its GPU ran dry between
launches while the others waited for it in the collectives. kernels.parquet holds no host CPU time, so it cannot
tell one slow host (a planted delay) from hosts that each need about the step to launch it, the late one having
fallen furthest behind; on 4 H100s (tests/data/tp4-h100-late-rank-cause) it was the latter: every rank's host needed
about 105-141 ms of CPU a step for 77 ms of GPU work, and which rank was late changed from run to run. Either way the
remedy takes the launches off the host: the step captured as one CUDA graph (`--cuda-graphs`; there 145.9 -> 77.2 ms
a step, tests/data/tp4-h100-cuda-graphs) or more work per launch (a larger batch per rank). The rule holds on every
TP=4 mamba2-lm paper run on H100 kept (24-62 % of the step beyond the GPU work) and on none of the bundled runs whose
step is their GPU work (within 3 %).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssmprof.analysis.step.communication import graphed_speedup, transfer_split, with_transfer_times
from ssmprof.analysis.step.host import HOST_LIMITED_SHARE, busy_ns, host_verdict
from ssmprof.analysis.trust.noise import Interval, kept_steps, ratio_interval, step_interval
from ssmprof.schema import RunInfo


def _is_collective(kernels: pd.DataFrame) -> pd.Series:
    return kernels["collective"].fillna("") != ""


def rank_busy(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per rank: span of its profiled iteration (first start to last end), busy time (`transfer_split`: waiting
    excluded) and its share of the span, compute, transfer and waiting time, and the host's launch gaps (between
    consecutive kernels in start order, a collective's waiting counted as a kernel: median, and total of the
    positive ones)."""
    split = transfer_split(kernels)
    rows = []
    for rank, mine in split.groupby("rank"):
        comm = _is_collective(mine)
        span = int((kernels.loc[mine.index, "start_ns"] + kernels.loc[mine.index, "duration_ns"]).max()
                   - kernels.loc[mine.index, "start_ns"].min())
        busy = busy_ns(mine[mine["duration_ns"] > 0])
        gaps = _gaps(kernels.loc[mine.index])  # a rank waiting in a collective is not waiting for its host
        rows.append({"rank": int(rank), "span_ms": span / 1e6, "busy_ms": busy / 1e6,
                     "busy_pct": 100 * busy / span if span else float("nan"),
                     "compute_ms": mine.loc[~comm, "duration_ns"].sum() / 1e6,
                     "transfer_ms": mine.loc[comm, "duration_ns"].sum() / 1e6,
                     "wait_ms": mine["wait_ns"].sum() / 1e6,
                     "gap_median_us": float(np.median(gaps)) / 1e3 if len(gaps) else 0.0,
                     "gap_total_ms": float(gaps[gaps > 0].sum()) / 1e6})
    return pd.DataFrame(rows)


def _gaps(kernels: pd.DataFrame) -> np.ndarray:
    """Gaps before each launch (its start minus the latest end before it), in start order."""
    order = kernels.sort_values("start_ns")
    starts = order["start_ns"].to_numpy()
    reach = np.maximum.accumulate(starts + order["duration_ns"].to_numpy())
    return starts[1:] - reach[:-1]


def arrivals(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per collective instance matched across ranks: the rank that arrived last (shortest kernel) and what it
    alone cost (the least wait of the other ranks) and caused (their waits summed). Empty where instances do
    not pair (`with_transfer_times`)."""
    comm = with_transfer_times(kernels)
    if comm.empty or not comm["paired"].all():
        return pd.DataFrame(columns=["instance", "last_rank", "cost_ns", "caused_ns"])
    rows = []
    for instance, group in comm.groupby("instance"):
        last = group.loc[group["duration_ns"].idxmin()]
        others = group.drop(index=last.name)["wait_ns"]
        rows.append({"instance": instance, "last_rank": int(last["rank"]), "cost_ns": int(others.min()),
                     "caused_ns": int(others.sum())})
    return pd.DataFrame(rows)


def late_rank(kernels: pd.DataFrame, info: RunInfo) -> pd.DataFrame:
    """One row: the late rank (see the module docstring), the collectives it arrived last at, the waiting it
    caused the other ranks, its cost to the profiled iteration and that cost's noise (the largest cost of any
    other rank), its share of the iteration; beside the other ranks' median: its launch gaps, compute time, SM
    clock and other processes on its GPU; and the cause in words. Empty for one rank or unpaired collectives."""
    arrived = arrivals(kernels)
    if arrived.empty:
        return pd.DataFrame()
    costs = arrived.groupby("last_rank")["cost_ns"].sum()
    late = int(costs.idxmax())
    busy = rank_busy(kernels).set_index("rank")
    others = busy.drop(index=late)
    mine = arrived[arrived["last_rank"] == late]
    gap_excess = busy.loc[late, "gap_total_ms"] - others["gap_total_ms"].median()
    compute_excess = busy.loc[late, "compute_ms"] - others["compute_ms"].median()
    clocks, sharing = _rank_readings(info)
    work_ms = float(busy.loc[late, "compute_ms"] + busy.loc[late, "transfer_ms"])
    row = {"late_rank": late, "collectives": len(arrived), "arrived_last": len(mine),
           "caused_wait_ms": mine["caused_ns"].sum() / 1e6, "cost_ms": costs[late] / 1e6,
           "cost_noise_ms": float(costs.drop(index=late).max()) / 1e6 if len(costs) > 1 else 0.0,
           "iteration_ms": busy.loc[late, "span_ms"], "cost_pct": 100 * costs[late] / 1e6 / busy.loc[late, "span_ms"],
           "step_ms": info.harness.step_ms, "gpu_work_ms": work_ms, "step_over_gpu_ms": _step_floor(info) - work_ms,
           "gap_median_us": busy.loc[late, "gap_median_us"], "others_gap_median_us": others["gap_median_us"].median(),
           "gap_total_ms": busy.loc[late, "gap_total_ms"], "others_gap_total_ms": others["gap_total_ms"].median(),
           "compute_ms": busy.loc[late, "compute_ms"], "others_compute_ms": others["compute_ms"].median(),
           "sm_clock_mhz": clocks.get(late, float("nan")),
           "others_sm_clock_mhz": float(np.nanmedian([v for r, v in clocks.items() if r != late]))
           if len(clocks) > 1 else float("nan"),
           "other_processes": sharing.get(late)}
    row["hosts_pace"] = hosts_pace(gap_excess, compute_excess, row["step_over_gpu_ms"], row["step_ms"],
                                   info.parallel is not None and info.parallel.backend == "nccl")
    row["cause"] = _cause(row, gap_excess, compute_excess)
    row["remedy"] = _remedy(info) if row["hosts_pace"] else ""
    return pd.DataFrame([row])


def _step_floor(info: RunInfo) -> float:
    """The low end of the median step's 95 % interval (`noise.step_interval`), the median itself where the run kept
    one step: a step this long is what the timed steps support beyond their noise."""
    interval = step_interval(kept_steps(info))
    return interval.value if np.isnan(interval.low) else interval.low


def hosts_pace(gap_excess_ms: float, compute_excess_ms: float, step_over_gpu_ms: float, step_ms: float,
               on_gpus: bool) -> bool:
    """Whether the hosts pace the step rather than one rank's GPU (see the module docstring): on GPUs (gloo ranks
    on the CPU run their ops on the host itself), the late rank's extra launch gaps exceed its extra kernel time,
    and the step, beyond its noise, outlasts that rank's GPU work by HOST_LIMITED_SHARE of the step or more: time
    no kernel of the last rank to launch fills, which the GPU's speed does not set."""
    return bool(on_gpus and gap_excess_ms > 0 and gap_excess_ms >= compute_excess_ms
                and step_over_gpu_ms >= HOST_LIMITED_SHARE * step_ms)


def _remedy(info: RunInfo) -> str:
    """What takes the launches off the hosts, as the command that measures it for this run's workload and split."""
    split = info.parallel
    assert split is not None  # only multi-rank runs have a late rank
    command = (f"ssmprof run {info.workload.name} --preset {info.workload.preset} --tp {split.tp}"
               + (f" --dp {split.dp}" if split.dp > 1 else "") + " --cuda-graphs")
    return (f"capture the step as one CUDA graph, collectives inside, which launches it without the hosts "
            f"(`{command}` times the graphed step beside the eager one), or give each rank more work per launch "
            "(a larger --batch-size)")


def _rank_readings(info: RunInfo) -> tuple[dict[int, float], dict[int, int | None]]:
    """Per rank, the median SM clock during its timed steps and the most other processes seen on its GPU
    (run.json `parallel.ranks[*].gpu_sharing`; absent where not recorded)."""
    clocks, sharing = {}, {}
    for entry in (info.parallel.ranks if info.parallel else []):
        reading = entry.get("gpu_sharing") or {}
        clock = reading.get("sm_clock_mhz") or {}
        if clock.get("median") is not None:
            clocks[int(entry["rank"])] = float(clock["median"])
        sharing[int(entry["rank"])] = reading.get("max_other_processes")
    return clocks, sharing


def _cause(row: dict, gap_excess_ms: float, compute_excess_ms: float) -> str:
    """What made the late rank late, in words: its host's launch gaps or its kernels (the larger excess over the
    other ranks' median), then its clock and any other process on its GPU where recorded. Where the hosts pace the
    step (`hosts_pace`), the host's part says so and what kernels.parquet cannot say: whether the other hosts need
    about as long (it holds no host CPU time)."""
    gaps = (f"median gap between its kernels {row['gap_median_us']:.1f} us against {row['others_gap_median_us']:.1f} "
            f"us on the other ranks, {row['gap_total_ms']:.1f} ms of gaps against {row['others_gap_total_ms']:.1f} ms")
    host = f"its host: {gaps}"
    kernels = (f"its kernels: {row['compute_ms']:.1f} ms of compute against {row['others_compute_ms']:.1f} ms on the "
               "other ranks")
    parts = [host, kernels] if gap_excess_ms >= compute_excess_ms else [kernels, host]
    if row["hosts_pace"]:
        parts = [f"its GPU ran dry waiting for its host's launches ({gaps}) while the step ({row['step_ms']:.1f} ms) "
                 f"outlasts its GPU work ({row['gpu_work_ms']:.1f} ms of compute and transfer) by "
                 f"{row['step_over_gpu_ms']:.1f} ms or more, beyond its noise: the hosts pace the step, not its GPU",
                 "kernels.parquet holds no host CPU time, so it cannot tell one slow host from hosts that each need "
                 "about the step to launch it, the last to launch having fallen furthest behind (docs/scale.md)",
                 kernels]
    if row["sm_clock_mhz"] == row["sm_clock_mhz"]:
        parts.append(f"SM clock {row['sm_clock_mhz']:.0f} MHz during the timed steps against "
                     f"{row['others_sm_clock_mhz']:.0f} MHz")
    else:
        parts.append("clocks not measured during the steps")
    processes = row["other_processes"]
    parts.append("other processes on its GPU not sampled" if processes is None else
                 f"{processes} other process(es) on its GPU" if processes else "no other process on its GPU")
    return "; ".join(parts)


def scaling_efficiency(info: RunInfo, single: RunInfo) -> pd.DataFrame:
    """One row: speedup of the multi-GPU run over its single-GPU twin (the single run's median step over this
    one's, the same global batch) and parallel efficiency (speedup / GPUs), each with the bootstrap interval of
    the ratio of the two runs' kept timed steps (`noise.ratio_interval`)."""
    ranks = info.parallel.world_size if info.parallel else 1
    speedup: Interval = ratio_interval(kept_steps(single), kept_steps(info))
    return pd.DataFrame([{"gpus": ranks, "step_ms": info.harness.step_ms, "single_gpu_step_ms": single.harness.step_ms,
                          "speedup": speedup.value, "speedup_low": speedup.low, "speedup_high": speedup.high,
                          "efficiency_pct": 100 * speedup.value / ranks,
                          "efficiency_pct_low": 100 * speedup.low / ranks,
                          "efficiency_pct_high": 100 * speedup.high / ranks, "steps": speedup.samples,
                          **graphed_speedup(info, single)}])


def collective_split(kernels: pd.DataFrame, rank: int) -> tuple[float, float]:
    """(transfer, waiting) of `rank`'s collectives in ms."""
    comm = with_transfer_times(kernels)
    mine = comm[comm["rank"] == rank]
    return mine["transfer_ns"].sum() / 1e6, mine["wait_ns"].sum() / 1e6



def rank_host(host: pd.DataFrame, kernels: pd.DataFrame, rank: int, late: pd.DataFrame) -> pd.DataFrame:
    """`host` (`host.host_summary` of `rank`'s kernels, waiting excluded) as a multi-rank run reads it, per rank:
    the busy share is of the rank's profiled iteration (`rank_busy`: never above 100 %), the host wait is its own
    launch gaps there, and the verdict "waits for rank N" where a late rank's cost (`late_rank`) is above its noise
    and at least HOST_LIMITED_SHARE of the iteration; else the host verdicts on the rank's own gaps. The step
    minus the busy time says nothing here: the rest of the step is waiting for the other ranks."""
    mine = rank_busy(kernels).set_index("rank").loc[rank]
    gaps_ms, span_ms = mine["gap_total_ms"], mine["span_ms"]
    waits_for = None
    if len(late):
        row = late.iloc[0]
        if (row["late_rank"] != rank and row["cost_ms"] > row["cost_noise_ms"]
                and row["cost_ms"] >= HOST_LIMITED_SHARE * row["iteration_ms"]):
            waits_for = int(row["late_rank"])
    verdict = host_verdict(gaps_ms, mine["busy_ms"], span_ms, host["launch_cost_ms"].iloc[0])
    cost = (f"per rank, rank {rank}: {gaps_ms:.1f} ms of its {span_ms:.1f} ms profiled iteration waiting for its host, "
            f"{mine['wait_ms']:.1f} ms in collectives waiting for the other ranks")
    return host.assign(gpu_busy_ms=mine["busy_ms"], gpu_busy_pct=mine["busy_pct"], gpu_idle_ms=gaps_ms,
                       iteration_ms=span_ms, waiting_ms=mine["wait_ms"],
                       verdict=verdict if waits_for is None else f"waits for rank {waits_for}", host_cost=cost)


LATE_RANK_COLUMNS = ["run", "late_rank", "arrived_last", "collectives", "cost_ms", "cost_noise_ms", "cost_pct",
                     "iteration_ms", "hosts_pace", "cause", "remedy"]


def late_ranks(by_run: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The late rank of each multi-GPU run (run label -> its `late_rank` row), one row per run whose late rank
    costs more than its noise (the most any other rank costs), largest share of the iteration first: a rank
    within its noise is not late, it only arrived last by chance."""
    rows = [frame.iloc[0].to_dict() | {"run": run} for run, frame in by_run.items()
            if len(frame) and frame.iloc[0]["cost_ms"] > frame.iloc[0]["cost_noise_ms"]]
    table = pd.DataFrame(rows, columns=LATE_RANK_COLUMNS)
    return table.sort_values("cost_pct", ascending=False, ignore_index=True)
