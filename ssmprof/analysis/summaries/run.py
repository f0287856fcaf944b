"""Every analysis of one run, as the typed summary of its frames (what reports draw and what `--csv` writes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pandas as pd

from ssmprof.analysis.common.sections import Summary
from ssmprof.analysis.findings.phrases import pct_text
from ssmprof.analysis.findings.run import findings, provenance
from ssmprof.analysis.launches.categories import SSM
from ssmprof.analysis.launches.frame import has_counters
from ssmprof.analysis.limits.analytic_work import analytic_vs_measured, forward_model
from ssmprof.analysis.limits.caches import cache_summary
from ssmprof.analysis.limits.instruction_bounds import instruction_bounds
from ssmprof.analysis.limits.limiters import limiter_summary, limiters, stall_summary
from ssmprof.analysis.limits.roofline import (
    calibration_defects,
    defects_by_kernel,
    defects_note,
    headroom,
    headroom_summary,
    l2_peak_gb_s,
    roofline,
    roofline_points,
    roofline_summary,
)
from ssmprof.analysis.limits.ssd_dataflow import FLOW_COLUMNS, fusion_estimate, ssd_dataflow, ssd_layers
from ssmprof.analysis.limits.tensor_vector import (
    STUDY_WORKLOAD,
    class_summary,
    class_thresholds,
    classify,
    instruction_summary,
    table_ii,
    table_ii_beside_study,
    table_ii_causes,
)
from ssmprof.analysis.step.breakdown import breakdown, by_category, other_share_warning, top_kernels
from ssmprof.analysis.step.communication import (
    bus_bandwidth,
    collective_counts,
    described_rank,
    exposed_communication,
    one_rank,
    per_rank,
    project_communication,
    rank_imbalance,
)
from ssmprof.analysis.step.cuda_graphs import graph_gain
from ssmprof.analysis.step.host import host_summary, slow_iteration_note
from ssmprof.analysis.step.host_time import host_categories, host_sites, host_time_summary, late_rank_sites, rank_hosts
from ssmprof.analysis.step.profiled_iteration import iteration_check, iteration_note
from ssmprof.analysis.step.ranks import collective_split, late_rank, rank_busy, rank_host, scaling_efficiency
from ssmprof.analysis.summaries.suite import dram_beside_study
from ssmprof.analysis.trust.counter_checks import describe_removed, gemm_work, status_table
from ssmprof.analysis.trust.lent_by_grid import counter_pass_costs, lent_families
from ssmprof.analysis.trust.noise import STEADY_PCT, kept_steps, steady, step_interval, steps_to_steady
from ssmprof.analysis.trust.provenance import provenance_mismatches
from ssmprof.hardware import Ceilings
from ssmprof.schema import SCRIPT_PRESET, Link, Run, RunInfo


def analyze(run: Run, ceilings: Ceilings | None, origin: str | None = None,
            links: pd.DataFrame | None = None, single: RunInfo | None = None) -> Summary:
    """The summary frames of one run, its kernels already the `analysis_frame` (`pipeline.loading.load_run`),
    with its findings in words and its provenance (`origin`: where the run directory comes from). A
    multi-rank run's kernel frames describe one rank (`communication.described_rank`) and its communication frames
    every rank (`links`: the table their projection covers); `single`: its single-GPU twin, whose steps its
    scaling efficiency is judged against (`ranks.scaling_efficiency`)."""
    kernels = one_rank(run.kernels, run.info)
    host, rank_busy, late = _host_tables(run)
    work = gemm_work(kernels)  # GEMMs with checked counters (none in runs written before the checks)
    counters = run.info.collectors.counters  # the plan's families and predicted cost (none in runs before them)
    summary = Summary(
        breakdown=breakdown(kernels), by_category=by_category(kernels), top_kernels=top_kernels(kernels),
        caches=cache_summary(kernels), counter_checks=status_table(kernels),
        profiled_iteration=iteration_check(run.kernels, run.info), host=host, **_host_time(run, host),
        rank_busy=rank_busy, late_rank=late, rank_hosts=rank_hosts(run.info),
        late_rank_sites=late_rank_sites(run.info, int(late["late_rank"].iloc[0])) if late is not None else None,
        # `--cuda-graphs`: the measured gain beside the host wait it was estimated from
        cuda_graphs=graph_gain(run.info.harness.model_dump(), host), gemm_work=work if len(work) else None,
        lent_by_grid=lent_families(counters), counter_pass_costs=counter_pass_costs(counters),
        scaling_efficiency=scaling_efficiency(run.info, single) if single is not None and run.info.parallel else None)
    counted = has_counters(kernels)
    if counted:
        summary = _limiter_tables(summary, kernels, run.info, ceilings)
    if counted and ceilings is not None:
        summary = _roofline_tables(summary, kernels, run.info, ceilings)
    if counted:
        summary = _class_tables(summary, kernels, run.info, ceilings)
        summary = _model_check(summary, kernels, run.info)
    summary = _communication_tables(summary, run.kernels, run.info, links)
    return replace(summary, findings=findings(summary, run.info),
                   provenance=provenance(run.info, origin or (f"run directory {run.path}" if run.path else "run")))


def _limiter_tables(summary: Summary, kernels: pd.DataFrame, info: RunInfo, ceilings: Ceilings | None) -> Summary:
    """What limits the kernels (DRAM and L2 against the roofline's ceilings), their instruction-level bounds and
    their stalls. The per-launch verdicts are let go on return: at a million launches they are hundreds of
    megabytes the tables do not need."""
    limited = limiters(kernels, evidence=False, ceilings=ceilings)  # the summaries word the launches they show
    stalled = kernels["stall_warps_per_issue"].notna().any()
    return replace(summary, limiters=limiter_summary(limited),
                   limiters_ssm=limiter_summary(limited, category=SSM),
                   instruction_bounds=instruction_bounds(kernels, info.gpu.model_dump()),
                   stalls=stall_summary(kernels) if stalled else None)


def _roofline_tables(summary: Summary, kernels: pd.DataFrame, info: RunInfo, ceilings: Ceilings) -> Summary:
    """The roofline per launch and its summaries, headroom, calibration defects and the SSD chain's data flow."""
    per_kernel = roofline(kernels, ceilings)
    saved = headroom(per_kernel, ceilings.dram_gb_s)
    defects = calibration_defects(ceilings, kernels)  # launches faster than a ceiling: shown, never raising it
    summary = replace(
        summary,
        roofline=per_kernel[["launch_idx", "kernel_name", "phase", "category", "path", "duration_ns", "flops",
                             "ai_dram", "ai_l2", "ai_l1", "flop_per_s", "pct_of_roof", "pct_of_dram_peak", "verdict",
                             "roof_limiter", "peak_flop_per_s", "ridge_ai", "l2_ridge_ai", "ceiling_source"]],
        roofline_summary=roofline_summary(per_kernel),
        roofline_points=roofline_points(per_kernel),  # what the chart draws, whatever the launch count
        headroom=headroom_summary(saved), headroom_by_category=headroom_summary(saved, by="category"),
        calibration_defects=defects_by_kernel(defects) if len(defects) else None)
    flow = ssd_dataflow(kernels, info.workload.config)
    if flow is None:
        return summary
    # the Mamba-2 SSD chain's inter-kernel bytes and the fused chain's what-if
    fusion = fusion_estimate(flow, info.workload.config, ceilings, ssd_layers(kernels), l2_peak_gb_s(kernels))
    return replace(summary, ssd_dataflow=flow[FLOW_COLUMNS], ssd_fusion=fusion if len(fusion) else None)


def _class_tables(summary: Summary, kernels: pd.DataFrame, info: RunInfo, ceilings: Ceilings | None) -> Summary:
    """Tensor vs vector classes, Table II (beside the study's, with the causes of the difference and the SSM DRAM
    use, for the study's model) and tensor instructions."""
    classified = classify(kernels, ceilings)
    instructions = instruction_summary(classified)
    summary = replace(
        summary,
        tensor_vector=classified[["kernel_name", "phase", "class", "tensor_time_share", "flop_class", "tensor_share",
                                  "near_boundary", "recomputed", "tensor_instruction", "flops_tensor", "flops_vector",
                                  "duration_ns"]],
        tensor_vector_ssm=class_summary(classified),
        # Hopper only: other chips do not split their tensor ops by instruction
        tensor_instructions=instructions if len(instructions) else None)
    if not (classified["category"] == SSM).any():
        return summary
    study = info.workload.name == STUDY_WORKLOAD
    return replace(
        summary, table_ii=table_ii_beside_study(classified) if study else table_ii(classified),
        tensor_vector_thresholds=class_thresholds(classified),
        table_ii_causes=table_ii_causes(classified, info.workload.config, info.versions) if study else None,
        dram_beside_study=dram_beside_study(kernels[kernels["category"] == SSM], ceilings)
        if study and ceilings is not None else None)


def _model_check(summary: Summary, kernels: pd.DataFrame, info: RunInfo) -> Summary:
    """The sequence mixer's forward kernels against its analytic model (`analytic_work.forward_model`; none for a
    mixer without one)."""
    model = forward_model(info.workload.config)
    return summary if model is None else replace(summary, ssd_analytic_vs_measured=analytic_vs_measured(kernels, model))


def _communication_tables(summary: Summary, kernels: pd.DataFrame, info: RunInfo, links: pd.DataFrame | None,
                          world_sizes: tuple[int, ...] = (2, 4, 8, 16, 64)) -> Summary:
    """The communication section of a multi-rank run (none for a single-GPU run), from every rank's kernels; its
    projection to the GPU counts `world_sizes` where the table of `links` is given."""
    parallel = info.parallel
    if not parallel:
        return summary
    return replace(
        summary, per_rank=per_rank(kernels, info),
        collective_counts=collective_counts(kernels, parallel.sequence_parallel),
        bus_bandwidth=bus_bandwidth(kernels, parallel.tp, (parallel.link or Link()).gb_s),
        exposed_communication=exposed_communication(kernels), rank_imbalance=rank_imbalance(kernels),
        communication_projection=project_communication(kernels, links, list(world_sizes))
        if links is not None else None)


def _host_tables(run: Run) -> tuple[pd.DataFrame, pd.DataFrame | None, pd.DataFrame | None]:
    """The host table; for a multi-rank run read per rank (`ranks.rank_host`), with each rank's busy time
    (`rank_busy`) and the late rank (`late_rank`, None where no rank is late)."""
    kernels = one_rank(run.kernels, run.info)
    steps = step_interval(kept_steps(run.info)) if run.info.harness.step_times_ms else None
    host = host_summary(kernels, run.info.harness.step_ms,
                        run.info.collectors.harness.host_launch_us,  # None before runs recorded it
                        (steps.low, steps.high) if steps is not None and steps.samples > 1 else None)
    rank = described_rank(run.info)
    if rank is None:
        return host, None, None
    late = late_rank(run.kernels, run.info)
    return rank_host(host, run.kernels, rank, late), rank_busy(run.kernels), late if len(late) else None


def _host_time(run: Run, host: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Where the host's time went in the sampled steps (`host_time`), where the run sampled them."""
    sampled = run.info.harness.host_time
    if sampled is None or sampled.missing:  # the host finding says why it is missing
        return {}
    return {"host_time": host_time_summary(sampled, float(host["gpu_idle_ms"].iloc[0])),
            "host_categories": host_categories(sampled), "host_sites": host_sites(sampled)}


def warnings_for(run: Run, summary: Summary, ceiling_notes: Sequence[str] = ()) -> list[str]:
    """The warnings shown above a run's tables, read from its `summary` (`analyze`) and run.json: the other
    category's share, a host-bound step, an unrepresentative iteration, collectives' waiting, counters unchecked,
    thin or mismatched, checks that removed counters, timed steps that never steadied (a script's: how many would);
    then `ceiling_notes` (what
    `hardware.run_ceilings` said of the ceilings) and the calibration defects."""
    kernels = one_rank(run.kernels, run.info)
    warning = other_share_warning(kernels)
    notes = [warning] if warning else []
    host = summary.host.iloc[0]
    if host["verdict"] == "host-bound":
        notes.append(f"host-bound: the GPU runs kernels {host['gpu_busy_pct']:.0f} % of the "
                     f"{host['step_ms']:.1f} ms step and waits for the host the rest ({host['launches']} launches, "
                     f"{host['short_launch_pct']:.0f} % of them under 10 us); a faster GPU shortens only the busy part")
    elif host["verdict"] == "host-limited":
        notes.append(f"host-limited: {host['host_cost']}")
    if run.info.harness.steps_capped:
        steps = step_interval(kept_steps(run.info))
        notes.append(f"the {steps.samples} timed steps (the harness's cap) leave the median step "
                     f"{steps.value:.1f} ms with a 95 % interval of {steps.low:.1f}-{steps.high:.1f} ms, wider than "
                     f"{STEADY_PCT:.0f} % of it: the host paces these steps unevenly")
    elif run.info.workload.preset == SCRIPT_PRESET and not steady(kept_steps(run.info)):
        steps = step_interval(kept_steps(run.info))
        notes.append(f"the script's {steps.samples} timed steps leave the median step {steps.value:.1f} ms with a "
                     f"95 % interval of {steps.low:.1f}-{steps.high:.1f} ms, wider than {STEADY_PCT:.0f} % of it; "
                     f"about {steps_to_steady(kept_steps(run.info))} timed steps would pin it: profile with --steps "
                     f"{steps_to_steady(kept_steps(run.info))} (and give the script the iterations that needs)")
    slow = (iteration_note(summary.profiled_iteration)  # every rank's: a wait spans them all
            or slow_iteration_note(host["gpu_busy_ms"], host["step_ms"]))  # the busy time host_summary measured
    if slow:
        notes.append(slow)
    rank = described_rank(run.info)
    if rank is not None:  # a collective's kernel also waits for the last rank to reach it: busy, moving nothing
        transfer, waiting = collective_split(run.kernels, rank)
        notes.append(f"rank {rank}'s collectives took {transfer + waiting:.1f} ms of the profiled iteration: "
                     f"{transfer:.1f} ms transfer, {waiting:.1f} ms waiting for the other ranks")
    status = kernels["counter_status"]
    if (status == "unchecked").any():
        notes.append("counters unchecked: a schema-1 run, whose counters were joined by short name, grid and block "
                     "size and may belong to another launch; profile again for checked counters")
    if run.info.coverage.counter_time_fraction < 0.95:
        notes.append(f"counters cover {pct_text(100 * run.info.coverage.counter_time_fraction)} of kernel time "
                     "(profile with --counters sampled or all for the roofline and cache views)")
    notes += provenance_mismatches(run.info.provenance, kernels["kernel_name"], run.info.gpu.name != "cpu")
    removed = describe_removed(run.info.checks.rejected if run.info.checks else [], kernels["duration_ns"].sum())
    if removed:
        notes.append(f"self-checks {removed}")
    notes += ceiling_notes
    defects = defects_note(summary.calibration_defects) if summary.calibration_defects is not None else None
    return notes + ([defects] if defects else [])
