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

Where the late rank's host fell behind, launch by launch. Every rank launches the same compute kernels in the same
order, so the n-th of each rank is the same work (`launch_gaps`, which counts the positions whose kernel names agree).
At each, the late rank's GPU idle before the launch less the other ranks' median is its excess there; summed by phase,
layer and the kernel whose launch waited, the fewest groups reaching 80 % of it say where its host spent the time
(`late_gap_groups`). On tests/data/tp4-h100-mamba2-lm-paper-straggler rank 1's compute kernels start a median 218 us
after the one before in forward and 113.5 us in backward, 1.8 us in the optimizer, against 1.3-2.2 us on the others:
147.8 ms of excess idle (noise 8.6 ms), 66 % of it in backward, 34 % in forward.
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
    clock and other processes on its GPU; its launch gaps against the others' launch by launch (`launch_gaps`: the
    launches aligned, the % of them the same kernel on every rank, its excess idle, that excess's noise and where
    it falls, `gap_excess_words`); and the cause in words. Empty for one rank or unpaired collectives."""
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
    row |= _gap_excess(kernels, late)
    row["hosts_pace"] = hosts_pace(gap_excess, compute_excess, row["step_over_gpu_ms"], row["step_ms"],
                                   info.parallel is not None and info.parallel.backend == "nccl")
    row["cause"] = _cause(row, gap_excess, compute_excess)
    row["remedy"] = _remedy(info) if row["hosts_pace"] else ""
    return pd.DataFrame([row])


def _gap_excess(kernels: pd.DataFrame, late: int) -> dict:
    """The late rank's launch-by-launch gap columns of `late_rank` (`launch_gaps`, `late_gap_groups`)."""
    gaps = launch_gaps(kernels, late)
    noise = gap_excess_noise_ms(kernels, late)
    return {"aligned_launches": len(gaps), "names_agree_pct": 100 * float(gaps["names_agree"].mean()),
            "gap_excess_ms": gaps["excess_ns"].sum() / 1e6, "gap_excess_noise_ms": noise,
            "gap_excess_where": gap_excess_words(gaps, late_gap_groups(gaps), noise)}


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
                     "iteration_ms", "hosts_pace", "cause", "gap_excess_ms", "gap_excess_where", "remedy"]


def late_ranks(by_run: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The late rank of each multi-GPU run (run label -> its `late_rank` row), one row per run whose late rank
    costs more than its noise (the most any other rank costs), largest share of the iteration first: a rank
    within its noise is not late, it only arrived last by chance."""
    rows = [frame.iloc[0].to_dict() | {"run": run} for run, frame in by_run.items()
            if len(frame) and frame.iloc[0]["cost_ms"] > frame.iloc[0]["cost_noise_ms"]]
    table = pd.DataFrame(rows, columns=LATE_RANK_COLUMNS)
    return table.sort_values("cost_pct", ascending=False, ignore_index=True)


# Launch by launch. Under tensor parallelism every rank launches the same kernels in the same order, so the n-th
# compute launch (NCCL kernels apart) of every rank is the same work: lined up by position, the late rank's launch
# gaps read against the other ranks' at the same point of the step, and where its excess falls names what its host
# was doing late: a phase, a layer, the kernel whose launch waited.
GAP_COVER_SHARE = 0.8  # the share of the late rank's gap excess the named groups cover
OUTSIDE_LAYERS = -1  # `schema` layer of a launch outside every layer range
GAP_GROUP_COLUMNS = ["by", "group", "launches", "excess_ms", "excess_pct", "covered_pct", "launch_gap_median_us",
                     "others_launch_gap_median_us"]


def rank_launch_gaps(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per rank, its compute launches (collectives apart) in start order, numbered from 0 (`position`), each with
    two gaps before it, in ns, undefined for a rank's first: `gap_ns`, its start minus the latest end of the rank's
    earlier compute launches (the pace its host launched them at; never below 0: overlapping kernels leave none),
    and `idle_ns`, that gap less the time a collective of the rank ran in it (the GPU had nothing to run). The two
    differ where a collective lies between: there the compute gap holds the collective, whose waiting on an on-time
    rank is what the late rank cost it, not its own host's delay, while a late host's delay before it (the late
    rank launching a collective late) stays idle."""
    frames = []
    for rank, mine in kernels.groupby("rank"):
        order = mine.sort_values("start_ns", kind="stable")
        collective = _is_collective(order).to_numpy()
        starts = order["start_ns"].to_numpy(dtype=float)
        ends = starts + order["duration_ns"].to_numpy(dtype=float)
        launch_starts, launch_ends = starts[~collective], np.maximum.accumulate(ends[~collective])
        gap = np.clip(np.r_[np.nan, launch_starts[1:] - launch_ends[:-1]], 0, None)
        lows, highs = _merged(starts[collective], ends[collective])
        gap_opens = np.r_[np.nan, np.minimum(launch_ends[:-1], launch_starts[1:])]
        in_gap = _covered_before(lows, highs, launch_starts) - _covered_before(lows, highs, gap_opens)
        launches = order.loc[~collective, ["kernel_name", "phase", "layer"]].reset_index(drop=True)
        frames.append(launches.assign(rank=int(rank), position=np.arange(len(launches)), gap_ns=gap,
                                      idle_ns=gap - in_gap))
    columns = ["rank", "position", "kernel_name", "phase", "layer", "gap_ns", "idle_ns"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def _merged(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The intervals [starts, ends) merged where they overlap, in order: the time they cover, each instant once."""
    lows: list[float] = []
    highs: list[float] = []
    for start, end in sorted(zip(starts, ends, strict=True)):
        if highs and start <= highs[-1]:
            highs[-1] = max(highs[-1], end)
        else:
            lows.append(start)
            highs.append(end)
    return np.array(lows), np.array(highs)


def _covered_before(lows: np.ndarray, highs: np.ndarray, instants: np.ndarray) -> np.ndarray:
    """The time the merged intervals [lows, highs) cover before each instant (NaN for a NaN instant)."""
    if not len(lows):
        return np.where(np.isnan(instants), np.nan, 0.0)
    whole = np.r_[0.0, np.cumsum(highs - lows)]  # covered before each interval starts
    last = np.searchsorted(lows, instants, side="right") - 1  # the last interval starting at or before the instant
    reached = np.clip(last, 0, None)
    partial = np.clip(instants - lows[reached], 0, highs[reached] - lows[reached])
    return np.where(last < 0, 0.0, whole[reached] + partial) + 0 * instants  # NaN instants stay NaN


def launch_gaps(kernels: pd.DataFrame, late: int) -> pd.DataFrame:
    """The late rank's launch gaps beside the other ranks' (`rank_launch_gaps`), position by position over the
    positions every rank has, its first apart (no gap): the late rank's kernel, phase and layer, whether every rank
    launched the same kernel there (else the alignment slipped), its gaps and the other ranks' median of each, and
    its excess, its GPU idle less the others' median. The excess is read on the idle time, not the compute gap:
    after a collective the on-time ranks' compute gap holds their waiting for the late rank, which would cancel its
    excess against the waiting it causes (on tests/data/tp4-h100-mamba2-lm-paper-straggler +134 ms against -132 ms)."""
    per_rank = rank_launch_gaps(kernels)
    aligned = per_rank[per_rank["position"] < per_rank.groupby("rank")["position"].max().min() + 1]
    wide = aligned.pivot(index="position", columns="rank")
    mine = aligned[aligned["rank"] == late].set_index("position")
    others = [rank for rank in wide["gap_ns"].columns if rank != late]
    gaps = pd.DataFrame({"kernel_name": mine["kernel_name"], "phase": mine["phase"], "layer": mine["layer"],
                         "names_agree": wide["kernel_name"].nunique(axis=1) == 1,
                         "gap_ns": mine["gap_ns"], "others_gap_ns": wide["gap_ns"][others].median(axis=1),
                         "idle_ns": mine["idle_ns"], "others_idle_ns": wide["idle_ns"][others].median(axis=1)})
    gaps["excess_ns"] = gaps["idle_ns"] - gaps["others_idle_ns"]
    return gaps.iloc[1:].reset_index()


def gap_excess_noise_ms(kernels: pd.DataFrame, late: int) -> float:
    """The noise of the late rank's gap excess: the largest excess, either sign, the same rule finds on the ranks
    nobody delayed (each on-time rank's summed idle less the median of the other on-time ranks', position by
    position). NaN with fewer than two on-time ranks: one has no others to be read against."""
    on_time = kernels[kernels["rank"] != late]
    ranks = sorted(on_time["rank"].unique())
    if len(ranks) < 2:
        return float("nan")
    idle = rank_launch_gaps(on_time).pivot(index="position", columns="rank", values="idle_ns").dropna()
    return max(abs(float((idle[rank] - idle.drop(columns=rank).median(axis=1)).sum())) for rank in ranks) / 1e6


def late_gap_groups(gaps: pd.DataFrame, share: float = GAP_COVER_SHARE) -> pd.DataFrame:
    """Where the late rank's gap excess (`launch_gaps`) falls, read three ways (`by`): per phase, per layer and per
    kernel whose launch waited; for each, the fewest groups whose excess reaches `share` of the total (the largest
    first): what a reader looks at to find what the host did late. Per group: its positions, excess (ms and % of the
    total), the running share, and the median compute gap of the late rank beside the median of the others' (the
    launch pace each host kept there). Empty where the late rank has no excess."""
    total = gaps["excess_ns"].sum()
    if not total > 0:
        return pd.DataFrame(columns=GAP_GROUP_COLUMNS)
    labels = {"phase": gaps["phase"].astype(str), "layer": gaps["layer"].map(_layer_label),
              "kernel": gaps["kernel_name"].astype(str)}
    tables = []
    for by, label in labels.items():
        table = gaps.groupby(label).agg(launches=("excess_ns", "size"), excess_ns=("excess_ns", "sum"),
                                        gap_median_ns=("gap_ns", "median"),
                                        others_gap_median_ns=("others_gap_ns", "median"))
        table = table.sort_values("excess_ns", ascending=False)
        covered = table["excess_ns"].cumsum() / total
        table = table[covered.shift(fill_value=0.0) < share]  # up to the group that reaches the share
        tables.append(pd.DataFrame({"by": by, "group": table.index, "launches": table["launches"].to_numpy(),
                                    "excess_ms": table["excess_ns"].to_numpy() / 1e6,
                                    "excess_pct": 100 * table["excess_ns"].to_numpy() / total,
                                    "covered_pct": 100 * covered[table.index].to_numpy(),
                                    "launch_gap_median_us": table["gap_median_ns"].to_numpy() / 1e3,
                                    "others_launch_gap_median_us": table["others_gap_median_ns"].to_numpy() / 1e3}))
    return pd.concat(tables, ignore_index=True)[GAP_GROUP_COLUMNS]


def _layer_label(layer: int) -> str:
    return "outside the layers" if layer == OUTSIDE_LAYERS else f"layer {layer}"


def gap_excess_words(gaps: pd.DataFrame, groups: pd.DataFrame, noise_ms: float) -> str:
    """The late rank's gap excess (`launch_gaps`) in one clause: how much, its noise, and where at least
    GAP_COVER_SHARE of it falls (`late_gap_groups`): the phases with their shares, the layers as ranges, the kernels
    (up to three by name, else how many and the first), each with its ms (a share could pass 100 %: where the late
    rank idles less than the others, its excess is negative); within its noise, only that its gaps match the
    others'."""
    excess_ms = gaps["excess_ns"].sum() / 1e6
    noise = "" if np.isnan(noise_ms) else f"noise {noise_ms:.1f} ms"
    if groups.empty or excess_ms <= noise_ms:
        return f"its GPU idles between launches as long as the others' ({excess_ms:+.1f} ms, {noise or 'no noise'})"
    by = dict(tuple(groups.groupby("by", sort=False)))
    phases = " and ".join(f"{r.group} ({r.excess_ms:.1f} ms)" for r in by["phase"].itertuples())
    kernels = by["kernel"]
    named = (", ".join(kernels["group"]) if len(kernels) <= 3 else
             f"{len(kernels)} kernels led by {kernels['group'].iloc[0]} ({kernels['excess_ms'].iloc[0]:.1f} ms)")
    return (f"its GPU idles {excess_ms:.1f} ms longer than the others' between launches"
            + (f" ({noise})" if noise else "") + f", at least {100 * GAP_COVER_SHARE:.0f} % of it in {phases}, "
            f"in {_layer_ranges(by['layer']['group'])}, before {named}")


def _layer_ranges(labels: pd.Series) -> str:
    """Layer groups in words: their numbers as runs ("layers 1-5, 7"), then the launches outside the layers."""
    numbers = sorted(int(label.split()[1]) for label in labels if label.startswith("layer "))
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    spans = ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}" for run in runs)
    words = [f"layer{'s' if len(numbers) > 1 else ''} {spans}"] if numbers else []
    if (labels == _layer_label(OUTSIDE_LAYERS)).any():
        words.append("outside the layers")
    return " and ".join(words)


def late_rank_gap_groups(kernels: dict[str, pd.DataFrame], late: pd.DataFrame) -> pd.DataFrame:
    """`late_gap_groups` of the late rank of each run of `late` (`late_ranks`), its run named first: `kernels`, each
    run's kernels by run label, every rank's."""
    tables = [late_gap_groups(launch_gaps(kernels[row.run], int(row.late_rank))).assign(run=row.run)
              for row in late.itertuples()]
    columns = ["run", *GAP_GROUP_COLUMNS]
    tables = [table[columns] for table in tables if len(table)]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=columns)
