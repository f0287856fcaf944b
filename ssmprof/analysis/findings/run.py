"""Findings in words: what a run's summary frames say, as sentences with their numbers, generated (never
hand-written) and each pointing at the table that holds its evidence.

`findings(summary, info)` takes the frames of `summaries.run.analyze` (a `sections.Summary` before its findings are
added) and the run's run.json; it returns one row per finding: `topic`, `finding` (the sentence), `value` (its
headline number) and `anchor` (the name of the summary frame below it in the report). `provenance(info, origin)`
says what the run is: where and when it was measured, on what, with which versions and config, and how its
counters were collected and checked.
"""

from __future__ import annotations

import pandas as pd

from ssmprof.analysis.common.sections import Summary
from ssmprof.analysis.launches.frame import WEIGHT, profiled_with_counters, time_weighted
from ssmprof.analysis.limits.roofline import REACHABLE
from ssmprof.analysis.step.communication import described_rank
from ssmprof.analysis.step.profiled_iteration import iteration_note
from ssmprof.analysis.trust.counter_checks import describe_removed
from ssmprof.analysis.trust.noise import CONFIDENCE, FASTER, RERUN_SPREAD_PCT, SLOWER
from ssmprof.schema import CHECKED_STATUSES, CollectorsSection, CountersCollector, RunInfo

SSM = "SSM scan"
COLUMNS = ["topic", "finding", "value", "anchor"]
TOP = 3  # categories and kernels named in the "where the time goes" findings
NO_COUNTERS = "No counters in this run"  # how a run's counters finding opens where it has none (--counters none)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms" if ns >= 1e5 else f"{ns / 1e3:.0f} us"


def _span(low: float, high: float, unit: str = " %", form: str = "{:.0f}") -> str:
    """A range of rounded values, `54-61 %`, or one number where both ends round alike: `54 %`."""
    low_text, high_text = form.format(low), form.format(high)
    return f"{low_text}{unit}" if low_text == high_text else f"{low_text}-{high_text}{unit}"


def _at_roof(pct: float) -> str:
    """`at 82 % of its roof`, or, past 100 %, that the ceiling is below what the kernel reaches."""
    if pct > 100:
        return f"at its roof ({pct:.0f} %: the ceiling is below what this kernel reaches)"
    return f"at {pct:.0f} % of its roof"


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


def _time(summary: Summary) -> list[dict]:
    categories = summary.by_category
    total_ms = categories["time_ms"].sum()
    named = ", ".join(f"{r.category} {100 * r.share:.0f} %" for r in categories.head(TOP).itertuples())
    return [{"topic": "where the time goes",
             "finding": f"{total_ms:.1f} ms of kernel time per iteration: {named} "
                        f"({len(categories)} categories).",
             "value": f"{100 * categories['share'].iloc[0]:.0f} % {categories['category'].iloc[0]}"
             if len(categories) else "", "anchor": "by_category"}]


def _top_kernels(summary: Summary) -> list[dict]:
    top = summary.top_kernels.head(TOP)
    bounds = kernel_bounds(summary.roofline) if summary.roofline is not None else None
    parts = []
    for row in top.itertuples():
        text = f"{row.kernel_name} ({row.phase}, {row.category}, {100 * row.share:.0f} % over {row.launches} " \
               f"launches of {_ms(row.mean_ns)})"
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
    return [{"topic": "top kernels", "finding": f"The top {len(top)} kernels take {100 * share:.0f} % of kernel "
             "time: " + "; ".join(parts) + ".", "value": f"{100 * share:.0f} %", "anchor": "top_kernels"}]


def _ssm(summary: Summary) -> list[dict]:
    categories = summary.by_category
    ssm = categories[categories["category"] == SSM]
    if ssm.empty:
        return [{"topic": "SSM kernels", "finding": "No SSM kernels in this run.", "value": "0 %",
                 "anchor": "by_category"}]
    share = float(ssm["share"].iloc[0])
    text = f"SSM kernels take {100 * share:.0f} % of kernel time ({ssm['time_ms'].iloc[0]:.1f} ms)"
    anchor = "by_category"
    roof = summary.roofline_summary
    if roof is not None:
        row = roof[roof["category"] == SSM]
        if len(row):
            r = row.iloc[0]
            memory = r["memory_bound_share"]
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
    return [{"topic": "SSM kernels", "finding": text + ".", "value": f"{100 * share:.0f} %", "anchor": anchor}]


def _headroom(summary: Summary) -> list[dict]:
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
    return [{"topic": "headroom", "finding": text, "value": f"{100 * reachable / total:.0f} %",
             "anchor": "headroom_by_category"}]


def _host(summary: Summary) -> list[dict]:
    host = summary.host.iloc[0]
    if "iteration_ms" in host:  # a multi-rank run: per rank, of its profiled iteration (`ranks.rank_host`)
        return _rank_host(host)
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
    return [{"topic": "host", "finding": text, "value": value, "anchor": "host"}]


def _syncs(info: RunInfo) -> list[dict]:
    """The calls of a step that make the host wait for the GPU (run.json `harness.sync_sites`), the three that
    happen most by name; none said where the step has none or the run did not look."""
    sites = info.harness.sync_sites
    if not sites:
        return []
    total = sum(sites.values())
    ranked = sorted(sites.items(), key=lambda item: (-item[1], item[0]))
    named = "; ".join(f"{site} ({count}x)" for site, count in ranked[:TOP])
    more = f"; and {len(ranked) - TOP} more sites" if len(ranked) > TOP else ""
    text = (f"The host waits for the GPU {total} time{'s' if total > 1 else ''} a step, at {named}{more}. After "
            "each, the GPU's queue is empty and the kernels that follow start at the host's pace: that part of the "
            "step is host-bound whatever its kernels, and any host cost (a slower CPU, a tracer) lengthens it.")
    return [{"topic": "host", "finding": text, "value": f"{total} sync{'s' if total > 1 else ''} a step",
             "anchor": "host"}]


def _rank_host(host: pd.Series) -> list[dict]:
    """The host finding of a multi-rank run: busy per rank, of the rank's profiled iteration, NCCL waiting
    excluded; the verdict names the rank it waits for where one is late (`ranks.rank_host`)."""
    text = f"Per rank, kernels keep the GPU busy {host['gpu_busy_pct']:.0f} % of the profiled iteration " \
           f"({host['gpu_busy_ms']:.1f} of {host['iteration_ms']:.1f} ms; collectives' waiting excluded): " \
           f"{host['verdict']}; {host['host_cost'].removeprefix('per rank, ')}."
    return [{"topic": "host", "finding": text, "value": f"{host['gpu_busy_pct']:.0f} % busy per rank",
             "anchor": "host"}]


def _late_rank(summary: Summary) -> list[dict]:
    """The rank the others wait for (`ranks.late_rank`), what it costs and what made it late; where its cost is
    within its noise, that no rank is late."""
    late = summary.late_rank
    if late is None or late.empty:
        return []
    row = late.iloc[0]
    if row["cost_ms"] <= row["cost_noise_ms"]:
        return [{"topic": "late rank", "finding": f"No rank is late beyond noise: the latest, rank {row['late_rank']}, "
                 f"costs {row['cost_ms']:.1f} ms, within the {row['cost_noise_ms']:.1f} ms other ranks cost.",
                 "value": "none late", "anchor": "late_rank"}]
    text = (f"Rank {row['late_rank']} is late: it arrived last at {row['arrived_last']} of {row['collectives']} "
            f"collectives, where the other ranks waited {row['caused_wait_ms']:.1f} ms in all; it costs the profiled "
            f"iteration {row['cost_ms']:.1f} ms ({row['cost_pct']:.0f} % of its {row['iteration_ms']:.1f} ms; noise "
            f"{row['cost_noise_ms']:.1f} ms). What made it late: {row['cause']}.")
    return [{"topic": "late rank", "finding": text, "value": f"rank {row['late_rank']} late, {row['cost_ms']:.0f} ms",
             "anchor": "late_rank"}]


def _scaling(summary: Summary) -> list[dict]:
    """Speedup and parallel efficiency over the single-GPU twin, with their intervals (`ranks.scaling_efficiency`),
    where the twin was given."""
    scaling = summary.scaling_efficiency
    if scaling is None:
        return []
    row = scaling.iloc[0]
    text = (f"{int(row['gpus'])} GPUs run the step {row['speedup']:.2f}x as fast as one ({row['speedup_low']:.2f}-"
            f"{row['speedup_high']:.2f}x, {100 * CONFIDENCE:.0f} % interval; {row['step_ms']:.1f} against "
            f"{row['single_gpu_step_ms']:.1f} ms): {row['efficiency_pct']:.0f} % scaling efficiency "
            f"({row['efficiency_pct_low']:.0f}-{row['efficiency_pct_high']:.0f} %).")
    return [{"topic": "scaling", "finding": text, "value": f"{row['efficiency_pct']:.0f} % efficiency",
             "anchor": "scaling_efficiency"}]


def _busy(pct: float) -> str:
    """The GPU's busy share of the step in words; past 100 % the profiled iteration's kernels outlasted the median
    step, which the number alone would not say."""
    if pct <= 100:
        return f"{pct:.0f} %"
    return f"all ({pct:.0f} %: the profiled iteration's kernels ran {pct - 100:.0f} % longer than the median step)"


def _iteration(summary: Summary) -> list[dict]:
    """Where the profiled iteration is not one of the timed steps (`profiled_iteration.iteration_check`): what of it
    stands."""
    check = summary.profiled_iteration
    note = iteration_note(check)
    if note is None:
        return []
    row = check.iloc[0]
    return [{"topic": "profiled iteration", "finding": note[0].upper() + note[1:] + ".",
             "value": f"{row['span_off_pct']:+.0f} % span", "anchor": "profiled_iteration"}]


def autotuned_rows(info: RunInfo) -> dict[str, int]:
    """Kernel function -> the rows of the tile its Triton autotuner chose (`BLOCK_SIZE_M`), from run.json's
    `triton_autotune` (the first choice where a kernel was tuned for several keys)."""
    rows: dict[str, int] = {}
    for name, entries in info.triton_autotune.items():
        for _, _, config in entries:
            if "BLOCK_SIZE_M: " in config:
                rows.setdefault(name.rsplit(".", 1)[-1], int(config.split("BLOCK_SIZE_M: ")[1].split(",")[0]))
    return rows


# A wgmma instruction computes 64 rows of its tile per warpgroup of 4 warps (m64nNk16): Triton emits it only for
# tiles of at least that many rows, and the warp-level mma.sync otherwise.
WGMMA_ROWS = 64


def _tensor_instructions(summary: Summary, info: RunInfo) -> list[dict]:
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
    return [{"topic": "tensor instructions", "finding": text, "value": f"{100 * mma_ms / tensor_ms:.0f} % mma.sync",
             "anchor": "tensor_instructions"}]


def _checks(summary: Summary, info: RunInfo) -> list[dict]:
    status = summary.counter_checks
    share = dict(zip(status["counter_status"], status["time_share"], strict=True))
    counted = sum(v for k, v in share.items() if k in (*CHECKED_STATUSES, "unchecked"))
    if not counted:
        text = f"{NO_COUNTERS} (timeline only): no rates, roofline, limiters or tensor/vector classes."
    elif "unchecked" in share:
        text = f"Counters cover {100 * counted:.0f} % of kernel time, unchecked: a run written before the " \
               "self-checks (schema 1), whose counters were joined by short name and launch configuration."
    else:
        sources = ", ".join(f"{k} {100 * v:.0f} %" for k, v in share.items() if k in CHECKED_STATUSES)
        text = f"Counters cover {100 * counted:.0f} % of kernel time ({sources}; lent: one profiled launch per " \
               "configuration stands for the others) and passed the self-checks"
        removed = describe_removed(info.checks.rejected if info.checks else [], status["time_ns"].sum())
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
        text += _not_placed(collector) + "." + _gemm_work(summary.gemm_work)
    return [{"topic": "counters", "finding": text, "value": f"{100 * counted:.0f} %", "anchor": "counter_checks"}]


def _not_placed(counters: CountersCollector) -> str:
    """The profiled launch configurations whose counters found no timeline launch (run.json
    `profiled_not_placed`): each is a defect of the join, so the report names them rather than dropping them."""
    missed = counters.profiled_not_placed + (counters.stalls.profiled_not_placed if counters.stalls else [])
    if not missed:
        return ""
    shown = ", ".join(missed[:3]) + (f" and {len(missed) - 3} more" if len(missed) > 3 else "")
    return (f"; {len(missed)} profiled launch configuration{'s' * (len(missed) != 1)} found no timeline launch to "
            f"sit on, {'their' if len(missed) != 1 else 'its'} counters unused ({shown})")


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
    """The run's findings, most important first (see the module docstring)."""
    rows = (_late_rank(summary) + _scaling(summary) + _time(summary) + _top_kernels(summary) + _ssm(summary)
            + _tensor_instructions(summary, info) + _headroom(summary) + _host(summary) + _syncs(info)
            + _iteration(summary) + _checks(summary, info))
    return pd.DataFrame(rows, columns=COLUMNS)


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
        checked = f"checked: {', '.join(f'{k} {100 * v:.0f} %' for k, v in shares.items())} of kernel time"
    else:
        checked = "not checked (written before the self-checks, schema 1)"
    counted = (f"{counters.mode} ({counters.tool or 'no tool'}), covering "
               f"{100 * coverage.counter_time_fraction:.0f} % of kernel time; {checked}"
               if profiled_with_counters(info) else "none (timeline only: --counters none)")
    rows = [
        ("source", origin),
        ("measured", info.created or "unknown"),
        ("GPU", f"{gpu.name} ({_known(gpu.sm_count)} SMs, {_sm_clock(info)}, memory clock "
                f"{_known(clocks.memory_mhz)} MHz)"),
        ("host", ", ".join(f"{k} {v}" for k, v in host.items()) if host else "not recorded"),
        ("versions", versions or "not recorded"),
        ("workload", f"{workload.name} --preset {workload.preset}"
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


def _known(value) -> str:
    return "?" if value is None else str(value)


def _cost(collectors: CollectorsSection) -> str:
    """What profiling the run cost: the harness, each Nsight Compute pass (wall time, launches profiled x replay
    passes each, GiB restored per replay where recorded), what the passes spent outside the replayed iterations
    (where stamped) and the host's cost of a tiny launch."""
    harness, counters = collectors.harness, collectors.counters
    text = f"harness {harness.wall_s:.0f} s"
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


def _host_share(a: pd.Series, b: pd.Series) -> str:
    """A note where the host wait, not the kernels, moved the step."""
    busy, host = a["gpu_busy_ms"] - b["gpu_busy_ms"], a["host_wait_ms"] - b["host_wait_ms"]
    if abs(host) > abs(busy):
        return f" Most of the step's change is the host wait ({host:+.1f} ms against {busy:+.1f} ms of GPU busy " \
               "time): the GPUs explain the smaller part."
    return ""


def _step_verdict(speedup: pd.DataFrame | None) -> str:
    """`compare.step_speedup` in words: B faster / slower than A with the interval, or within noise."""
    if speedup is None:
        return ""
    s = speedup.iloc[0]
    interval = f"95 % interval {s['speedup_low']:.3f}-{s['speedup_high']:.3f}x over {s['steps_a']} and " \
               f"{s['steps_b']} kept steps"
    if s["vs_noise"] in (FASTER, SLOWER):
        return f" B is {s['vs_noise']} than A: {s['speedup']:.3f}x ({interval})."
    return f" A difference of {s['speedup']:.3f}x is {s['vs_noise']} ({interval}; one configuration's step " \
           f"moves {RERUN_SPREAD_PCT} % between runs)."


def compare_findings(steps: pd.DataFrame, categories: pd.DataFrame, launches: pd.DataFrame,
                     speedup: pd.DataFrame | None = None) -> pd.DataFrame:
    """Findings of a comparison (frames of `compare.step_split_table`, `compare_categories_launches`,
    `compare_launches` and `compare.step_speedup`, A first): the step, its speedup judged against its noise, and
    its split, the work both runs do alike and how its time changed, and what differs in launches (never a
    speedup across different launch counts)."""
    from ssmprof.analysis.change.compare import SAME  # compare imports nothing from here

    a, b = steps.iloc[0], steps.iloc[1]
    verdict = f" ({speedup.iloc[0]['vs_noise']})" if speedup is not None else ""
    rows = [{"topic": "step", "value": f"{a['step_ms'] / b['step_ms']:.2f}x step{verdict}",
             "finding": f"Step {a['step_ms']:.1f} ms (A) vs {b['step_ms']:.1f} ms (B).{_step_verdict(speedup)} GPU "
                        f"busy {a['gpu_busy_ms']:.1f} vs {b['gpu_busy_ms']:.1f} ms, waiting for the host "
                        f"{a['host_wait_ms']:.1f} vs {b['host_wait_ms']:.1f} ms." + _host_share(a, b),
             "anchor": "steps"}]
    same = launches[launches["status"] == SAME]
    if len(same):
        time_a, time_b = same["time_ns_a"].sum(), same["time_ns_b"].sum()
        share = time_a / launches["time_ns_a"].sum()
        rows.append({"topic": "same work", "value": f"{time_a / time_b:.2f}x",
                     "finding": f"{len(same)} kernel configurations launch the same number of times in both runs "
                                f"({100 * share:.0f} % of A's kernel time): {_ms(time_a)} in A, {_ms(time_b)} in B.",
                     "anchor": "kernels"})
        big = same[same["time_ns_a"] >= 0.01 * launches["time_ns_a"].sum()]
        if len(big):
            fast, slow = big.loc[big["speedup"].idxmax()], big.loc[big["speedup"].idxmin()]
            rows.append({"topic": "largest changes", "value": f"{fast['speedup']:.2f}x / {slow['speedup']:.2f}x",
                         "finding": f"Among those above 1 % of A's time, the largest speedup is {fast['kernel_name']} "
                                    f"({fast['phase']}, {fast['speedup']:.2f}x{_kernel_interval(fast)}), the "
                                    f"smallest {slow['kernel_name']} ({slow['phase']}, {slow['speedup']:.2f}x"
                                    f"{_kernel_interval(slow)}).", "anchor": "kernels"})
    moved = launches[launches["status"] != SAME]
    if len(moved):
        rows.append({"topic": "launches differ", "value": f"{len(moved)} configurations",
                     "finding": f"{len(moved)} kernel configurations launch a different number of times "
                                f"({_ms(moved['time_ns_a'].sum())} in A, {_ms(moved['time_ns_b'].sum())} in B); "
                                f"compare them per launch, not in total. {_moved_kernels(moved)}",
                     "anchor": "kernels"})
    differ = categories[categories["speedup"].isna()]
    if len(differ):
        rows.append({"topic": "categories", "value": f"{len(differ)} categories",
                     "finding": "Launch counts differ in " + ", ".join(differ["category"]) + ": no speedup shown "
                                "for them.", "anchor": "categories"})
    return pd.DataFrame(rows, columns=COLUMNS)


def _kernel_interval(row: pd.Series) -> str:
    """`, 1.02-1.05x over launches: faster` where the row carries an interval (`compare.with_kernel_intervals`)."""
    if "speedup_low" not in row or row["speedup_low"] != row["speedup_low"]:
        return ""
    return f", {row['speedup_low']:.2f}-{row['speedup_high']:.2f}x over {row['basis']}: {row['vs_noise']}"


def _moved_kernels(moved: pd.DataFrame, named: int = 4) -> str:
    """Which kernels' launches moved: first those whose launches went to another kernel or launch shape of the
    same op (a partner in `moved_to`: autotuning or a library's heuristic chose differently), by name; then
    those whose count changed without a partner, each with its two counts."""
    partnered = moved[moved["moved_to"].astype(bool)]
    alone = moved[~moved["moved_to"].astype(bool)]
    text = ""
    if len(partnered):
        names = list(dict.fromkeys(partnered["kernel_name"]))
        text += f"Launches moved to another launch shape or kernel of the same op in {len(names)} kernels: " \
                + ", ".join(names[:named]) + (f" and {len(names) - named} more" if len(names) > named else "") + ". "
    if len(alone):
        counts = [f"{r.kernel_name} ({r.phase}) {r.launches_a} vs {r.launches_b}"
                  for r in alone.head(named).itertuples()]
        text += "Launch count changed without such a partner: " + ", ".join(counts) \
                + (f" and {len(alone) - named} more" if len(alone) > named else "") + "."
    return text.strip()


def suite_findings(category_shares: pd.DataFrame, ssm_kernels: pd.DataFrame, runs: dict[str, pd.DataFrame]) -> \
        pd.DataFrame:
    """Findings across a suite (frames of `analysis.summaries.suite`, and each run's own findings by workload): the
    largest category of each workload, the SSM kernels' range of share, bound and roof, and host-bound runs."""
    rows = []
    shares = category_shares.set_index("workload")
    largest = [f"{w} {shares.loc[w].idxmax()} ({shares.loc[w].max():.0f} %)" for w in shares.index]
    rows.append({"topic": "where the time goes", "value": f"{len(shares)} workloads",
                 "finding": "Largest category per workload: " + ", ".join(largest) + ".",
                 "anchor": "category_shares"})
    if len(ssm_kernels):
        s = ssm_kernels
        low, high = s.loc[s["ssm_time_pct"].idxmin()], s.loc[s["ssm_time_pct"].idxmax()]
        bound = ", ".join(f"{r.workload} {r.memory_bound_pct:.0f} %" if pd.notna(r.memory_bound_pct)
                          else f"{r.workload} unknown (no counters)" for r in s.itertuples())
        checked = s[s["counters_checked"]]
        roof = (f"at {_span(checked['pct_of_roof'].min(), checked['pct_of_roof'].max())} of the roof where "
                f"counters are checked ({', '.join(checked['workload'])})" if len(checked) else
                "roof unknown (no run's counters are checked)")
        text = f"SSM kernels take {low['ssm_time_pct']:.0f} % ({low['workload']}) to {high['ssm_time_pct']:.0f} % " \
               f"({high['workload']}) of kernel time, {roof}, with DRAM throughput " \
               f"{_span(s['dram_pct_of_peak'].min(), s['dram_pct_of_peak'].max())} of peak (Nsight Compute). " \
               "Share of SSM time memory-bound: " \
               f"{bound}."
        rows.append({"topic": "SSM kernels", "value": _span(low['ssm_time_pct'], high['ssm_time_pct']),
                     "finding": text, "anchor": "ssm_kernels"})
    host = {w: f for w, f in runs.items() if (f["topic"] == "host").any()}
    host_bound = [w for w, f in host.items() if f.loc[f["topic"] == "host", "finding"].iloc[0].startswith("Host-bound")]
    busy = {w: f.loc[f["topic"] == "host", "value"].iloc[0] for w, f in host.items()}
    rows.append({"topic": "host", "value": f"{len(host_bound)} host-bound",
                 "finding": ("Host-bound: " + ", ".join(host_bound) + ". " if host_bound else "No run is host-bound. ")
                 + "GPU busy share of the step: "
                 + ", ".join(f"{w} {v.removesuffix(' busy').replace('busy all step', 'all of it')}"
                             for w, v in busy.items())
                 + ".", "anchor": "step_times"})
    counters = {w: f.loc[f["topic"] == "counters", "finding"].iloc[0] for w, f in runs.items()
                if (f["topic"] == "counters").any()}
    without = [w for w, text in counters.items() if text.startswith(NO_COUNTERS)]
    counters = {w: text for w, text in counters.items() if w not in without}
    unchecked = [w for w, text in counters.items() if "unchecked" in text]
    removed = [w for w, text in counters.items() if "removed" in text]
    text = (f"Counters unchecked (written before the self-checks) in {len(unchecked)} of {len(counters)} runs"
            + (f": {', '.join(unchecked)}" if len(unchecked) < len(counters) else "") + ". "
            if unchecked else "Counters checked in the one run with counters. " if len(counters) == 1
            else f"Counters checked in all {len(counters)} runs. ")
    text += (f"The self-checks removed counters in {', '.join(removed)} (see each run's findings)." if removed else
             "The self-checks removed no counters." if len(unchecked) < len(counters) else "")
    text += f" No counters in {', '.join(without)}." if without else ""
    rows.append({"topic": "counters", "value": f"{len(counters) - len(unchecked)} checked",
                 "finding": text.strip(), "anchor": "step_times"})
    return pd.DataFrame(rows, columns=COLUMNS)


def parallel_findings(scaling: pd.DataFrame, parallel: pd.DataFrame, late: pd.DataFrame) -> pd.DataFrame:
    """What a page of multi-GPU runs answers first (`communication.scaling`, `communication.parallel_overview`,
    `ranks.late_ranks`): how well each run scales over its single-GPU run (speedup and efficiency with their
    intervals), where its communication time goes (transfer no compute hides against waiting for the other
    ranks), which rank the others wait for, and whether the collectives are the ones the model's structure
    predicts; each headline a number that answers its question."""
    rows = [_scaling_overview(scaling)]
    runs = [f"{r.run} {r.exposed_transfer_ms:.1f} ms transfer, {r.wait_ms:.1f} ms waiting"
            for r in parallel.itertuples()]
    waiting_more = int((parallel["wait_ms"] > parallel["exposed_transfer_ms"]).sum())
    rows.append({"topic": "communication", "anchor": "parallel",
                 "value": f"{_ms_span(parallel['exposed_transfer_ms'])} transfer, "
                          f"{_ms_span(parallel['wait_ms'])} waiting",
                 "finding": "Communication per step no compute hides (the larger rank's, forward and backward): "
                            + "; ".join(runs) + f". Waiting for the other ranks outweighs the transfer in "
                            f"{waiting_more} of {len(parallel)} runs."})
    if len(late):
        worst = late.iloc[0]
        others = "; ".join(f"{r.run} rank {r.late_rank} ({r.cost_pct:.0f} %)" for r in late.iloc[1:].itertuples())
        rows.append({"topic": "late rank", "anchor": "late_ranks",
                     "value": f"rank {worst['late_rank']} late: {worst['cost_pct']:.0f} % of an iteration",
                     "finding": f"In {worst['run']} the others wait for rank {worst['late_rank']}: "
                                f"{worst['cost_ms']:.1f} ms of its {worst['iteration_ms']:.1f} ms iteration (noise "
                                f"{worst['cost_noise_ms']:.1f} ms); what made it late: {worst['cause'].split(';')[0]}."
                                + (f" Late beyond noise elsewhere: {others}." if others else "")})
    else:
        rows.append({"topic": "late rank", "anchor": "parallel", "value": "no rank late",
                     "finding": "No run has a rank that costs the others more than its noise."})
    predicted = int(parallel["as_predicted"].sum())
    rows.append({"topic": "collectives", "anchor": "parallel",
                 "value": f"{predicted} of {len(parallel)} as predicted",
                 "finding": f"Collectives per layer as the model's structure predicts in {predicted} of "
                            f"{len(parallel)} runs; the layers' largest collectives reach "
                            f"{parallel['busbw_gb_per_s_min'].min():.0f}-{parallel['busbw_gb_per_s_max'].max():.0f}"
                            " GB/s bus bandwidth."})
    return pd.DataFrame(rows, columns=COLUMNS)


def _scaling_overview(scaling: pd.DataFrame) -> dict:
    """The scaling finding: each multi-GPU run's speedup and efficiency over its single-GPU run, with intervals;
    the runs without a single-GPU run beside them named, as they have no speedup."""
    multi = scaling[scaling["world_size"] > 1]
    measured, alone = multi[multi["speedup"].notna()], multi[multi["speedup"].isna()]
    gpus = _span(multi["world_size"].min(), multi["world_size"].max(), "")
    runs = [f"{r.run} {r.speedup:.2f}x ({r.speedup_low:.2f}-{r.speedup_high:.2f}x), {r.efficiency_pct:.0f} % "
            f"efficiency ({r.efficiency_pct_low:.0f}-{r.efficiency_pct_high:.0f} %)" for r in measured.itertuples()]
    text = (f"Speedup over the same workload's single-GPU run ({100 * CONFIDENCE:.0f} % intervals of the two runs' "
            "timed steps): " + "; ".join(runs) + "." if runs else "No multi-GPU run has its single-GPU run here.")
    text += f" No single-GPU run here for {', '.join(alone['run'])}: no speedup." if len(alone) and runs else ""
    if not runs:
        return {"topic": "scaling", "anchor": "scaling", "value": "no speedup measured", "finding": text}
    speedups = _span(measured["speedup"].min(), measured["speedup"].max(), "x", "{:.2f}")
    efficiency = _span(measured["efficiency_pct"].min(), measured["efficiency_pct"].max())
    return {"topic": "scaling", "anchor": "scaling", "finding": text,
            "value": f"{speedups} on {gpus} GPUs ({efficiency} efficiency)"}


def _ms_span(values: pd.Series) -> str:
    return _span(values.min(), values.max(), " ms")
