"""Across the workloads of a suite: where each one's time goes, and how its SSM kernels use the GPU.

Every function takes the runs' `analysis_frame`s by workload; `overview` the runs themselves, and assembles the
suite's tables into a `SuiteOverview`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from ssmprof.analysis.change.projection import project_categories, project_kernels, projection_error
from ssmprof.analysis.common.sections import CHART_ONLY, Sections, Summary
from ssmprof.analysis.findings.parallel import parallel_findings
from ssmprof.analysis.findings.suite import suite_findings
from ssmprof.analysis.launches.categories import CATEGORIES, SSM
from ssmprof.analysis.launches.frame import has_counters, profiled_with_counters, time_weighted
from ssmprof.analysis.limits.caches import cache_summary
from ssmprof.analysis.limits.roofline import roofline, roofline_points, roofline_summary
from ssmprof.analysis.limits.ssd_dataflow import FLUSHED, KEPT, dataflow_by_cache, ssd_dataflow
from ssmprof.analysis.limits.tensor_vector import (
    BOTH,
    FLOP_CLASSES,
    MMA_SYNC,
    STUDY,
    STUDY_DRAM_GB_S,
    STUDY_SSM_DRAM_PCT,
    class_summary,
    classify,
    table_ii_beside_study,
    table_ii_causes,
    tensor_instruction,
)
from ssmprof.analysis.step.communication import one_rank, parallel_overview, scaling
from ssmprof.analysis.step.host import busy_ns, slow_iteration
from ssmprof.analysis.step.ranks import late_rank_gap_groups, late_ranks
from ssmprof.hardware import Ceilings
from ssmprof.schema import CHECKED_STATUSES, PHASES, Run, RunInfo


@dataclass(frozen=True, kw_only=True, repr=False)
class SuiteOverview(Sections):
    """The overview of several runs (`overview`), one field a section: what a suite's page draws and `--csv`
    writes, under the field's name. A section is None where the runs cannot have it: the SSD chain with the
    caches flushed and kept where no workload was measured in both modes; scaling, communication, the late ranks
    and their findings where no run is multi-GPU. Fields are in the order of the suite's CSV files."""

    step_times: pd.DataFrame
    category_shares: pd.DataFrame
    ssm_kernels: pd.DataFrame
    ssm_roofline: pd.DataFrame = field(metadata=CHART_ONLY)  # the points of the suite's roofline chart
    ssd_dataflow_by_cache: pd.DataFrame | None = None
    scaling: pd.DataFrame | None = None
    parallel: pd.DataFrame | None = None
    late_ranks: pd.DataFrame | None = None
    late_rank_gaps: pd.DataFrame | None = None
    parallel_findings: pd.DataFrame | None = None
    findings: pd.DataFrame


def overview(runs: dict[str, Run], ceilings: dict[str, Ceilings | None],
             summaries: dict[str, Summary]) -> SuiteOverview:
    """The overview of several runs (by label: every rank's kernels, each run's own ceilings and its summary,
    `summaries.run.analyze`): step times, category shares, the SSM kernels and their roofline, the SSD chain with the
    caches flushed and kept, for multi-GPU runs scaling, communication, the late ranks and where their launch gaps
    exceed the others' (`ranks.late_rank_gap_groups`), and the findings."""
    kernels = {label: one_rank(run.kernels, run.info) for label, run in runs.items()}
    infos = {label: run.info for label, run in runs.items()}
    roofs = {label: limits for label, limits in ceilings.items() if limits is not None}
    counted = {label: kernels[label] for label in roofs}
    shares, ssm = category_shares(kernels), ssm_kernels(counted, roofs)
    suite = SuiteOverview(
        step_times=step_times(infos), category_shares=shares, ssm_kernels=ssm,
        ssm_roofline=roofline_points(ssm_roofline(counted, roofs), by=("workload",)),
        ssd_dataflow_by_cache=ssd_dataflow_by_cache(kernels, infos),
        findings=suite_findings(shares, ssm, {label: summary.findings for label, summary in summaries.items()},
                                {label: summary.host for label, summary in summaries.items()}))
    if any(info.parallel is not None for info in infos.values()):
        scaled, communication = scaling(infos), parallel_overview(runs)  # every rank's kernels, set against each other
        late = late_ranks({label: summary.late_rank for label, summary in summaries.items()
                           if summary.late_rank is not None})
        gaps = late_rank_gap_groups({label: run.kernels for label, run in runs.items()}, late)
        suite = replace(suite, scaling=scaled, parallel=communication, late_ranks=late, late_rank_gaps=gaps,
                        parallel_findings=parallel_findings(scaled, communication, late))
    return suite


def category_shares(runs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per workload (in the given order): % of its kernel time in each category."""
    shares = {}
    for workload, frame in runs.items():
        shares[workload] = 100 * frame.groupby("category")["duration_ns"].sum() / frame["duration_ns"].sum()
    table = pd.DataFrame(shares).T.fillna(0.0)
    table = table[[c for c in CATEGORIES if c in table.columns]].rename_axis("workload").reset_index()
    table.columns.name = None
    return table


# what only counters give: NaN in a row of a run without them, so that a suite of such runs still has the columns
_COUNTED = ("dram_pct_of_peak", "l1_hit_pct", "l2_hit_pct", "pct_of_roof", "memory_bound_pct")


def ssm_kernels(runs: dict[str, pd.DataFrame], ceilings: dict[str, Ceilings]) -> pd.DataFrame:
    """One row per workload with SSM kernels: their share of kernel time, time-weighted DRAM % of peak,
    L1/L2 hit rates and % of roof, the share of SSM time in kernels doing their tensor work on mma.sync (Hopper;
    NaN where the chip does not split it), and the share of forward / backward SSM time per tensor/vector
    class."""
    rows = []
    for workload, frame in runs.items():
        ssm = frame[frame["category"] == SSM]
        if ssm.empty:
            continue
        if not has_counters(ssm):  # a run without counters (--counters none): its time share only
            rows.append({"workload": workload, "counters_checked": False,
                         "ssm_time_pct": 100 * ssm["duration_ns"].sum() / frame["duration_ns"].sum(),
                         **dict.fromkeys(_COUNTED, float("nan"))})
            continue
        caches = cache_summary(ssm).iloc[0]
        roof = roofline_summary(roofline(ssm, ceilings[workload])).iloc[0]
        row = {"workload": workload, "ssm_time_pct": 100 * ssm["duration_ns"].sum() / frame["duration_ns"].sum(),
               "dram_pct_of_peak": caches["dram_throughput_pct"], "l1_hit_pct": caches["l1_hit_rate_pct"],
               "l2_hit_pct": caches["l2_hit_rate_pct"], "pct_of_roof": roof["pct_of_roof"],
               "memory_bound_pct": 100 * roof["memory_bound_share"],
               # unchecked (schema-1) counters may belong to other launches: their roof % can exceed 100
               "counters_checked": bool(ssm["counter_status"].isin(CHECKED_STATUSES).any())}
        family = tensor_instruction(ssm)
        row["mma_sync_pct"] = (100 * ssm.loc[family.isin((MMA_SYNC, BOTH)), "duration_ns"].sum()
                               / ssm["duration_ns"].sum() if (family != "").any() else float("nan"))
        classes = class_summary(classify(ssm, ceilings[workload]))
        for phase in PHASES[:2]:  # forward, backward (the optimizer runs no SSM kernels)
            for name in FLOP_CLASSES:
                hit = classes[(classes["phase"] == phase) & (classes["class"] == name)]
                row[f"{phase} {name} %"] = 100 * float(hit["time_share"].iloc[0]) if len(hit) else 0.0
        rows.append(row)
    return pd.DataFrame(rows)


def ssm_roofline(runs: dict[str, pd.DataFrame], ceilings: dict[str, Ceilings]) -> pd.DataFrame:
    """Every SSM kernel launch with counters of every workload, on its GPU's roofline."""
    frames = []
    for workload, frame in runs.items():
        ssm = frame[(frame["category"] == SSM) & frame["ncu_duration_ns"].notna()]
        if len(ssm):
            frames.append(roofline(ssm, ceilings[workload]).assign(workload=workload))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def step_times(infos: dict[str, RunInfo]) -> pd.DataFrame:
    """Harness numbers and profiling cost of each run: step time, throughput, peak memory, collector wall."""
    rows = []
    for workload, info in infos.items():
        harness, collectors = info.harness, info.collectors
        rows.append({"workload": workload, "gpu": info.gpu.name, "step_ms": harness.step_ms,
                     "throughput": harness.throughput, "unit": f"{harness.unit}/s",
                     "peak_gib": (harness.peak_memory_bytes or 0) / 2**30,
                     "launches": info.coverage.launches,
                     "counter_coverage_pct": 100 * info.coverage.counter_time_fraction,
                     # schema-1 runs joined counters by (short name, grid size, block size) and never checked them
                     "counters": "none" if not profiled_with_counters(info)
                     else "checked" if info.checks is not None else "unchecked (schema 1)",
                     "profile_wall_s": collectors.harness.wall_s + collectors.counters.wall_s})
    return pd.DataFrame(rows)


def profiling_cost(step_times: pd.DataFrame, workloads: list[str]) -> pd.DataFrame:
    """Per GPU, the profiling wall time (harness and counters) summed over `workloads`, the paper suite, whose cost
    has a goal (10 minutes per GPU); other workloads measured there are left out of the sum."""
    suite = step_times[step_times["workload"].isin(workloads)]
    return suite.groupby("gpu", sort=False).agg(workloads=("workload", "size"), launches=("launches", "sum"),
                                                profile_wall_s=("profile_wall_s", "sum")).reset_index()


def same_config(infos_a: dict[str, RunInfo], infos_b: dict[str, RunInfo]) -> list[str]:
    """The workloads measured on both GPUs with one configuration (preset and every setting): only those are
    compared across GPUs; a run at another batch or length measures other work (mamba3-lm runs at batch 1 on the
    H100, where batch 2 would make Nsight Compute save its live tensors through the host)."""
    return [w for w in infos_a if w in infos_b and infos_a[w].workload.config == infos_b[w].workload.config]


def gpu_pair(runs_a: dict[str, pd.DataFrame], runs_b: dict[str, pd.DataFrame], infos_a: dict[str, RunInfo],
             infos_b: dict[str, RunInfo]) -> pd.DataFrame:
    """Per workload measured on both GPUs: step time on each, speedup of the step and of its SSM and GEMM
    kernel time (A's time over B's), and `slow_iteration`: which run's profiled iteration kept the GPU busier than
    its median step allows (`host.slow_iteration`), so that its kernel times describe a slower step."""
    rows = []
    for workload in [w for w in runs_a if w in runs_b]:
        a, b = runs_a[workload], runs_b[workload]
        row: dict[str, Any] = {"workload": workload, "step_ms_a": infos_a[workload].harness.step_ms,
               "step_ms_b": infos_b[workload].harness.step_ms}
        row["step_speedup"] = row["step_ms_a"] / row["step_ms_b"]
        # the step split into time the GPU runs kernels and time it waits for the host
        row["gpu_busy_ms_a"], row["gpu_busy_ms_b"] = busy_ns(runs_a[workload]) / 1e6, busy_ns(runs_b[workload]) / 1e6
        row["host_wait_ms_a"] = max(row["step_ms_a"] - row["gpu_busy_ms_a"], 0.0)
        row["host_wait_ms_b"] = max(row["step_ms_b"] - row["gpu_busy_ms_b"], 0.0)
        row["gpu_busy_speedup"] = row["gpu_busy_ms_a"] / row["gpu_busy_ms_b"]
        for category in (SSM, "GEMM"):
            time_a = a.loc[a["category"] == category, "duration_ns"].sum()
            time_b = b.loc[b["category"] == category, "duration_ns"].sum()
            row[f"{category} speedup"] = time_a / time_b if time_b else float("nan")
        slow = {label: slow_iteration(row[f"gpu_busy_ms_{label}"], row[f"step_ms_{label}"]) for label in "ab"}
        row["slow_iteration"] = ", ".join(f"{label.upper()} +{100 * excess:.1f} %" for label, excess in slow.items()
                                          if excess)
        rows.append(row)
    return pd.DataFrame(rows)


def projection_errors(runs_a: dict[str, pd.DataFrame], runs_b: dict[str, pd.DataFrame], ceilings_a: Ceilings,
                      ceilings_b: Ceilings, min_share: float = 0.05) -> pd.DataFrame:
    """Per workload measured on both GPUs: the largest |error| of the per-category projection A -> B and
    B -> A against the measured run, over categories above `min_share` of the target's kernel time. A run without
    counters projects nothing (`project` carries its times over), so its direction has no error (NaN)."""
    rows = []
    for workload in [w for w in runs_a if w in runs_b]:
        a, b = runs_a[workload], runs_b[workload]
        there = projection_error(project_categories(project_kernels(a, ceilings_a, ceilings_b)), b, min_share)
        back = projection_error(project_categories(project_kernels(b, ceilings_b, ceilings_a)), a, min_share)
        rows.append({"workload": workload, "categories": len(there),
                     "max_error_a_to_b_pct": _max_error(there, a), "max_error_b_to_a_pct": _max_error(back, b)})
    return pd.DataFrame(rows)


def _max_error(errors: pd.DataFrame, source: pd.DataFrame) -> float:
    return errors["error_pct"].abs().max() if has_counters(source) else float("nan")


def dram_beside_study(ssm: pd.DataFrame, ceilings: Ceilings) -> pd.DataFrame:
    """The SSM kernels' DRAM use beside the study's 57.5 % (STUDY_SSM_DRAM_PCT, a mean against the datasheet's
    3350 GB/s), each with the ceiling it is taken against: time-weighted of Nsight Compute's DRAM peak (the
    results table's), of the run's DRAM ceiling (the roofline's) and of the study's 3350 GB/s, and unweighted
    over the checked launches of the study's 3350 GB/s. `ssm`: the SSM launches of an analysis frame."""
    checked = ssm[ssm["counter_status"].isin(CHECKED_STATUSES)]
    rate, weight = checked["dram_bytes_per_s"], checked["duration_ns"]
    rows = [("ssmprof, time-weighted", "Nsight Compute's DRAM peak (dram__throughput)", float("nan"),
             time_weighted(checked["dram_throughput_pct"], weight)),
            ("ssmprof, time-weighted", f"the run's DRAM ceiling ({ceilings.source})", ceilings.dram_gb_s,
             time_weighted(100 * rate / (ceilings.dram_gb_s * 1e9), weight)),
            ("ssmprof, time-weighted", "the datasheet (the study's)", STUDY_DRAM_GB_S,
             time_weighted(100 * rate / (STUDY_DRAM_GB_S * 1e9), weight)),
            ("ssmprof, mean over launches", "the datasheet (the study's)", STUDY_DRAM_GB_S,
             float((100 * rate / (STUDY_DRAM_GB_S * 1e9)).mean())),
            (STUDY, "the datasheet", STUDY_DRAM_GB_S, STUDY_SSM_DRAM_PCT)]
    return pd.DataFrame(rows, columns=["measure", "ceiling", "ceiling_gb_s", "dram_pct"])


# definition -> (what it is, how it is read from a launch of `scripts/study_dram.py`'s table)
SSM_MEMORY_DEFINITIONS = {
    "DRAM throughput": ("% of Nsight Compute's DRAM peak (dram__throughput)", lambda t: t["dram_throughput_pct"]),
    "DRAM bytes over duration": (f"% of the datasheet's {STUDY_DRAM_GB_S:,.0f} GB/s (the study's ceiling)",
                                 lambda t: 100 * t["dram_bytes"] / t["duration_ns"] / STUDY_DRAM_GB_S),
    "SpeedOfLight Memory Throughput": ("% of the busiest memory unit's peak (gpu__compute_memory_throughput: DRAM, "
                                       "L2, L1 or shared memory)", lambda t: t["memory_throughput_pct"]),
}
# the units gpu__compute_memory_throughput takes the largest of, as `ssm_memory_longest` names them
MEMORY_UNITS = {"dram_throughput_pct": "DRAM", "l2_throughput_pct": "L2", "l1_throughput_pct": "L1 / shared memory"}


def ssm_memory_table(measured: pd.DataFrame) -> pd.DataFrame:
    """The SSM kernels' memory use under each cache setting and definition (`SSM_MEMORY_DEFINITIONS`) of
    `scripts/study_dram.py`'s launches (`measured`: one row per setting and launch configuration, with the run's
    `launches` of it), three ways to average: over launch configurations (each kernel configuration once, as a
    study averaging "the kernels" would), over launches, and weighted by time (duration x launches: what the
    iteration spends). The study's 57.5 % is one number without its definition: the rows say which come near it."""
    rows = []
    for cache, launches in measured.groupby("cache", sort=False):
        time = launches["duration_ns"] * launches["launches"]
        for definition, (what, read) in SSM_MEMORY_DEFINITIONS.items():
            values = read(launches)
            rows.append({"caches": cache, "definition": definition, "of": what, "configurations": len(launches),
                         "mean_over_configurations_pct": float(values.mean()),
                         "mean_over_launches_pct": time_weighted(values, launches["launches"]),
                         "time_weighted_pct": time_weighted(values, time)})
    rows.append({"caches": "not stated", "definition": STUDY, "of": "mean DRAM bandwidth of the SSM kernels, % of "
                 f"{STUDY_DRAM_GB_S:,.0f} GB/s", "configurations": None,
                 "mean_over_configurations_pct": STUDY_SSM_DRAM_PCT, "mean_over_launches_pct": float("nan"),
                 "time_weighted_pct": float("nan")})
    return pd.DataFrame(rows)


def ssm_memory_longest(measured: pd.DataFrame, cache: str = FLUSHED, top: int = 3) -> pd.DataFrame:
    """The `top` SSM kernels of `scripts/study_dram.py`'s launches that take the most time with the caches `cache`:
    share of the SSM kernels' time, DRAM throughput, the SpeedOfLight Memory Throughput and the unit that sets it
    (`MEMORY_UNITS`): why weighting by time moves DRAM use away from the mean over kernels."""
    launches = measured[measured["cache"] == cache]
    time = launches["duration_ns"] * launches["launches"]
    busiest = launches[list(MEMORY_UNITS)].idxmax(axis=1).map(MEMORY_UNITS)
    table = pd.DataFrame({"kernel_name": launches["kernel_name"], "time_share_pct": 100 * time / time.sum(),
                          "dram_throughput_pct": launches["dram_throughput_pct"],
                          "memory_throughput_pct": launches["memory_throughput_pct"], "busiest_unit": busiest})
    return table.sort_values("time_share_pct", ascending=False, ignore_index=True).head(top)


def beside_study(kernels: pd.DataFrame, info: RunInfo, ceilings: Ceilings) -> tuple[pd.DataFrame, ...]:
    """A run of the study's model beside the study: its Table II and the study's (`table_ii_beside_study`), why
    they differ (`table_ii_causes`) and its SSM DRAM use beside the study's (`dram_beside_study`)."""
    classified = classify(kernels, ceilings)
    return (table_ii_beside_study(classified), table_ii_causes(classified, info.workload.config, info.versions),
            dram_beside_study(kernels[kernels["category"] == SSM], ceilings))


def ssd_dataflow_by_cache(runs: dict[str, pd.DataFrame], infos: dict[str, RunInfo]) -> pd.DataFrame | None:
    """The SSD chain's data flow of one workload measured with the caches flushed and kept
    (`ssd_dataflow.dataflow_by_cache`), for the first workload, preset and GPU given in both modes, with which
    runs (`flushed`, `kept`); None where no workload was given in both."""
    by_mode: dict[tuple, dict[str, str]] = {}
    for label, info in infos.items():
        mode = info.collectors.counters.cache or FLUSHED
        by_mode.setdefault((info.workload.name, info.workload.preset, info.gpu.name), {}).setdefault(mode, label)
    for modes in by_mode.values():
        if {FLUSHED, KEPT} <= set(modes):
            flows = {mode: ssd_dataflow(runs[modes[mode]], infos[modes[mode]].workload.config)
                     for mode in (FLUSHED, KEPT)}
            if all(flow is not None for flow in flows.values()):
                return dataflow_by_cache(flows[FLUSHED], flows[KEPT]).assign(flushed=modes[FLUSHED],
                                                                             kept=modes[KEPT])
    return None
