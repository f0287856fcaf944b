"""The visual language of every report, defined once. Figures and tables take their look from here and nowhere else.

- Category colours (`CATEGORY_COLORS`) mean a kernel category and nothing else: bars and points of one category.
- Workloads, GPUs, runs and swept settings get the series palette (`SERIES_COLORS`: dark, muted, none of them a
  category's colour) with a marker shape and a dash each, a workload beyond the registry (a shipped model) a shape
  no registry workload wears; two runs on one chart: filled circles and open diamonds.
- Roofs are grey, dashed by path (tensor dashes, vector dots); every ceiling is labelled with its value on the
  chart (`ROOF_LABEL`), not only in the legend, where the chart shows its line and over no marker.
- Hover on a kernel says: kernel, phase, category, time, launches, limiter, % of roof.
- Log axes tick at powers of ten with one format (`decade_label`: 10m, 1, 10, 1k, 1T), or over a decade or two (a
  history's trends) at 1, 2 and 5 times them, labelled in full (`figures.log_ticks`); linear axes in plain numbers
  with their unit in the title.
- No blank chart: a chart whose every value is missing is left out, and the page says why in a sentence.
- Metrics that are not categories (hit rates, classes) get neutral greys (`METRIC_COLORS`), told apart by
  shade order in the legend.
- Tables: human headers (`HEADERS`, one for every column a page shows), numbers with their column's unit (`cell`:
  a duration, %, a rate, a size; a unit no cell can carry, in the header), never scientific notation, never nan.
"""

from __future__ import annotations

import math

from ssmprof.analysis.findings.phrases import pct_text
from ssmprof.analysis.launches.categories import CATEGORIES
from ssmprof.analysis.limits.tensor_vector import CLASSES, FLOP_CLASSES
from ssmprof.schema import PHASES

# One colour per category, the same in every chart of every page (14 categories, no two alike; none grey,
# which is kept for roofs and for what is not a category).
CATEGORY_COLORS: dict[str, str] = dict(zip(CATEGORIES, (
    "#1f77b4",  # GEMM: blue
    "#d62728",  # SSM scan: red
    "#8c564b",  # convolution: brown
    "#9467bd",  # attention: purple
    "#2ca02c",  # normalization: green
    "#ff7f0e",  # elementwise/activation: orange
    "#e377c2",  # reduction/loss: pink
    "#bcbd22",  # sort/scan: olive
    "#17becf",  # memory: cyan
    "#e6ab02",  # optimizer: gold
    "#393b79",  # communication: navy
    "#9c9ede",  # waiting for other ranks: pale navy
    "#637939",  # graph gather/scatter: moss
    "#c49c94",  # other: tan
), strict=True))
# Roofs and other reference lines: greys and black, distinct from every category, told apart by dash.
ROOF_COLORS = ("#555555", "#999999")
ROOF_DASH = {"tensor": "dash", "vector": "dot"}
# Runs of a comparison: A filled circles, B open diamonds drawn larger, so B never hides A.
RUN_SYMBOLS = ("circle", "diamond-open", "square-open", "x")
RUN_SIZES = (7, 11, 11, 9)
# Workloads on one chart (a suite's SSM kernels): a shape per workload, open so overlapping points show; the
# registry's workloads take the first 9 (`WORKLOAD_ORDER`), the rest are for the workloads beyond it (a shipped
# model: hf:bamba), so that none of them wears a registry workload's shape.
WORKLOAD_SYMBOLS = ("circle-open", "diamond-open", "square-open", "triangle-up-open", "x", "star-open",
                    "cross-open", "hexagon-open", "pentagon-open", "triangle-down-open", "hourglass-open",
                    "star-triangle-up-open", "bowtie-open", "diamond-wide-open", "square-x-open")
# Workloads, GPUs, runs and kernels as series (sweep lines, the suite's SSM roofline): a workload in its own place
# (`WORKLOAD_ORDER`), any other series in order of appearance; dark and muted, none of them a category's colour,
# each with its own marker shape and dash.
SERIES_COLORS = ("#111111", "#1b7f6b", "#6a51a3", "#b35806", "#5f5f5f", "#8e0152", "#4d6b1f", "#2d4a87", "#7f3b08")
SERIES_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot", "solid", "dash", "dot")
# A workload's place in the series palette, the same on every page whichever runs a page holds: the registry's
# order (`workloads.registry.WORKLOADS`, which this layer may not import; tests/test_report_style.py keeps the two
# alike). One colour, marker and dash per workload, 9 workloads for 9 styles.
WORKLOAD_ORDER = ("mamba2-lm", "hybrid", "mamba-vision", "graph-mamba", "transformer", "mamba1-lm", "mamba3-lm",
                  "gdn-lm", "gdn-hybrid")
# A ceiling's label on a roofline chart: beside the line, no arrow.
ROOF_LABEL = {"xref": "x", "yref": "y", "showarrow": False}
# Heatmaps of a sweep: one sequential scale, low values light.
HEATMAP_SCALE = "Blues"
# Neutral fills for metrics that are not categories (hit rates, classes).
METRIC_COLORS = ("#c7c7c7", "#8f8f8f", "#4d4d4d", "#1a1a1a")
# Warp-stall reasons: a colour per reason, families alike (memory reds, shared memory/MIO oranges, barriers
# purples, math blues, front end greys, issuing greens), so a bar reads as "mostly memory" at a glance.
STALL_COLORS: dict[str, str] = {
    "long_scoreboard": "#b2182b", "lg_throttle": "#d6604d", "tex_throttle": "#f4a582", "drain": "#fddbc7",
    "membar": "#e7298a", "imc_miss": "#c994c7",
    "short_scoreboard": "#e66101", "mio_throttle": "#fdb863",
    "barrier": "#5e3c99", "sleeping": "#b2abd2",
    "math_pipe_throttle": "#2166ac", "gmma": "#4393c3", "wait": "#92c5de", "dispatch_stall": "#d1e5f0",
    "no_instruction": "#636363", "branch_resolving": "#969696", "misc": "#cccccc",
    "not_selected": "#a6dba0", "selected": "#1b7837",
}
# The charts' common layout: white, light grid lines, the legend toggles a trace. Small on purpose: plotly's own
# templates add 7 KB to every chart of a page.
MARGIN_TOP = 60  # px above a chart with a one-line title
LAYOUT = {"template": {"layout": {"paper_bgcolor": "white", "plot_bgcolor": "white",
                                  "xaxis": {"gridcolor": "#ebebeb", "zeroline": False, "automargin": True},
                                  "yaxis": {"gridcolor": "#ebebeb", "zeroline": False, "automargin": True},
                                  "hoverlabel": {"align": "left"}}},
          "legend": {"itemclick": "toggle"}, "margin": {"t": MARGIN_TOP, "r": 20}}
PLOTLY_JS = "plotly.min.js"  # pages load the library from this file beside them (`pipeline.outputs` writes it)
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"


def category_color(category: str) -> str:
    return CATEGORY_COLORS.get(category, "#7f7f7f")


def series_indices(names: list[str], workloads: bool = False) -> dict[str, int]:
    """Each series' place in the palette: a workload's own (or a label's whose first word is one, "mamba2-lm
    tp2"), so that it looks alike on every page; any other series (a kernel, a GPU) the first place no series of
    `names` holds, in order of appearance. Where every series is a workload (`workloads`: a suite's SSM roofline),
    one the registry does not hold (a shipped model, hf:bamba) takes a place past the registry's, in order of
    appearance: on the models page, hf:bamba wore mamba2-lm's black circle and hf:nemotron-h hybrid's diamond."""
    fixed = {name: WORKLOAD_ORDER.index(name.split(" ")[0]) for name in names if name.split(" ")[0] in WORKLOAD_ORDER}
    first = len(WORKLOAD_ORDER) if workloads else 0
    free = (index for index in range(first, first + len(SERIES_COLORS) * 4) if index not in fixed.values())
    return {name: fixed[name] if name in fixed else next(free) for name in dict.fromkeys(names)}


def series_color(index: int) -> str:
    return SERIES_COLORS[index % len(SERIES_COLORS)]


def series_symbol(index: int) -> str:
    return WORKLOAD_SYMBOLS[index % len(WORKLOAD_SYMBOLS)]


def series_dash(index: int) -> str:
    return SERIES_DASHES[index % len(SERIES_DASHES)]


# Human headers for the analysis frames' columns (any column not here: underscores become spaces).
HEADERS: dict[str, str] = {
    "kernel_name": "Kernel", "phase": "Phase", "category": "Category", "launches": "Launches",
    "time_ms": "Time", "time_ns": "Time", "mean_ns": "Mean per launch", "share": "Share of kernel time",
    "memory_bound_share": "Memory-bound (share of time)", "compute_bound_share": "Compute-bound (share of time)",
    "pct_of_roof": "% of roof", "pct_of_dram_peak": "DRAM bytes/s, % of the roof's bandwidth",
    "l1_hit_rate_pct": "L1 hit %", "l2_hit_rate_pct": "L2 hit %",
    "dram_throughput_pct": "DRAM throughput, % of peak (Nsight Compute)",
    "class": "Class", "kernels": "Kernels", "time_share": "Share of time",
    "counter_status": "Counters", "step_ms": "Step", "gpu_busy_ms": "GPU busy", "gpu_busy_pct": "GPU busy %",
    "gpu_idle_ms": "GPU waits for host", "host_wait_ms": "GPU waits for host", "launches_per_s": "Launches per s",
    "short_launch_pct": "Launches under 10 us", "largest_gap_us": "Largest idle gap", "verdict": "Verdict",
    "workload": "Workload", "gpu": "GPU", "throughput": "Throughput", "unit": "Unit", "peak_gib": "Peak memory",
    "counter_coverage_pct": "Counters cover (% of time)", "profile_wall_s": "Profiling wall time",
    "ssm_time_pct": "SSM share of kernel time", "dram_pct_of_peak": "DRAM throughput, % of peak (Nsight Compute)",
    "l1_hit_pct": "L1 hit %", "l2_hit_pct": "L2 hit %", "memory_bound_pct": "Memory-bound (% of SSM time)",
    "algbw_gb_per_s": "algbw (GB/s)", "busbw_gb_per_s": "busbw (GB/s)", "pct_of_link": "busbw, % of link",
    "projected_us": "Projected (not measured)", "comm_us": "Communication", "exposed_us": "Exposed",
    "overlap_pct": "Overlapped %", "comm_ms": "Communication", "compute_ms": "Compute",
    "wait_us": "Waiting for other ranks", "transfer_us": "Transfer", "exposed_transfer_us": "Transfer exposed",
    "mean_us": "Mean transfer", "wait_mean_us": "Mean wait",
    "time_ms_a": "Time A", "time_ms_b": "Time B", "launches_a": "Launches A", "launches_b": "Launches B",
    "per_launch_ns_a": "Per launch A", "per_launch_ns_b": "Per launch B", "time_ns_a": "Time A",
    "time_ns_b": "Time B", "speedup": "Speedup", "per_launch_speedup": "Per-launch speedup",
    "share_a": "Share A", "share_b": "Share B", "status": "Match", "moved_to": "Launches moved to / from",
    "dram_throughput_pct_a": "DRAM throughput % A", "dram_throughput_pct_b": "DRAM throughput % B",
    "flop_per_s_a": "FLOP/s A", "flop_per_s_b": "FLOP/s B", "flop_per_s": "FLOP/s",
    "l2_hit_rate_pct_a": "L2 hit % A", "l2_hit_rate_pct_b": "L2 hit % B", "launch_op": "Launching op",
    "run": "Run", "busy_share_pct": "GPU busy %", "tensor_share": "Tensor share", "duration_ns": "Time",
    "tensor_instruction": "Tensor instruction", "names": "Kernels, longest first",
    "mma_sync_pct": "On mma.sync (% of SSM time)",
    "flops": "FLOPs", "ai_dram": "FLOP / DRAM byte", "finding": "Finding", "kind": "Kind",
    "impact_ms": "Impact (ms)", "item": "",
    "value": "", "errors": "Errors", "check": "Check",
    "kernel": "Kernel", "analytic_flops": "FLOPs, analytic", "measured_flops": "FLOPs, measured",
    "flops_ratio": "FLOPs measured / analytic", "min_bytes": "Bytes, minimum",
    "issued_flops": "FLOPs, whole tiles issue", "ratio_to_2mnk": "Measured / 2MNK",
    "ratio_to_issued": "Measured / issued", "padding_share": "Tile padding (share of issued)",
    # a run: the counter plan's families lent by grid and its cost
    "family": "Family: instantiation and tile", "configurations": "Launch configurations",
    "measured_launches": "Launches measured", "lent_launches": "Launches lent",
    "held_out_launches": "Launches held out",
    "dram_error_pct": "Held-out error, DRAM bytes", "l2_error_pct": "Held-out error, L2 bytes",
    "inst_error_pct": "Held-out error, instructions", "counter_pass": "Pass", "launches_profiled": "Launches profiled",
    "predicted_s": "Wall time predicted", "measured_s": "Wall time measured",
    "prediction_error_pct": "Prediction's error",
    "measured_dram_bytes": "DRAM bytes, measured",
    "bytes_ratio": "Bytes measured / minimum", "measured_ms": "Measured", "projected_ms": "Projected",
    "target_ms": "Measured on the target", "error_pct": "Error", "config": "Kernel [launch configuration]",
    "host": "Host CPU", "limiter": "Limiter", "evidence": "Evidence (longest launch)", "roof_ms": "Time at the roof",
    "saved_at_roof_ms": "Saved at the roof", "saved_reachable_ms": "Saved at 80 % of the roof",
    "saved_reachable_pct_of_kernel_time": "Saved at 80 % (% of kernel time)",
    "step_us_per_item": "Step time per token (us)", "kernel_us_per_item": "Kernel time per token (us)",
    "ssm_us_per_item": "SSM kernel time per token (us)", "us_per_item": "Time per token (us)",
    "items_per_step": "Tokens per step", "busy_ms": "GPU busy (profiled iteration)",
    "busy_past_step_pct": "Busy past the median step",
    "regime": "Regime", "points": "Points", "faster_below": "Faster below", "faster_above": "Faster above",
    "workload_a": "Workload A", "workload_b": "Workload B", "crossings": "Crossings",
    "runner_up_slower_pct": "Runner-up slower by", "result": "Result",
    # a column per category (a suite's % of kernel time), per class (Table II's cells, a suite's % of SSM time):
    # named by what they hold already
    **{category: category for category in CATEGORIES}, **{name: name for name in CLASSES},
    **{f"{phase} {name} %": f"{name}, {phase}" for phase in PHASES[:2] for name in FLOP_CLASSES},
    # a run: the host, the profiled iteration, CUDA graphs
    "gpu_idle_low_ms": "GPU waits for host, 95 % low", "gpu_idle_high_ms": "GPU waits for host, 95 % high",
    "launch_cost_ms": "Launch cost", "host_cost": "What the host costs a step", "iteration_ms": "Profiled iteration",
    "waiting_ms": "Waiting for other ranks", "span_ms": "Kernel span", "step_spread_ms": "Spread of the steps",
    "span_off_pct": "Span off the median step", "timed_by": "Kernel times from", "detail_span_ms": "Detail pass span",
    "representative": "Representative", "why": "Why not", "steps": "Timed steps",
    "graphed_step_ms": "Step as one CUDA graph", "graphed_speedup": "Speedup as one CUDA graph",
    "graphed_speedup_low": "Speedup as one CUDA graph, 95 % low",
    "graphed_speedup_high": "Speedup as one CUDA graph, 95 % high", "gain_ms": "Gain a step",
    "gain_share_of_host_wait": "Gain, share of the host wait",
    # a run: the host's sampled time
    "site": "Line", "ms": "Host time a step", "ms_low": "Host time, 95 % low", "ms_high": "Host time, 95 % high",
    "host_pct": "Share of the host's step", "host_ms": "Host step (sampled)", "attributed_pct": "Named by the sampler",
    "wait_covered_pct": "GPU wait it covers", "overhead_pct": "Sampling cost",
    "overhead_low_pct": "Sampling cost, 95 % low", "overhead_high_pct": "Sampling cost, 95 % high",
    "sampled_steps": "Sampled steps", "readings": "Readings",
    "interval_ms": "Sampling period", "gc_ms": "Garbage collection a step", "sync_ms": "Synchronizing calls a step",
    "top_category": "Most time on", "top_site": "Most time at", "top_site_ms": "Time a step there",
    "cpus": "CPUs", "cpu_numa_nodes": "CPUs' NUMA nodes", "gpu_numa_node": "GPU's NUMA node",
    "on_gpu_node": "On its GPU's node", "torch_threads": "torch threads", "omp_num_threads": "OMP_NUM_THREADS",
    "threads": "Threads", "switches_per_step": "Context switches a step",
    "migrations_per_step": "CPU migrations a step",
    "late_ms": "Late rank's time a step", "others_ms": "Other ranks' median", "excess_ms": "Excess",
    "excess_share": "Share of the excess, running",
    "aligned_launches": "Launches aligned", "names_agree_pct": "Same kernel on every rank",
    "gap_excess_ms": "Idle between launches beyond the others'", "gap_excess_noise_ms": "That idle excess's noise",
    "gap_excess_where": "Where the idle excess falls", "by": "Grouped by", "group": "Group",
    "excess_pct": "Share of the excess", "covered_pct": "Share of the excess, running",
    "launch_gap_median_us": "Median gap before its launches", "others_launch_gap_median_us": "Others' median gap there",
    # a run: limiters, instruction bounds, stalls, calibration defects
    "runner_up": "Runner-up", "margin": "Margin over the runner-up (score 0-1)", "confidence": "Confidence",
    "bound": "Compute bound", "bound_pct": "Bound, % of peak", "busiest_pipe": "Busiest pipe",
    "busiest_pipe_pct": "Busiest pipe, % of peak", "issue_pct": "Issue slots, % of peak",
    "shared_pct": "Shared memory, % of peak", "inst_rate_pct_of_issue_peak": "Instruction rate, % of issue peak",
    "inst_per_shared_wavefront": "Instructions per shared wavefront",
    "inst_per_l2_sector": "Instructions per L2 sector",
    "inst_per_dram_sector": "Instructions per DRAM sector", "missing": "Counters missing", "top_waits": "Top waits",
    "rate": "Rate", "achieved": "Achieved", "ceiling": "Ceiling", "pct_of_ceiling": "% of the ceiling",
    "ceiling_source": "Ceilings from",
    # a run: tensor vs vector, Table II, the study's DRAM use
    "row": "Row", "source": "Source", "share_of_phase": "Share of the phase's SSM time",
    "tensor_flop_share": "Tensor share of FLOPs", "changes_at_pct": "Class changes at (FLOPs off the main pipe)",
    "class_other_side": "Class beyond it", "time_changes_at_pct": "Class changes at (compute time)",
    "measure": "Measure", "ceiling_gb_s": "Ceiling's bandwidth", "dram_pct": "DRAM, % of the ceiling",
    # a run: the SSD chain's data flow and fusion
    "chain_reads": "Reads from the chain", "chain_read_bytes": "Chain bytes read",
    "external_read_bytes": "Bytes read from outside the chain", "write_bytes": "Bytes written",
    "dram_read_bytes": "DRAM bytes read", "chain_from_dram_bytes": "Chain bytes from DRAM",
    "chain_reads_from": "Chain reads served by", "layers": "Layers", "chain_time_ms": "Chain time",
    "chain_dram_bytes": "Chain DRAM bytes", "chain_l2_bytes": "Chain L2 bytes",
    "intermediate_bytes": "Bytes handed between kernels", "fused_min_dram_bytes": "Fused: minimum DRAM bytes",
    "lower_ms": "Fused: lower bound", "lower_roof": "Bound by", "upper_ms": "Fused: upper estimate",
    "fused_l2_bound": "Fused chain L2-bound", "saved_per_step_ms_low": "Saved a step, at the upper estimate",
    "saved_per_step_ms_high": "Saved a step, at the lower bound",
    # ranks and communication
    "rank": "Rank", "node": "Node", "node_rank": "Node rank", "tp_rank": "TP rank", "dp_rank": "DP rank",
    "final_loss": "Final loss", "peak_memory_bytes": "Peak memory", "gpu_sharing": "GPU shared?",
    "transfer_ms": "Transfer", "wait_ms": "Waiting for other ranks", "busy_pct": "Busy, % of the iteration",
    "late_rank": "Late rank", "collectives": "Collectives", "arrived_last": "Arrived last at",
    "caused_wait_ms": "Wait it caused the others", "cost_ms": "Cost to the iteration",
    "cost_noise_ms": "Cost's noise (others' most)", "cost_pct": "Cost, % of the iteration", "cause": "Cause",
    "gpu_work_ms": "GPU work", "step_over_gpu_ms": "Step beyond its GPU work", "hosts_pace": "Hosts pace the step",
    "remedy": "Remedy", "gap_median_us": "Median launch gap", "others_gap_median_us": "Others' median launch gap",
    "gap_total_ms": "Launch gaps, total", "others_gap_total_ms": "Others' launch gaps, total",
    "others_compute_ms": "Others' compute", "sm_clock_mhz": "SM clock", "others_sm_clock_mhz": "Others' SM clock",
    "other_processes": "Other processes on its GPU", "layer_kind": "Layer kind", "collective": "Collective",
    "measured_min": "Measured, fewest", "measured_max": "Measured, most", "predicted": "Predicted",
    "matches": "As predicted", "message_bytes": "Message size", "time_per_layer_us": "Time per layer",
    "ranks": "Ranks", "count": "Launches at this size", "phase_span_us": "Phase span",
    "slowest_rank": "Slowest rank", "fastest_rank": "Fastest rank", "compute_max_us": "Compute, slowest rank",
    "compute_min_us": "Compute, fastest rank", "imbalance_pct": "Imbalance", "span_max_us": "Span, longest rank",
    "span_min_us": "Span, shortest rank", "link": "Link", "world_size": "GPUs",
    # a suite: scaling, communication, its runs
    "gpus": "GPUs", "tp": "TP", "dp": "DP", "sequence_parallel": "Sequence parallel", "preset": "Preset",
    "single_gpu_step_ms": "Single-GPU step", "single_gpu_run": "Single-GPU run", "speedup_low": "Speedup, 95 % low",
    "speedup_high": "Speedup, 95 % high", "efficiency_pct": "Efficiency", "efficiency_pct_low": "Efficiency, 95 % low",
    "efficiency_pct_high": "Efficiency, 95 % high", "forward_per_layer": "Collectives a layer, forward",
    "backward_per_layer": "Collectives a layer, backward", "as_predicted": "Collectives as predicted",
    "exposed_transfer_ms": "Transfer exposed", "layer_message_mib": "Largest layer message",
    "busbw_gb_per_s_min": "busbw, lowest", "busbw_gb_per_s_max": "busbw, highest", "counters": "Counters",
    "counters_checked": "Counters checked",
    # a sweep
    "sweep": "Sweep", "d_state": "State size (d_state)", "chunk_size": "Chunk size", "seq_len": "Sequence length",
    "wall_s": "Wall time", "profiled_span_ms": "Profiled iteration span", "best_chunk_size": "Best chunk size",
    "runner_up_chunk_size": "Runner-up chunk size", "runner_up_slower_low_pct": "Runner-up slower, 95 % low",
    "runner_up_slower_high_pct": "Runner-up slower, 95 % high", "tied_with": "Tied with",
    "noise_verdict": "Against noise", "best_chunk_size_ssm_time": "Best chunk size by SSM time",
    "ssm_time_tied_with": "Tied with, by SSM time", "crossover_seq_len": "Crossover (sequence length)",
    "crossover_low": "A faster beyond noise up to", "crossover_high": "B faster beyond noise from",
    "tied_at": "Tied at", "tied_gap_pct": "Gap where tied (%)",
    "crossover_seq_len_kernel_time": "Crossover on kernel time (sequence length)",
    "kernel_crossover_low": "On kernel time: A faster up to", "kernel_crossover_high": "On kernel time: B faster from",
    "kernel_noise_verdict": "On kernel time: against noise", "kernel_tied_at": "On kernel time: tied at",
    "kernel_tied_gap_pct": "On kernel time: gap where tied (%)",
    # a comparison; the history's change points
    "vs_noise": "Against noise", "basis": "Interval from",
    "first_changed_run": "First changed run", "run_before": "Run before", "what_changed": "What changed",
    "what_moved": "What moved",
}


def decade_label(value: float) -> str:
    """A power of ten as a short tick label, one format for every log axis: 1e12 -> 1T, 1e14 -> 100T, 1 -> 1,
    0.01 -> 10m."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""), (1e-3, "m"),
                          (1e-6, "u")):
        if value >= scale:
            return f"{value / scale:g}{prefix}"
    return f"{value:g}"


def header(column: str) -> str:
    return HEADERS.get(column, column.replace("_", " "))


def duration(ns: float) -> str:
    """A duration in nanoseconds as text in s, ms or us."""
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return ""
    if abs(ns) >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e3:.1f} us"


def si(value: float, unit: str) -> str:
    """A rate with an SI prefix: 3.8e13 FLOP/s -> 38.0 TFLOP/s."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {prefix}{unit}"
    return f"{value:.3g} {unit}"


# Rates by the quantity before "per_s" (or "_gb_s", GB/s): the unit a cell of such a column carries. Checked before
# the "_s" (seconds) and "bytes" (a size) rules, which would read a rate as a duration or an amount.
RATE_UNITS = (("gb_per_s", "GB/s"), ("gb_s", "GB/s"), ("bytes_per_s", "B/s"), ("inst_per_s", "inst/s"),
              ("issue_peak_per_s", "inst/s"), ("launches_per_s", "launches/s"))


def _rate(column: str, value: float) -> str | None:
    unit = next((unit for key, unit in RATE_UNITS if f"_{key}_" in f"_{column}_"), None)
    if unit is None:
        return None
    return f"{value:,.1f} {unit}" if unit in ("GB/s", "launches/s") else si(value, unit)


# Columns whose number is in its row's unit, which the row's `unit` column names (a calibration defect's TFLOP/s or
# GB/s, a suite's tokens/s or samples/s): the cell says it, and the page leaves the `unit` column out (`render.HIDDEN`).
ROW_UNIT = ("achieved", "ceiling", "throughput")


def sharing(reading: dict) -> str:
    """run.json's `gpu_sharing` reading of a rank (`nvml.SharingMonitor.summary`) in words: whether another process
    held its GPU during the timed steps, over how many samples, and its SM clock; a dict's repr is no cell."""
    shared, samples = reading.get("shared"), reading.get("samples")
    if shared is None:
        return "not sampled"
    clock = (reading.get("sm_clock_mhz") or {}).get("median")
    said = f"{samples} samples" + (f", SM clock {clock:,.0f} MHz" if clock is not None else "")
    if not shared:
        return f"no ({said})"
    fraction = reading.get("shared_sample_fraction") or 0.0
    return f"yes: up to {reading.get('max_other_processes')} other processes in {100 * fraction:.0f} % of {said}"


def _plain(value: float) -> str:
    """A number without a unit: counts with thousands separators, never scientific notation."""
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def cell(column: str, value, unit: str = "") -> str:
    """One table cell as text: durations in ms/us, percentages and shares as %, rates with SI prefixes, sizes and
    clocks with their unit, counts with thousands separators, never scientific notation. The rules read the
    column's words (split at "_"), not its letters: `inst_per_shared_wavefront` is no share. `unit`: the row's
    unit, for a column of `ROW_UNIT`."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, dict) and column == "gpu_sharing":
        return sharing(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    words = column.split("_")
    if "ratio" in words:  # near 1 (self-checks), three decimals: 1.001 is not 1 ("duration" is no ratio)
        return f"{value:.3f}" if 0.1 <= abs(value) < 10 else f"{value:.3g}"
    if column in ROW_UNIT and unit:
        return f"{value:,.1f} {unit}" if abs(value) < 1000 else f"{value:,.0f} {unit}"
    if column in CATEGORY_COLORS:  # a suite's column per category: its % of the run's kernel time
        return f"{value:.1f} %"
    return _measured(column, words, value) or _plain(value)


def _measured(column: str, words: list[str], value: float) -> str | None:
    """`cell` of a column whose words name a unit (a duration, a rate, a share, a size, a clock), None for any
    other."""
    if "ns" in words:
        return duration(float(value))
    if "ms" in words:
        return duration(float(value) * 1e6)
    if words[-1] == "us":  # not `us_per_item`: a time per token, its unit in its header (`HEADERS`)
        return duration(float(value) * 1e3)
    if rate := _rate(column, float(value)):
        return rate
    if words[-1] == "s" and "per" not in words:
        return f"{value:,.1f} s"
    if column == "counter_coverage_pct":  # the counters' own finding prints it so: one number on every page
        return pct_text(float(value))
    if "share" in words and "pct" not in words:  # fractions of 1
        return f"{100 * value:.1f} %"
    if "pct" in words or "hit" in words or column.endswith(" %"):
        return f"{value:.1f} %"
    if "flop_per_s" in column:
        return si(float(value), "FLOP/s")
    if "flops" in words:
        return si(float(value), "FLOP")
    if "bytes" in words:
        return si(float(value), "B")
    if "speedup" in words or column == "ai_shift":
        return f"{value:.2f}x"
    for word, size in (("gib", "GiB"), ("mib", "MiB"), ("mhz", "MHz")):
        if word in words:
            return f"{_plain(value)} {size}" if word == "mhz" else f"{value:,.1f} {size}"
    return None
