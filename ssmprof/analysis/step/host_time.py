"""Where the host's time in a step goes: by what it did (a category) and where (a site), from the sampled steps.

run.json `harness.host_time` (`profiler.host_sampler`) charges each sampled step's host time to (category, site).
A site's or a category's time is its mean over the sampled steps, in ms a step, with a percentile bootstrap
interval over the steps (a site a step misses counts 0 there); its share is of the host's mean step (the sum of
every charge). What the sampler could not name is "unattributed": `attributed_pct` is the rest's share.

The sampler's own cost is its sampled steps' median step over the unsampled steps' (they ran in turn, one after the
other): an interval that spans 1 says its cost is within the steps' noise. On a GPU-paced step the host's extra work
hides behind the GPU's; on a host-paced one every reading's hold of the GIL lengthens the step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssmprof.analysis.trust.noise import CONFIDENCE, SEED, Interval, ratio_interval
from ssmprof.schema import GARBAGE_COLLECTION, SYNCHRONIZING, UNATTRIBUTED, HostTime, RunInfo

STEP_RESAMPLES = 2_000
COLUMNS = ["category", "site", "ms", "ms_low", "ms_high", "host_pct"]


def _charged(host_time: HostTime) -> pd.DataFrame:
    return pd.DataFrame(host_time.rows, columns=["step", "category", "site", "ms"])


def _per_step(rows: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """ms a step, one row per key of `by`, with its bootstrap interval over the sampled steps and its share."""
    if rows.empty:
        return pd.DataFrame(columns=[*by, "ms", "ms_low", "ms_high", "host_pct"])
    table = rows.pivot_table(index="step", columns=by, values="ms", aggfunc="sum", fill_value=0.0)
    values = table.to_numpy()
    draws = np.random.default_rng(SEED).integers(0, len(values), (STEP_RESAMPLES, len(values)))
    means = values[draws].mean(axis=1)
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(means, [tail, 100 - tail], axis=0)
    mean = values.mean(axis=0)
    keys = table.columns.to_frame(index=False)
    frame = keys.assign(ms=mean, ms_low=low, ms_high=high, host_pct=100 * mean / values.sum(axis=1).mean())
    return frame.sort_values("ms", ascending=False, kind="stable").reset_index(drop=True)


def host_sites(host_time: HostTime) -> pd.DataFrame:
    """One row per (category, site): ms a step with its interval, and % of the host's step."""
    return _per_step(_charged(host_time), ["category", "site"])[COLUMNS]


def host_categories(host_time: HostTime) -> pd.DataFrame:
    """One row per category: ms a step with its interval, and % of the host's step."""
    return _per_step(_charged(host_time), ["category"])


def host_ms(host_time: HostTime) -> float:
    """The host's mean sampled step (ms): every charge of a step summed."""
    rows = _charged(host_time)
    return float(rows.groupby("step")["ms"].sum().mean()) if len(rows) else float("nan")


def attributed_pct(host_time: HostTime) -> float:
    """The share of the host's time charged to a category other than unattributed."""
    rows = _charged(host_time)
    total = rows["ms"].sum()
    return float(100 * rows.loc[rows["category"] != UNATTRIBUTED, "ms"].sum() / total) if total else float("nan")


def sampler_overhead(host_time: HostTime) -> Interval:
    """The sampled steps' median over the unsampled steps' (1.02: the sampler cost 2 %), with its interval."""
    return ratio_interval(host_time.sampled_steps_ms, host_time.unsampled_steps_ms)


def host_time_summary(host_time: HostTime, gpu_idle_ms: float) -> pd.DataFrame:
    """One row: the host's mean sampled step, the share attributed, the GPU's wait (`host.host_summary`) and how
    much of it the attributed time covers, and the sampler's overhead with its interval (%)."""
    cost = sampler_overhead(host_time)
    host = host_ms(host_time)
    attributed = attributed_pct(host_time)
    named_ms = host * attributed / 100
    return pd.DataFrame([{
        "host_ms": host, "attributed_pct": attributed, "gpu_idle_ms": gpu_idle_ms,
        "wait_covered_pct": 100 * min(named_ms / gpu_idle_ms, 1.0) if gpu_idle_ms > 0 else float("nan"),
        "overhead_pct": 100 * (cost.value - 1), "overhead_low_pct": 100 * (cost.low - 1),
        "overhead_high_pct": 100 * (cost.high - 1), "sampled_steps": len(host_time.sampled_steps_ms),
        "readings": host_time.readings, "interval_ms": host_time.interval_ms}])


def _rank_host_times(info: RunInfo) -> dict[int, HostTime]:
    """Each rank's sampled host time (run.json `parallel.ranks[*].host_time`), where it was sampled."""
    ranks = info.parallel.ranks if info.parallel else []
    timed = {int(entry["rank"]): HostTime(**entry["host_time"]) for entry in ranks if entry.get("host_time")}
    return {rank: times for rank, times in timed.items() if not times.missing}


def rank_hosts(info: RunInfo) -> pd.DataFrame | None:
    """One row per rank of a multi-rank run: its host's mean sampled step, what it spent most on and where,
    its garbage collection and synchronizing calls, and where it ran (run.json `parallel.ranks[*].process`):
    its CPUs and their NUMA nodes beside its GPU's, its threads, context switches and CPU migrations a timed step.
    None for a single-GPU run, or where no rank recorded either."""
    ranks = info.parallel.ranks if info.parallel else []
    timed = _rank_host_times(info)
    rows = []
    for entry in ranks:
        rank = int(entry["rank"])
        process = entry.get("process") or {}
        row: dict = {"rank": rank}
        if rank in timed:
            categories = host_categories(timed[rank]).set_index("category")["ms"]
            sites = host_sites(timed[rank])
            named = sites[sites["category"] != UNATTRIBUTED]
            row |= {"host_ms": host_ms(timed[rank]), "gc_ms": float(categories.get(GARBAGE_COLLECTION, 0.0)),
                    "sync_ms": float(categories.get(SYNCHRONIZING, 0.0)),
                    "top_category": categories.drop(UNATTRIBUTED, errors="ignore").idxmax() if len(categories) else "",
                    "top_site": named["site"].iloc[0] if len(named) else "",
                    "top_site_ms": float(named["ms"].iloc[0]) if len(named) else float("nan")}
        if process:
            per_step = process.get("per_step") or {}
            cpu_nodes = process.get("cpu_numa_nodes") or []
            gpu_node = process.get("gpu_numa_node")
            row |= {"cpus": process.get("cpus", ""), "cpu_numa_nodes": ",".join(map(str, cpu_nodes)),
                    "gpu_numa_node": gpu_node if gpu_node is not None else float("nan"),
                    "on_gpu_node": (cpu_nodes == [gpu_node]) if gpu_node is not None and cpu_nodes else None,
                    "torch_threads": process.get("torch_threads"), "omp_num_threads": process.get("omp_num_threads"),
                    "threads": process.get("threads"),
                    "switches_per_step": per_step.get("voluntary_switches", 0.0)
                    + per_step.get("involuntary_switches", 0.0),
                    "migrations_per_step": per_step.get("migrations", float("nan"))}
        rows.append(row)
    if not any(len(row) > 1 for row in rows):
        return None
    return pd.DataFrame(rows)


# The share of a late rank's excess host time the sites named for it must reach
EXCESS_NAMED = 0.8


def late_rank_sites(info: RunInfo, late: int) -> pd.DataFrame | None:
    """Where the late rank's host spends more than the others: per (category, site), its ms a step against the
    median of the other ranks' (a site a rank never showed counts 0 there), the excess and its running share of the
    late rank's total excess, the sites up to EXCESS_NAMED of it first. None where the ranks were not sampled."""
    timed = _rank_host_times(info)
    if late not in timed or len(timed) < 2:
        return None
    per_rank = {rank: host_sites(times).set_index(["category", "site"])["ms"] for rank, times in timed.items()}
    table = pd.DataFrame(per_rank).fillna(0.0)
    others = table.drop(columns=late).median(axis=1)
    excess = (table[late] - others).sort_values(ascending=False)
    frame = pd.DataFrame({"late_ms": table[late], "others_ms": others, "excess_ms": excess}).loc[excess.index]
    frame = frame.reset_index()
    total = float(frame.loc[frame["excess_ms"] > 0, "excess_ms"].sum())
    frame["excess_share"] = frame["excess_ms"].clip(lower=0).cumsum() / total if total > 0 else float("nan")
    reached = int((frame["excess_share"] < EXCESS_NAMED).sum()) + 1
    return frame.head(max(reached, 1))
