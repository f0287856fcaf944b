"""A run's findings: what its summary frames say, as typed rows with their sentences, generated (never
hand-written) and each pointing at the table that holds its evidence.

`findings(summary, info)` takes the frames of `summaries.run.analyze` (a `Summary` before its findings are added)
and the run's run.json; it returns one row per finding (`phrases.Finding`: kind, status, impact in ms, headline
value, sentence, evidence anchor), the largest impact first. `provenance(info, origin)` says what the run is:
where and when it was measured, on what, with which versions and config, and how its counters were collected and
checked.
"""

from __future__ import annotations

import pandas as pd

from ssmprof.analysis.common.sections import Summary
from ssmprof.analysis.findings.phrases import TOP, Finding, graphed_words, ms, ms_span, pct_text, ranked
from ssmprof.analysis.launches.categories import SSM
from ssmprof.analysis.launches.frame import profiled_with_counters
from ssmprof.analysis.limits.roofline import REACHABLE, kernel_bounds
from ssmprof.analysis.limits.tensor_vector import WGMMA_ROWS, autotuned_rows
from ssmprof.analysis.step.communication import described_rank
from ssmprof.analysis.step.profiled_iteration import iteration_note
from ssmprof.analysis.trust.counter_checks import describe_removed
from ssmprof.analysis.trust.lent_by_grid import LENT_DRAM_ERROR_WARN_PCT
from ssmprof.analysis.trust.noise import CONFIDENCE
from ssmprof.schema import (
    CHECKED_STATUSES,
    SCRIPT_PRESET,
    SYNCHRONIZING,
    UNATTRIBUTED,
    CollectorsSection,
    CountersCollector,
    RunInfo,
    duration_words,
)

NO_COUNTERS = "No counters in this run"  # how a run's counters finding opens where it has none (--counters none)
# The statuses of the counters finding, what the suite page counts: none collected, collected before the
# self-checks, checked (all passed), checked with some removed by the checks.
COUNTERS_NONE, COUNTERS_UNCHECKED, COUNTERS_CHECKED, COUNTERS_REMOVED = "none", "unchecked", "checked", "removed"


def _at_roof(pct: float) -> str:
    """`at 82 % of its roof`, or, past 100 %, that the ceiling is below what the kernel reaches."""
    if pct > 100:
        return f"at its roof ({pct:.0f} %: the ceiling is below what this kernel reaches)"
    return f"at {pct:.0f} % of its roof"


def _time(summary: Summary) -> list[Finding]:
    categories = summary.by_category
    total_ms = categories["time_ms"].sum()
    named = ", ".join(f"{r.category} {100 * r.share:.0f} %" for r in categories.head(TOP).itertuples())
    return [Finding("where the time goes", "measured",
                    f"{100 * categories['share'].iloc[0]:.0f} % {categories['category'].iloc[0]}"
                    if len(categories) else "",
                    f"{total_ms:.1f} ms of kernel time per iteration: {named} ({len(categories)} categories).",
                    "by_category", total_ms)]


def _top_kernels(summary: Summary) -> list[Finding]:
    top = summary.top_kernels.head(TOP)
    bounds = kernel_bounds(summary.roofline) if summary.roofline is not None else None
    parts = []
    for row in top.itertuples():
        text = f"{row.kernel_name} ({row.phase}, {row.category}, {100 * row.share:.0f} % over {row.launches} " \
               f"launches of {ms(row.mean_ns)})"
        if bounds is not None:
            hit = bounds[(bounds["kernel_name"] == row.kernel_name) & (bounds["phase"] == row.phase)]
            if len(hit):
                b = hit.iloc[0]
                text += f": {b['verdict']}, " + _at_roof(b["pct_of_roof"])
        limits = summary.limiters
        if limits is not None:
            hit = limits[(limits["kernel_name"] == row.kernel_name) & (limits["phase"] == row.phase)]
            if len(hit):
                text += f", limited by {hit['limiter'].iloc[0]}"
        parts.append(text)
    share = top["share"].sum()
    return [Finding("top kernels", "measured", f"{100 * share:.0f} %",
                    f"The top {len(top)} kernels take {100 * share:.0f} % of kernel time: " + "; ".join(parts) + ".",
                    "top_kernels", share * summary.by_category["time_ms"].sum())]


def on_cpu(info: RunInfo | None) -> bool:
    """A run measured on the CPU (`--device cpu`, gloo ranks under --tp/--dp): no GPU, no SMs, no fused kernels."""
    return info is not None and info.gpu.name == "cpu"


def _ssm(summary: Summary, info: RunInfo | None = None) -> list[Finding]:
    categories = summary.by_category
    ssm = categories[categories["category"] == SSM]
    # on the CPU the reference ops are PyTorch's own, never named as SSM kernels
    if ssm.empty and info is not None and on_cpu(info):  # the first test narrows the type
        ran = ", ".join(f"{op}: {impl}" for op, impl in info.provenance.items()) or "not recorded"
        return [Finding("SSM kernels", "none", "CPU reference",
                        f"The SSM ops ran as the pure-PyTorch reference on the CPU ({ran}): there are no fused SSM "
                        "kernels to measure; profile on a GPU for them.", "by_category")]
    if ssm.empty:
        return [Finding("SSM kernels", "none", "0 %", "No SSM kernels in this run.", "by_category")]
    share = float(ssm["share"].iloc[0])
    text = f"SSM kernels take {100 * share:.0f} % of kernel time ({ssm['time_ms'].iloc[0]:.1f} ms)"
    anchor, status = "by_category", "measured"
    roof = summary.roofline_summary
    if roof is not None:
        row = roof[roof["category"] == SSM]
        if len(row):
            r = row.iloc[0]
            memory = r["memory_bound_share"]
            status = "memory-bound" if memory >= 0.5 else "compute-bound"
            side = (f"{100 * memory:.0f} % of that time is memory-bound (a memory roof, DRAM or L2, is the lowest)"
                    if memory >= 0.5 else
                    f"{100 * (1 - memory):.0f} % of that time is compute-bound (the compute roof is the lowest)")
            text += f"; {side}, at {r['pct_of_roof']:.0f} % of the roof (time-weighted)"
            if r["pct_of_roof"] < 60:
                text += ": well under the roof, so neither DRAM bandwidth nor the peak FLOP/s of their path is " \
                        "what limits them"
            anchor = "roofline_summary"
    caches = summary.caches
    row = caches[caches["category"] == SSM]
    if len(row) and pd.notna(row["dram_throughput_pct"].iloc[0]):
        text += f"; DRAM throughput {row['dram_throughput_pct'].iloc[0]:.0f} % of peak (Nsight Compute), L2 hit " \
                f"{row['l2_hit_rate_pct'].iloc[0]:.0f} %"
    limits = summary.limiters_ssm
    if limits is not None and len(limits):
        by_limiter = limits.groupby("limiter_name")["time_ms"].sum().sort_values(ascending=False)  # by unit
        text += f"; what limits them (share of the time of the {len(limits)} largest): " + ", ".join(
            f"{100 * value / by_limiter.sum():.0f} % {name}" for name, value in by_limiter.head(3).items()
            if value >= 0.01 * by_limiter.sum())
        anchor = "limiters_ssm" if anchor == "by_category" else anchor
    classes = summary.tensor_vector_ssm
    if classes is not None and len(classes):
        main = classes.loc[classes.groupby("phase")["time_share"].idxmax()]
        text += "; by compute time at the GPU's peaks, most SSM time is " + ", ".join(
            f"{name} in {phase} ({100 * share:.0f} %)"
            for name, phase, share in zip(main["class"], main["phase"], main["time_share"], strict=True))
    return [Finding("SSM kernels", status, f"{100 * share:.0f} %", text + ".", anchor, float(ssm["time_ms"].iloc[0]))]


def _headroom(summary: Summary) -> list[Finding]:
    """From `headroom_by_category`: what the kernels would give back at a reachable share of their roofs, and
    at the roofs (the upper bound)."""
    saved = summary.headroom_by_category
    if saved is None or saved.empty:
        return []
    total = summary.by_category["time_ms"].sum()
    reachable, bound = saved["saved_reachable_ms"].sum(), saved["saved_at_roof_ms"].sum()
    first = saved.iloc[0]
    text = f"Headroom: at {100 * REACHABLE:.0f} % of their roofs (what tuned kernels reach) the kernels would give " \
           f"back {reachable:.1f} ms ({100 * reachable / total:.0f} % of kernel time), most of it in " \
           f"{first['category']} ({first['saved_reachable_ms']:.1f} ms); at the roofs themselves at most " \
           f"{bound:.1f} ms ({100 * bound / total:.0f} %)."
    return [Finding("headroom", "headroom", f"{100 * reachable / total:.0f} %", text, "headroom_by_category",
                    reachable)]


def _host(summary: Summary, info: RunInfo | None = None) -> list[Finding]:
    host = summary.host.iloc[0]
    if "iteration_ms" in host:  # a multi-rank run: per rank, of its profiled iteration (`ranks.rank_host`)
        return _rank_host(host, on_cpu(info), _host_time_missing(info))
    if on_cpu(info):  # the host is the device: its ops and the Python between them share the one CPU
        text = f"On the CPU, ops run {_busy(host['gpu_busy_pct'])} of the {host['step_ms']:.1f} ms step " \
               f"({host['launches']:,} ops); the rest is Python and framework time between them on the same CPU."
        value = f"{host['gpu_busy_pct']:.0f} % in ops" if host["gpu_busy_pct"] <= 100 else "in ops all step"
        return [Finding("host", "CPU run", value, text + host_time_words(summary, cpu=True) + _host_time_missing(info),
                        "host")]
    if host["verdict"] == "host-bound":
        text = f"Host-bound: the GPU runs kernels {host['gpu_busy_pct']:.0f} % of the {host['step_ms']:.1f} ms step " \
               f"and waits {host['gpu_idle_ms']:.1f} ms for the host; a faster GPU shortens only the busy part."
    elif host["verdict"] == "host-limited":
        text = f"Host-limited: the GPU runs kernels {host['gpu_busy_pct']:.0f} % of the {host['step_ms']:.1f} ms " \
               f"step; {host['host_cost']}: a faster host would take that off every step."
    else:
        text = f"GPU-bound: kernels keep the GPU busy {_busy(host['gpu_busy_pct'])} of the {host['step_ms']:.1f} ms " \
               f"step ({host['launches']:,} launches, {host['short_launch_pct']:.0f} % under 10 us); " \
               f"{host['host_cost']}."
    value = f"{host['gpu_busy_pct']:.0f} % busy" if host["gpu_busy_pct"] <= 100 else "busy all step"
    text += host_time_words(summary) + _host_time_missing(info)
    return [Finding("host", host["verdict"], value, text, "host", max(float(host["gpu_idle_ms"]), 0.0))]


def _host_time_missing(info: RunInfo | None) -> str:
    """` The host's time is not attributed: the host sampler stopped: ...`, where the run's sampler failed."""
    sampled = info.harness.host_time if info is not None else None
    return f" The host's time is not attributed: {sampled.missing}." if sampled is not None and sampled.missing else ""


def host_time_words(summary: Summary, cpu: bool = False) -> str:
    """` The host's 61.2 ms a step (sampled): Triton launcher 20.1 ms (33 %), ...; the lines: ...; 99 % named (the
    GPU's 60.0 ms wait covered 100 %); the sampler cost +1.2 % (-0.5 % to +2.9 %).`, where the run sampled its host
    (`host_time`); empty otherwise."""
    if summary.host_time is None or summary.host_categories is None or summary.host_sites is None:
        return ""
    row = summary.host_time.iloc[0]
    categories = summary.host_categories[summary.host_categories["category"] != UNATTRIBUTED]
    sites = summary.host_sites[summary.host_sites["category"] != UNATTRIBUTED]
    doing = ", ".join(f"{c.category} {c.ms:.1f} ms ({c.host_pct:.0f} %)" for c in categories.head(TOP).itertuples())
    where = "; ".join(f"{s.site} ({s.category}) {s.ms:.1f} ms ({s.host_pct:.0f} %)"
                      for s in sites.head(TOP).itertuples())
    covered = (f"; the GPU's {row['gpu_idle_ms']:.1f} ms wait covered {row['wait_covered_pct']:.0f} %"
               if row["gpu_idle_ms"] > 0 and not cpu else "")
    cost = (f"{row['overhead_pct']:+.1f} % ({row['overhead_low_pct']:+.1f} % to {row['overhead_high_pct']:+.1f} %)"
            if row["overhead_low_pct"] == row["overhead_low_pct"] else f"{row['overhead_pct']:+.1f} % (one step)")
    steps = int(row["sampled_steps"])
    return (f" The host's {row['host_ms']:.1f} ms a step ({steps} sampled steps): {doing}; by line: {where}; "
            f"{row['attributed_pct']:.0f} % named{covered}; sampling cost the step {cost}.")


def _sync_cost(host_categories: pd.DataFrame | None) -> str:
    """`; waiting in them took 12.3 ms a step (11.0-13.4; 9 % of the host's time, sampled)`: the synchronizing
    calls' share of the host's time (`host_time.host_categories`), where the run sampled its host."""
    if host_categories is None:
        return ""
    synced = host_categories[host_categories["category"] == SYNCHRONIZING]
    if synced.empty:
        return ", which cost no sampled time"
    row = synced.iloc[0]
    return (f"; waiting in them took {row['ms']:.1f} ms a step ({row['ms_low']:.1f}-{row['ms_high']:.1f}; "
            f"{row['host_pct']:.0f} % of the host's time, sampled)")


def _syncs(info: RunInfo, host_categories: pd.DataFrame | None = None) -> list[Finding]:
    """The calls of a step that make the host wait for the GPU (run.json `harness.sync_sites`), the three that
    happen most by name; none said where the step has none or the run did not look."""
    sites = info.harness.sync_sites
    if not sites:
        return []
    total = sum(sites.values())
    ranked_sites = sorted(sites.items(), key=lambda item: (-item[1], item[0]))
    named = "; ".join(f"{site} ({count}x)" for site, count in ranked_sites[:TOP])
    more = f"; and {len(ranked_sites) - TOP} more sites" if len(ranked_sites) > TOP else ""
    cost = _sync_cost(host_categories)
    text = (f"The host waits for the GPU {total} time{'s' if total > 1 else ''} a step, at {named}{more}{cost}. After "
            "each, the GPU's queue is empty and the kernels that follow start at the host's pace: that part of the "
            "step is host-bound whatever its kernels, and any host cost (a slower CPU, a tracer) lengthens it.")
    return [Finding("host", "synchronizes", f"{total} sync{'s' if total > 1 else ''} a step", text, "host")]


def _rank_host(host: pd.Series, cpu: bool = False, missing: str = "") -> list[Finding]:
    """The host finding of a multi-rank run: busy per rank, of the rank's profiled iteration, NCCL waiting
    excluded; the verdict names the rank it waits for where one is late (`ranks.rank_host`), and `missing` says
    why the hosts were not sampled where they were not. On the CPU (gloo ranks) the ops keep the rank's CPU busy,
    not a GPU."""
    busy = "ops keep the rank's CPU busy" if cpu else "kernels keep the GPU busy"
    text = f"Per rank, {busy} {host['gpu_busy_pct']:.0f} % of the profiled iteration " \
           f"({host['gpu_busy_ms']:.1f} of {host['iteration_ms']:.1f} ms; collectives' waiting excluded): " \
           f"{host['verdict']}; {host['host_cost'].removeprefix('per rank, ')}.{missing}"
    return [Finding("host", host["verdict"], f"{host['gpu_busy_pct']:.0f} % busy per rank", text, "host",
                    max(float(host["gpu_idle_ms"]), 0.0))]


def _late_rank(summary: Summary) -> list[Finding]:
    """The rank the others wait for (`ranks.late_rank`), what it costs and what made it late; where its cost is
    within its noise, that no rank is late. Where the hosts pace the step (`ranks.hosts_pace`) the rank is named as
    the last to launch, not as one slow rank (which rank is last changes from run to run), with the remedy."""
    late = summary.late_rank
    if late is None or late.empty:
        return []
    row = late.iloc[0]
    if row["cost_ms"] <= row["cost_noise_ms"]:
        return [Finding("late rank", "within noise", "none late",
                        f"No rank is late beyond noise: the latest, rank {row['late_rank']}, costs "
                        f"{row['cost_ms']:.1f} ms, within the {row['cost_noise_ms']:.1f} ms other ranks cost.",
                        "late_rank")]
    paced = bool(row.get("hosts_pace", False))
    text = (f"Rank {row['late_rank']} {'launches last' if paced else 'is late'}: it arrived last at "
            f"{row['arrived_last']} of {row['collectives']} collectives, where the other ranks waited "
            f"{row['caused_wait_ms']:.1f} ms in all; it costs the profiled iteration {row['cost_ms']:.1f} ms "
            f"({row['cost_pct']:.0f} % of its {row['iteration_ms']:.1f} ms; noise {row['cost_noise_ms']:.1f} ms). "
            f"What made it late: {row['cause']}." + _late_host(summary)
            + (f" Remedy: {row['remedy']}." if paced else ""))
    value = f"rank {row['late_rank']} {'last: hosts pace' if paced else 'late'}, {row['cost_ms']:.0f} ms"
    return [Finding("late rank", "hosts pace" if paced else "late", value, text, "late_rank", float(row["cost_ms"]))]


def _late_host(summary: Summary) -> str:
    """` Sampled, the hosts need 92-154 ms a step (rank 1: 154 ms); its excess over the others' median is at: ...`,
    where the ranks' hosts were sampled (`host_time.rank_hosts`, `late_rank_sites`)."""
    hosts, sites = summary.rank_hosts, summary.late_rank_sites
    if hosts is None or "host_ms" not in hosts or sites is None or summary.late_rank is None:
        return ""
    late = int(summary.late_rank["late_rank"].iloc[0])
    mine = hosts.loc[hosts["rank"] == late, "host_ms"]
    excess = sites[sites["excess_ms"] > 0]
    named = "; ".join(f"{s.site} ({s.category}) +{s.excess_ms:.1f} ms" for s in excess.head(TOP).itertuples())
    more = f" and {len(excess) - TOP} more lines" if len(excess) > TOP else ""
    share = f"{more} ({100 * excess['excess_share'].iloc[-1]:.0f} % of its excess)" if len(excess) else ""
    return (f" Sampled, the ranks' hosts spend {ms_span(hosts['host_ms'])} a step (rank {late}: "
            f"{float(mine.iloc[0]):.1f} ms)" + (f"; its excess over the others' median is at {named}{share}."
                                                if named else "; it needs no more than the others."))


def _scaling(summary: Summary) -> list[Finding]:
    """Speedup and parallel efficiency over the single-GPU twin, with their intervals (`ranks.scaling_efficiency`),
    where the twin was given; its impact is the step's time beyond perfect scaling."""
    scaling = summary.scaling_efficiency
    if scaling is None:
        return []
    row = scaling.iloc[0]
    text = (f"{int(row['gpus'])} GPUs run the step {row['speedup']:.2f}x as fast as one ({row['speedup_low']:.2f}-"
            f"{row['speedup_high']:.2f}x, {100 * CONFIDENCE:.0f} % interval; {row['step_ms']:.1f} against "
            f"{row['single_gpu_step_ms']:.1f} ms): {row['efficiency_pct']:.0f} % scaling efficiency "
            f"({row['efficiency_pct_low']:.0f}-{row['efficiency_pct_high']:.0f} %)"
            + graphed_words(row.to_dict()) + ".")
    lost = float(row["step_ms"] - row["single_gpu_step_ms"] / row["gpus"])
    return [Finding("scaling", "measured", f"{row['efficiency_pct']:.0f} % efficiency", text, "scaling_efficiency",
                    max(lost, 0.0))]


def _busy(pct: float) -> str:
    """The GPU's busy share of the step in words; past 100 % the profiled iteration's kernels outlasted the median
    step, which the number alone would not say."""
    if pct <= 100:
        return f"{pct:.0f} %"
    return f"all ({pct:.0f} %: the profiled iteration's kernels ran {pct - 100:.0f} % longer than the median step)"


def _iteration(summary: Summary) -> list[Finding]:
    """Where the profiled iteration is not one of the timed steps (`profiled_iteration.iteration_check`): what of it
    stands."""
    check = summary.profiled_iteration
    note = iteration_note(check)
    if note is None:
        return []
    row = check.iloc[0]
    return [Finding("profiled iteration", "not representative", f"{row['span_off_pct']:+.0f} % span",
                    note[0].upper() + note[1:] + ".", "profiled_iteration")]


def _tensor_instructions(summary: Summary, info: RunInfo) -> list[Finding]:
    """From `tensor_instructions` (Hopper): which kernels do their tensor work on mma.sync instead of wgmma, and
    where Triton's autotuning chose their tile, whether it was too short for a wgmma."""
    families = summary.tensor_instructions
    if families is None or families.empty:
        return []
    tiles = autotuned_rows(info)
    parts = []
    for category, group in families.groupby("category", sort=False):
        parts.append(f"{category}: " + ", ".join(
            f"{row.tensor_instruction} in {row.kernels} kernel{'s' if row.kernels > 1 else ''} ({row.time_ms:.1f} ms"
            + (f": {row.names}" if row.tensor_instruction != "wgmma" and category == SSM else "") + ")"
            for row in group.itertuples()))
    tensor_ms = families["time_ms"].sum()
    mma = families[families["tensor_instruction"] != "wgmma"]
    mma_ms = mma["time_ms"].sum()
    text = "Tensor instructions (Hopper's full tensor throughput needs wgmma; mma.sync is the warp-level " \
           "instruction it keeps from Ampere): " + "; ".join(parts) + "."
    short = sorted({name for names in mma["names"] for name in names.split(", ")
                    if tiles.get(name, WGMMA_ROWS) < WGMMA_ROWS})
    if short:
        text += f" Triton's autotuning chose tiles of fewer than {WGMMA_ROWS} rows (a wgmma's rows per warpgroup) " \
                f"for " + ", ".join(f"{name} ({tiles[name]})" for name in short) + "."
    return [Finding("tensor instructions", "mma.sync" if mma_ms else "wgmma",
                    f"{100 * mma_ms / tensor_ms:.0f} % mma.sync", text, "tensor_instructions", float(mma_ms))]


def _checks(summary: Summary, info: RunInfo) -> list[Finding]:
    status = summary.counter_checks
    share = dict(zip(status["counter_status"], status["time_share"], strict=True))
    counted = sum(v for k, v in share.items() if k in (*CHECKED_STATUSES, "unchecked"))
    if not counted:
        text, verdict = f"{NO_COUNTERS} (timeline only): no rates, roofline, limiters or tensor/vector classes.", \
            COUNTERS_NONE
    elif "unchecked" in share:
        text = f"Counters cover {pct_text(100 * counted)} of kernel time, unchecked: a run written before the " \
               "self-checks (schema 1), whose counters were joined by short name and launch configuration."
        verdict = COUNTERS_UNCHECKED
    else:
        sources = ", ".join(f"{k} {pct_text(100 * v)}" for k, v in share.items() if k in CHECKED_STATUSES)
        text = f"Counters cover {pct_text(100 * counted)} of kernel time ({sources}; lent: one profiled launch per " \
               "configuration stands for the others) and passed the self-checks"
        removed = describe_removed(info.checks.rejected if info.checks else [], status["time_ns"].sum())
        verdict = COUNTERS_REMOVED if removed else COUNTERS_CHECKED
        collector = info.collectors.counters
        minor, skipped = collector.minor_functions, collector.too_small_for_pass_2
        text += (f"; the checks {removed}" if removed else "")
        if minor and minor.launches:
            text += (f"; {minor.launches} launches of {minor.functions} functions under "
                     f"{100 * minor.min_share:.1f} % of the kernel time each ({100 * minor.time_fraction:.2f} % "
                     "together) were not profiled")
        if skipped and skipped.launches:
            text += (f"; {skipped.launches} launches ({100 * skipped.time_fraction:.2f} % of kernel time) of "
                     f"problems under {100 * skipped.min_share:.2f} % of it each were not profiled (the second "
                     "pass skips them)")
        text += (_not_placed(collector) + _lent_by_grid(summary.lent_by_grid) + _grid_match(collector)
                 + _plan_cost(collector) + "." + _gemm_work(summary.gemm_work))
    return [Finding("counters", verdict, pct_text(100 * counted), text, "counter_checks")]


def _not_placed(counters: CountersCollector) -> str:
    """The profiled launch configurations whose counters found no timeline launch (run.json
    `profiled_not_placed`): each is a defect of the join, so the report names them rather than dropping them."""
    missed = counters.profiled_not_placed + (counters.stalls.profiled_not_placed if counters.stalls else [])
    if not missed:
        return ""
    shown = ", ".join(missed[:3]) + (f" and {len(missed) - 3} more" if len(missed) > 3 else "")
    return (f"; {len(missed)} profiled launch configuration{'s' * (len(missed) != 1)} found no timeline launch to "
            f"sit on, {'their' if len(missed) != 1 else 'its'} counters unused ({shown})")


def _lent_by_grid(families: pd.DataFrame | None) -> str:
    """The families profiled at grid bins (`trust.lent_by_grid.lent_families`) and what their held-out check says
    of the lent DRAM bytes, the counter the roofline and the cache views stand on most: the median over the
    families checked, the worst family and its share of kernel time, and the share of kernel time in families off
    by more than LENT_DRAM_ERROR_WARN_PCT, so that a reader weighs the lent launches' numbers by it. Nothing for a
    run without families; the error clauses only where a family held a launch out."""
    if families is None:
        return ""
    text = (f"; {len(families)} famil{'ies' if len(families) != 1 else 'y'} "
            f"({pct_text(100 * families['time_share'].sum())} of kernel time) profiled at grid bins lend to "
            f"{families['lent_launches'].sum():,} launches, their work counters scaled by grid")
    checked = families.dropna(subset=["dram_error_pct"])
    if checked.empty:
        return text
    worst = checked.loc[checked["dram_error_pct"].idxmax()]
    text += (f"; held-out error of lent DRAM bytes: median {checked['dram_error_pct'].median():.1f} % over "
             f"{len(checked)} famil{'ies' if len(checked) != 1 else 'y'} (worst family "
             f"{worst['dram_error_pct']:,.0f} %, {worst['kernel_name']}, {pct_text(100 * worst['time_share'])} of "
             f"kernel time)")
    off = checked[checked["dram_error_pct"] > LENT_DRAM_ERROR_WARN_PCT]
    if off.empty:
        return text
    return (text + f"; families of {pct_text(100 * off['time_share'].sum())} of kernel time lent DRAM bytes off by "
            f"more than {LENT_DRAM_ERROR_WARN_PCT:.0f} % on their held-out launch: read their launches' DRAM "
            f"bytes and arithmetic intensity as estimates")


def _grid_match(counters: CountersCollector) -> str:
    """The share of the counter passes' report rows that found their timeline launch, only where some did not:
    the rest of the profiled counters sit on no launch (`_not_placed` names them)."""
    match = counters.grid_match_pct
    if match is None or match >= 100:
        return ""
    return f"; {match:.1f} % of the counter passes' report rows found their timeline launch"


def _plan_cost(counters: CountersCollector) -> str:
    """What the counter passes took against what the plan predicted before they ran (how far a --budget, chosen
    on the prediction, can be trusted), and what the budget made the plan leave out, where it left anything."""
    text = ""
    if counters.predicted_s is not None and counters.wall_s:
        error = 100 * (counters.predicted_s / counters.wall_s - 1)
        text = (f"; counters took {duration_words(counters.wall_s)}, predicted "
                f"{duration_words(counters.predicted_s)} ({error:+.0f} %)")
    if counters.left_out:
        within = f"within the {counters.budget_s:.0f} s budget " if counters.budget_s is not None else ""
        text += f"; {within}it left out {counters.left_out}"
    return text


def _gemm_work(work: pd.DataFrame | None) -> str:
    """The GEMM self-check in words: measured tensor work against 2MNK and against what whole tiles issue."""
    if work is None or work.empty:
        return ""

    def span(column: str) -> str:
        low, high = work[column].min(), work[column].max()
        return f"{low:.3f}x" if f"{low:.3f}" == f"{high:.3f}" else f"{low:.3f}-{high:.3f}x"

    text = f" GEMM tensor work measured {span('ratio_to_2mnk')} 2MNK and {span('ratio_to_issued')} " \
           "what whole tiles issue (forward and backward)"
    padding = work["padding_share"].max()
    return text + (f": up to {100 * padding:.0f} % of it is tile padding of skinny shapes." if padding >= 0.05 else ".")


def findings(summary: Summary, info: RunInfo) -> pd.DataFrame:
    """The run's findings, the largest impact first (see the module docstring)."""
    return ranked(_late_rank(summary) + _scaling(summary) + _time(summary) + _top_kernels(summary) + _ssm(summary, info)
                  + _tensor_instructions(summary, info) + _headroom(summary) + _host(summary, info)
                  + _syncs(info, summary.host_categories) + _iteration(summary) + _checks(summary, info))


def provenance(info: RunInfo, origin: str) -> pd.DataFrame:
    """What the run is, as (item, value) rows: origin (bundled reference run or a run directory), date, GPU
    and clocks, host, versions, workload and config, counter mode and checked coverage."""
    gpu, workload, coverage = info.gpu, info.workload, info.coverage
    clocks = gpu.clocks
    versions = ", ".join(f"{k} {v}" for k, v in info.versions.items() if v)
    host = info.host.model_dump(exclude_unset=True)
    counters = info.collectors.counters
    checks = info.checks
    if checks:
        shares = checks.status_time_fraction
        checked = f"checked: {', '.join(f'{k} {pct_text(100 * v)}' for k, v in shares.items())} of kernel time"
    else:
        checked = "not checked (written before the self-checks, schema 1)"
    counted = (f"{counters.mode} ({counters.tool or 'no tool'}), covering "
               f"{pct_text(100 * coverage.counter_time_fraction)} of kernel time; {checked}"
               if profiled_with_counters(info) else "none (timeline only: --counters none)")
    rows = [
        ("source", origin),
        ("measured", info.created or "unknown"),
        ("device", "CPU (no GPU: PyTorch's CPU ops" + (", one gloo process a rank)" if info.parallel else ")"))
        if on_cpu(info) else
        ("GPU", f"{gpu.name} ({_known(gpu.sm_count)} SMs, {_sm_clock(info)}, memory clock "
                f"{_known(clocks.memory_mhz)} MHz)"),
        ("host", ", ".join(f"{k} {v}" for k, v in host.items()) if host else "not recorded"),
        ("versions", versions or "not recorded"),
        ("workload", workload_words(info)
                     + (f" (overrides: {workload.overrides})" if workload.overrides else "")
                     + (f", from {workload.source.spec} (sha256 {workload.source.sha256[:12]})"
                        if workload.source else "")),
        ("config", ", ".join(f"{k}={v}" for k, v in workload.config.items() if v is not None)),
        ("kernels", ", ".join(f"{k}: {v}" for k, v in info.provenance.items())),
        ("counters", counted),
        ("launches", f"{coverage.launches:,} in the profiled iteration"),
        ("profiling cost", _cost(info.collectors)),
    ]
    parallel = info.parallel
    if parallel:
        rank = described_rank(info)
        rows.append(("ranks", f"{parallel.world_size} (TP {parallel.tp} x DP {parallel.dp}, sequence "
                              f"parallel {'on' if parallel.sequence_parallel else 'off'}); the kernel tables "
                              f"describe rank {rank}"
                              + (" (the one with counters)" if parallel.counters_rank is not None else "")
                              + ", the per-rank and communication tables every rank"))
    return pd.DataFrame(rows, columns=["item", "value"])


def _sm_clock(info: RunInfo) -> str:
    """The SM clock during the timed steps (median and range, `nvml.SharingMonitor`); where not sampled, said so,
    never the reading taken before the steps (an idle GPU's clock)."""
    sampled = info.gpu_sharing.sm_clock_mhz if info.gpu_sharing else None
    if sampled is None:
        return "SM clock not measured during the steps"
    return f"SM clock {sampled.median:.0f} MHz during the steps ({sampled.min:.0f}-{sampled.max:.0f})"


def workload_words(info: RunInfo) -> str:
    """What ran: `mamba2-lm --preset paper`, or for a --script run `train.py (a training script, run with --steps
    60)`: a script has no preset, its sizes are its own."""
    workload = info.workload
    if workload.preset != SCRIPT_PRESET:
        return f"{workload.name} --preset {workload.preset}"
    args = " ".join(workload.config.get("args") or [])
    return f"{workload.name} (a training script" + (f", run with {args})" if args else ")")


def _known(value) -> str:
    return "?" if value is None else str(value)


def _cost(collectors: CollectorsSection) -> str:
    """What profiling the run cost: the harness, each Nsight Compute pass (wall time, launches profiled x replay
    passes each, GiB restored per replay where recorded), what the passes spent outside the replayed iterations
    (where stamped), the host's cost of a tiny launch, and a parallel run's sampled steps' job."""
    harness, counters = collectors.harness, collectors.counters
    text = f"harness {harness.wall_s:.0f} s"
    if harness.sampled_job_s is not None:
        text += f" (of which the sampled steps' own job {harness.sampled_job_s:.0f} s)"
    walls = counters.pass_wall_s
    if walls:
        replays = counters.pass_replay or [None] * len(walls)
        parts = [f"{wall:.0f} s" + (f" ({r.launches} launches x {r.passes_median:.0f} replays, "
                                    f"{r.gib_per_pass_median:.1f} GiB restored per replay)" if r else "")
                 for wall, r in zip(walls, replays, strict=True)]
        text += f", Nsight Compute {sum(walls):.0f} s in {len(walls)} pass{'es' * (len(walls) != 1)}: " + \
            "; ".join(parts) + _fixed_cost(counters.pass_seconds)
    elif counters.wall_s:
        text += f", Nsight Compute {counters.wall_s:.0f} s"
    if harness.host_launch_us is not None:
        text += f"; host {harness.host_launch_us:.1f} us per tiny launch"
    return text


# The parts of a pass's wall time outside the iteration ncu replays (`profiler.counters.pass_seconds`), as named on
# the page: what each pass pays again whatever it profiles.
FIXED_PASS_PARTS = {"start-up": ("start",), "planning": ("cuda", "plan", "pin"),
                    "build and warm-up": ("build", "warmup", "timed"), "exit": ("harness", "exit")}


def _fixed_cost(passes: list[dict]) -> str:
    """"; outside the replayed iterations: start-up 13 s, ..." summed over the passes (parts the run recorded).
    The start-up of a pass started ahead of its turn (every pass after the first, where the run records `ahead`)
    overlapped the pass before it, and is named apart with its importing and waiting."""
    def started_ahead(index: int, part: dict) -> bool:
        return index > 0 and "ahead" in part

    sums = {name: sum(part.get(key, 0.0) for i, part in enumerate(passes) for key in keys
                      if not (key == "start" and started_ahead(i, part)))
            for name, keys in FIXED_PASS_PARTS.items() if any(key in part for part in passes for key in keys)}
    text = "; outside the replayed iterations: " + ", ".join(f"{k} {v:.0f} s" for k, v in sums.items()) if sums else ""
    ahead = [part["start"] + part["ahead"] for i, part in enumerate(passes) if started_ahead(i, part)]
    if ahead:
        text += f"; {len(ahead)} pass{'es' * (len(ahead) != 1)} started ahead, {sum(ahead):.0f} s of start-up, " \
                "imports and waiting overlapped with the pass before"
    return text
