"""What every column of the CSV files holds: one meaning a column name (`COLUMN_MEANINGS`), the few names that mean
another thing in one section apart (`SECTION_MEANINGS`), and `column_reference`, the markdown of docs/columns.md.

Each meaning was read off the code that makes the column (`analysis/`, and for a sweep's points `pipeline/regimes.py`),
with its unit. A section is named as its CSV file is, less a run's index: `breakdown` (`breakdown.csv`, or
`<i>-breakdown.csv` for run i of several), `suite-step_times`, `sweep-points`. scripts/column_reference.py reads
the sections' headers from the reviewed snapshots (tests/data/golden-bundled-runs) and writes docs/columns.md with
`column_reference`; tests/test_columns.py keeps the two and the snapshots in step. Nothing here reads or writes a file.
"""

from __future__ import annotations

from dataclasses import fields

from ssmprof.analysis.common.sections import Sections, Summary
from ssmprof.analysis.launches.categories import CATEGORIES, WAITING
from ssmprof.analysis.limits.tensor_vector import FLOP_CLASSES
from ssmprof.analysis.summaries.suite import SuiteOverview
from ssmprof.analysis.summaries.sweep import RegimeTables
from ssmprof.reports.render import OVERVIEW_TITLES, TABLE_TITLES
from ssmprof.reports.sweep import TITLES as SWEEP_TITLES
from ssmprof.schema import PHASES, STALL_REASONS

# The pages whose sections become CSV files: (what they are, the prefix of their files, their sections, their tables'
# titles), in the order of the reference.
PAGES: tuple[tuple[str, str, type[Sections], dict[str, str]], ...] = (
    ("A run", "", Summary, TABLE_TITLES),
    ("A suite: several runs", "suite-", SuiteOverview, OVERVIEW_TITLES),
    ("A sweep", "sweep-", RegimeTables, SWEEP_TITLES),
)
# What a section is where its page gives it no table title (a chart draws it, words say it, or only its CSV holds it).
UNTITLED = {
    "breakdown": "Kernel time by category and phase (the page draws it: where the time goes, per phase)",
    "roofline": "The roofline per launch: intensities, achieved FLOP/s, the roof at its intensity and the verdict "
                "(CSV only; the chart draws roofline_points)",
    "roofline_points": "The roofline chart's points: one per kernel, phase and launch configuration",
    "tensor_vector": "Tensor vs vector class of every launch with counters (CSV only; the page shows "
                     "tensor_vector_ssm)",
    "findings": "The run's findings: what opens its page, largest impact first",
    "provenance": "What the run is: where it comes from, its GPU, host, versions, workload, counters and cost",
    "suite-findings": "The suite's findings, largest impact first",
    "suite-parallel_findings": "The multi-GPU runs' findings: scaling, communication, the late rank",
    "sweep-category_time": "Kernel time per token by category, per point (the page draws it as stacked bars)",
    "sweep-steps": "Every kept timed step of every point: the samples the noise intervals are drawn from (CSV only)",
    "sweep-findings": "The sweep's findings, largest impact first",
}

_CATEGORY_COLUMNS = {
    category: f"% of the run's kernel time in the '{category}' category"
              + (" (the collectives' kernel time spent waiting for the other ranks)" if category == WAITING else "")
              + ", 0 where it has none (%)"
    for category in CATEGORIES}
_STALL_COLUMNS = {
    f"{reason}_share": f"Share of the warps resident per issue cycle in state {reason}: {meaning}; "
                       "time-weighted over the kernel's launches the stall pass measured (share 0-1)"
    for reason, meaning in STALL_REASONS.items()}
_CLASS_COLUMNS = {
    f"{phase} {name} %": f"% of the run's {phase} SSM kernel time in {name} kernels (class on compute time at the "
                         "GPU's tensor and fp32 peaks, as in tensor_vector_ssm) (%)"
    for phase in PHASES[:2] for name in FLOP_CLASSES}

_RUN_LABEL = ("The run's label on the page: the workload's name, with its split for a multi-GPU run (e.g. "
              "`mamba2-lm tp4x dp1`) (text)")

COLUMN_MEANINGS: dict[str, str] = {
    # what a row is about
    "kernel_name": "Short demangled kernel name, no namespace or template arguments; a collective's waiting for the "
                   "other ranks is its own row, `<kernel> (waiting)` (text)",
    "phase": "Phase of the training step the launches ran in: forward, backward, optimizer or other (outside the "
             "marked phases; tensor_vector_ssm also: backward without recomputed forward) (text)",
    "category": "What the kernels do, by the first rule their name matches (`analysis.launches.categories`): GEMM, "
                "SSM scan, attention, communication, ... (text)",
    "launches": "Kernel launches the row covers, in the profiled iteration (count)",
    "kernels": "Distinct kernels (short names) the row covers (count)",
    "kernel": "The kernel a model names, as the prefix of its function name (e.g. _chunk_scan_fwd) (text)",
    "launch_idx": "Order of the launch in the profiled iteration, from 0 (count)",
    "grid_x": "Grid size of the launch configuration, x (blocks)",
    "grid_y": "Grid size of the launch configuration, y (blocks)",
    "grid_z": "Grid size of the launch configuration, z (blocks)",
    "block_x": "Block size of the launch configuration, x (threads)",
    "block_y": "Block size of the launch configuration, y (threads)",
    "block_z": "Block size of the launch configuration, z (threads)",
    "workload": "The workload's name (e.g. mamba2-lm) (text)",
    "gpu": "The GPU's model name as the driver reports it (e.g. NVIDIA H100 80GB HBM3) (text)",
    "run": _RUN_LABEL,
    "preset": "The workload's preset (e.g. paper) (text)",
    # time
    "time_ms": "Kernel time summed over the row's launches, on the timeline (ms)",
    "time_ns": "Kernel time summed over the row's launches, on the timeline (ns)",
    "mean_ns": "Mean kernel time per launch (ns)",
    "duration_ns": "Kernel time on the timeline: the launch's own, or summed over the row's launches (ns)",
    "share": "Share of the run's kernel time (of the point's, in a sweep) (share 0-1)",
    "time_share": "Share of the run's kernel time (share 0-1)",
    "step_ms": "Median of the kept timed steps, measured without the profiler; per rank, of that rank's steps (ms)",
    "steps": "Kept timed steps behind the row's numbers; for a ratio of two runs, the fewer of the two (count)",
    # the roofline
    "path": "The launch's compute path: tensor where its tensor FLOPs exceed its vector FLOPs, else vector (text)",
    "flops": "FLOPs from the counters (a tensor-path op one FLOP, an FMA two): the launch's, or summed over the "
             "row's launches (FLOP)",
    "flops_tensor": "Tensor-path FLOPs of the launch, every precision (FLOP)",
    "flops_vector": "Vector FLOPs of the launch: fp32, fp16 and fp64 adds, multiplies and FMAs (FLOP)",
    "ai_dram": "Arithmetic intensity at DRAM: FLOPs per DRAM byte read and written; over several launches, their FLOPs "
               "over their bytes (FLOP/byte)",
    "ai_l2": "Arithmetic intensity at L2: FLOPs per byte requested from L2 (FLOP/byte)",
    "ai_l1": "Arithmetic intensity at L1: FLOPs per byte requested from L1/TEX (FLOP/byte)",
    "flop_per_s": "Achieved FLOP rate on the counters' own duration; over several launches, their FLOPs over their "
                  "time (FLOP/s)",
    "pct_of_roof": "Achieved FLOP/s as % of the roof at the kernel's intensities (the lowest of its compute roof and "
                   "its DRAM, L2 and L1 roofs), time-weighted where the row holds several launches; empty without "
                   "FLOPs (%)",
    "pct_of_dram_peak": "DRAM bytes/s as % of the run's DRAM ceiling (Nsight Compute's own % where no ceiling or "
                        "bytes), time-weighted where the row holds several launches (%)",
    "verdict": "Roofline verdict: memory-bound where a memory roof (DRAM, L2 or L1) is the lowest at the kernel's "
               "intensities, compute-bound otherwise, no counters without them; of most of the time where the row "
               "holds several launches (text)",
    "roof_limiter": "Which roof is the lowest at the kernel's intensities: compute, DRAM, L2 or L1; empty without "
                    "counters (text)",
    "peak_flop_per_s": "The path's compute ceiling: the bf16 tensor peak (tensor path) or the fp32 peak (vector "
                       "path) of the run's ceilings (FLOP/s)",
    "ridge_ai": "Ridge point at DRAM: the path's peak over the DRAM ceiling (FLOP/byte)",
    "l2_ridge_ai": "Ridge point at L2: the path's peak over the run's L2 peak (FLOP/byte)",
    "ceiling_source": "Where the run's ceilings come from: a device profile ssmprof calibrate measured, or the "
                      "datasheet (text)",
    "memory_bound_share": "Share of the category's kernel time in memory-bound launches (share 0-1)",
    "compute_bound_share": "Share of the category's kernel time in compute-bound launches (share 0-1)",
    # caches
    "l1_hit_rate_pct": "L1/TEX sector hit rate, time-weighted over the launches with counters (%)",
    "l2_hit_rate_pct": "L2 sector hit rate, time-weighted over the launches with counters (%)",
    "dram_throughput_pct": "DRAM throughput as % of peak (Nsight Compute's dram__throughput), time-weighted over the "
                           "launches with counters (%)",
    # counters
    "counter_status": "Where the launches' counters come from: measured, lent (from a measured launch of the same "
                      "configuration and problem), `rejected: <check>`, unmatched, not collected or unchecked (text)",
    "measured_flops": "Measured FLOPs per launch, the mean over the kernel's forward launches (FLOP)",
    "analytic_flops": "FLOPs per launch the analytic model of the sequence mixer gives "
                      "(`analysis.limits.analytic_work`) (FLOP)",
    "issued_flops": "Tensor FLOPs the GEMMs' whole tiles issue (each problem padded to its kernel's tile), summed "
                    "over the phase's launches (FLOP)",
    "ratio_to_2mnk": "Measured tensor FLOPs over 2MNK of the recorded shapes; near 1 for sound counters (ratio)",
    "ratio_to_issued": "Measured tensor FLOPs over the FLOPs whole tiles issue (ratio)",
    "padding_share": "Share of the issued tensor work that is tile padding: 1 - 2MNK / issued (share 0-1)",
    # the counter plan: families lent by grid (run.json `collectors.counters.families`) and the plan's cost
    "family": "The family (the launch configurations of one kernel instantiation and tile that differ only in "
              "grid) in words less its kernel's name: the instantiation's template arguments, then block and shared "
              "memory (text)",
    "configurations": "Launch configurations of the family: its grids (count)",
    "measured_launches": "The family's launches Nsight Compute measured, at its grid bins (count)",
    "lent_launches": "The family's launches whose counters were lent by a measured one, work counters scaled by grid "
                     "(count)",
    "held_out_launches": "Measured launches strictly inside the family's measured grids, lent to as if unmeasured "
                         "for the held-out check; 0: none to hold out, the error columns empty (count)",
    "dram_error_pct": "Held-out error of the lent DRAM bytes read and written: median |lent / measured - 1| over the "
                      "held-out launches (%)",
    "l2_error_pct": "Held-out error of the lent L2 bytes: median |lent / measured - 1| over the held-out launches (%)",
    "inst_error_pct": "Held-out error of the lent warp instructions executed: median |lent / measured - 1| over the "
                      "held-out launches (%)",
    "counter_pass": "The Nsight Compute pass, in the order they ran, or `all` for the whole plan (text)",
    "launches_profiled": "Launches the pass replayed and profiled (count)",
    "predicted_s": "The pass's wall time the plan predicted before the passes ran (`profiler.counter_cost`); the "
                   "plan's whole for `all` (s)",
    "measured_s": "The pass's measured wall time; the passes' sum for `all` (s)",
    "prediction_error_pct": "The prediction's error: predicted / measured - 1; negative where the pass took longer "
                            "than predicted (%)",
    # the host and the profiled iteration
    "gpu_busy_ms": "Time at least one kernel runs in the profiled iteration (collectives' waiting excluded); on "
                   "several ranks the rank's own (ms)",
    "gpu_busy_pct": "GPU busy time as % of the step (on several ranks, of the rank's profiled iteration) (%)",
    "gpu_idle_ms": "Time a step the GPU waits for the host: the step less the busy time; on several ranks the "
                   "rank's own launch gaps in its profiled iteration (ms)",
    "gpu_idle_low_ms": "Low end of the 95 % interval of that wait, from the median step's bootstrap interval; empty "
                       "with one step (ms)",
    "gpu_idle_high_ms": "High end of the 95 % interval of that wait; empty with one step (ms)",
    "launches_per_s": "Launches per second at the step rate: the iteration's launches over the step (1/s)",
    "short_launch_pct": "% of the launches shorter than 10 us (%)",
    "largest_gap_us": "Largest idle gap between kernels inside the profiled iteration (us)",
    "launch_cost_ms": "What issuing the iteration's launches costs the host: launches x its measured cost of one "
                      "tiny launch; empty where not measured (ms)",
    "host_cost": "What the host costs a step, in words: the wait, its interval and the launch cost (text)",
    "iteration_ms": "Span of the rank's profiled iteration, first kernel start to last kernel end (ms)",
    "waiting_ms": "Time the rank's collectives spent waiting for the other ranks in its profiled iteration (ms)",
    "span_ms": "Kernel span of the profiled iteration, first start to last end (the longest rank's; per rank its "
               "own) (ms)",
    "busy_ms": "GPU busy time of the profiled iteration: the union of its kernels' intervals, collectives' waiting "
               "excluded (the busiest rank's; per rank its own) (ms)",
    "step_spread_ms": "Spread of the kept timed steps: slowest minus fastest (ms)",
    "span_off_pct": "How far the iteration's span lies from the median step: 100 x (span / step - 1) (%)",
    "timed_by": "Where the kernel times come from: the timing pass (pipelined steps) or the traced iteration (text)",
    "detail_span_ms": "Span of the detail pass's traced iteration where the timing pass timed the kernels; empty "
                      "otherwise (ms)",
    "representative": "True where the profiled iteration is one of the timed steps (span within the steps' spread of "
                      "the median, busy time not past it); empty with one timed step (True/False)",
    "why": "Why the profiled iteration is not representative, in words; empty where it is (text)",
    # limiters, instruction bounds, stalls
    "limiter": "What limits the kernel for most of its time (`analysis.limits.limiters`): a unit (DRAM bandwidth, "
               "tensor pipe, issue slots, ...) or what keeps a low unit low (occupancy, waves, a stall, latency); "
               "run tables add an instruction-level bound's % of peak or the grid's waves (text)",
    "runner_up": "The second candidate of the kernel's longest launch with that limiter (text)",
    "margin": "Score of the limiter minus the runner-up's, longest launch (score 0-1)",
    "confidence": "The margin in words: clear (>= 0.3), likely (>= 0.1), close call, or tie (two busy units within "
                  "0.05) (text)",
    "evidence": "The counters of the kernel's longest launch in words: units by % of peak, waves, occupancy and its "
                "limits, top waits (text)",
    "limiter_name": "The limiter without its number: what a headline adds up by (text)",
    "bound": "Compute bound of most of the kernel's time: its busiest pipe, issue slots or shared memory (the unit "
             "with the largest % of peak while the SM is active), or no counters (text)",
    "bound_pct": "That bound's % of peak while the SM is active, time-weighted over the launches it holds (%)",
    "busiest_pipe": "The pipe (tensor, FMA, ALU, XU, load/store) busiest for most of the kernel's time (text)",
    "busiest_pipe_pct": "The busiest pipe's % of peak while the SM is active, time-weighted (%)",
    "issue_pct": "Warp instructions issued as % of the schedulers' issue peak (issue-active cycles in older runs), "
                 "time-weighted (%)",
    "shared_pct": "Shared-memory wavefronts as % of the L1 data pipe's peak (one a cycle), time-weighted (%)",
    "inst_rate_pct_of_issue_peak": "Warp instructions per second as % of the GPU's issue peak at its recorded SM "
                                   "clock (4 schedulers x SMs x clock), time-weighted (%)",
    "inst_per_shared_wavefront": "Instruction intensity: warp instructions per shared-memory wavefront, "
                                 "time-weighted (ratio)",
    "inst_per_l2_sector": "Instruction intensity: warp instructions per 32-byte L2 sector, time-weighted (ratio)",
    "inst_per_dram_sector": "Instruction intensity: warp instructions per 32-byte DRAM sector, time-weighted (ratio)",
    "missing": "Instruction-level counters the run did not collect (shared memory, instructions executed); empty "
               "where none is missing (text)",
    "top_waits": "The three stall reasons most warps wait on, with their share of the resident warps (text)",
    **_STALL_COLUMNS,
    # headroom and calibration defects
    "roof_ms": "Kernel time at the roof: FLOPs over the roof at the launch's intensity (DRAM bytes at the DRAM "
               "ceiling for launches without FLOPs), summed; empty without counters (ms)",
    "saved_at_roof_ms": "Step time saved if every launch ran at its roof: time less roof time, at least 0, summed (ms)",
    "saved_reachable_ms": "Step time saved at 80 % of the roof (what a tuned kernel reaches): time less roof time / "
                          "0.8, at least 0, summed (ms)",
    "saved_reachable_pct_of_kernel_time": "That saving as % of the run's kernel time (%)",
    "rate": "The rate that exceeds its ceiling: tensor FLOP/s, fp32 FLOP/s, DRAM bytes/s or L1 bytes/s (text)",
    "achieved": "The fastest such launch's rate on the counters' own duration, in the row's unit (TFLOP/s or GB/s)",
    "ceiling": "The calibrated ceiling it exceeds, in the row's unit (TFLOP/s or GB/s)",
    "unit": "What the sweep counts as an item (tokens or samples) (text)",
    "pct_of_ceiling": "The fastest launch's rate as % of the ceiling (%)",
    # tensor vs vector, Table II
    "class": "Tensor vs vector class on compute time at the GPU's tensor and fp32 peaks: TensorOnly (>= 99 % "
             "tensor), VectorOnly (<= 1 %), Tensor+Vector between, NoFLOPs (text)",
    "tensor_time_share": "Tensor share of the launch's compute time at the GPU's bf16 tensor and fp32 peaks (FLOP "
                         "share without ceilings) (share 0-1)",
    "flop_class": "The class on the tensor share of FLOPs instead of compute time (text)",
    "tensor_share": "Tensor-path share of the launch's FLOPs (share 0-1)",
    "near_boundary": "True where the launch lies within a factor of two of a class threshold or its two classes "
                     "differ (True/False)",
    "recomputed": "True for a backward launch that redoes forward work (the SSD chain again, ...) (True/False)",
    "tensor_instruction": "Instruction family of the bf16 tensor ops (Hopper): wgmma, mma.sync or both; empty "
                          "without bf16 tensor work or where the chip does not split them (text)",
    "names": "The kernels of the row, longest first (text)",
    "row": "Table II row: forward, backward (without recomputed kernels) or recomputed in backward (text)",
    "source": "Whose numbers the row holds: ssmprof, or the study's Table II (study (seeds/001)) (text)",
    "share_of_phase": "The row's SSM kernel time as a share of its phase's SSM kernel time (share 0-1)",
    "TensorOnly": "Table II cell: TensorOnly kernels (FLOP class) and their % of the row's SSM time, 'N kernels, "
                  "X %' (text)",
    "VectorOnly": "Table II cell: VectorOnly kernels (FLOP class) and their % of the row's SSM time (text)",
    "Tensor+Vector": "Table II cell: Tensor+Vector kernels (FLOP class) and their % of the row's SSM time (text)",
    "NoFLOPs": "Table II cell: kernels without arithmetic and their % of the row's SSM time (text)",
    "tensor_flop_share": "The kernel's tensor share of FLOPs over its launches in the row (share 0-1)",
    "changes_at_pct": "The tolerance (% of FLOPs off the kernel's main pipe) at which its FLOP class changes: "
                      "100 x min(s, 1 - s); 0 never changes (%)",
    "class_other_side": "The class on the other side of that threshold; empty where it never changes (text)",
    "time_changes_at_pct": "The same threshold on the tensor share of compute time (%)",
    "measure": "What is averaged: ssmprof's SSM launches time-weighted or as a plain mean, or the study's own figure "
               "(text)",
    "ceiling_gb_s": "That ceiling's bandwidth; empty for Nsight Compute's own peak (GB/s)",
    "dram_pct": "The SSM kernels' DRAM bytes/s as % of that ceiling (%)",
    "cause": "What made the late rank late, in words: its host's launch gaps or its kernels (the larger excess over "
             "the other ranks), whether the hosts pace the step, its SM clock and other processes on its GPU (text)",
    # the analytic model, the SSD chain's data flow and fusion
    "flops_ratio": "Measured FLOPs per launch over the analytic model's (ratio)",
    "min_bytes": "Minimal DRAM bytes per launch in the model: each input read once, each output written once (bytes)",
    "measured_dram_bytes": "Measured DRAM bytes read and written per launch, the mean over its launches (bytes)",
    "bytes_ratio": "Measured DRAM bytes over the model's minimum (ratio)",
    "chain_reads": "The tensors the kernel reads that an earlier kernel of the SSD chain wrote (text)",
    "chain_read_bytes": "Bytes of those tensors per layer, modelled from the launch shapes (bytes)",
    "external_read_bytes": "Bytes the kernel reads from outside the chain per layer (x, B, C, dt, dout), modelled "
                           "(bytes)",
    "write_bytes": "Bytes the kernel writes per layer, modelled (bytes)",
    "dram_read_bytes": "Measured DRAM bytes the kernel reads per layer: its launches' sum over the layers (bytes)",
    "chain_from_dram_bytes": "Chain bytes attributed to DRAM: measured DRAM reads beyond the external inputs, at most "
                             "the chain bytes, per layer (bytes)",
    "chain_reads_from": "Where the chain reads came from: DRAM where at least half of them is attributed to DRAM, "
                        "else L2; empty without chain reads (text)",
    "layers": "Model layers the row covers (count)",
    "chain_time_ms": "The unfused SSD chain's measured time per layer in the phase (ms)",
    "chain_dram_bytes": "The chain's measured DRAM bytes per layer, read and written (bytes)",
    "chain_l2_bytes": "The chain's measured L2 bytes per layer (bytes)",
    "intermediate_bytes": "Bytes the chain's kernels hand each other through memory per layer, which a fused kernel "
                          "keeps on chip (modelled) (bytes)",
    "fused_min_dram_bytes": "DRAM bytes a fused chain cannot avoid per layer: each external input read once, each "
                            "output written once (bytes)",
    "lower_ms": "WHAT-IF: the fused chain's time per layer bounded below by its roofs: the largest of its minimum DRAM "
                "bytes, tensor FLOPs and vector FLOPs at their ceilings (ms)",
    "lower_roof": "Which roof gives that bound: DRAM, tensor or fp32 (text)",
    "upper_ms": "WHAT-IF: the fused chain's time per layer estimated L2-bound at the L2 rate the unfused chain reached "
                "(an estimate, not a bound) (ms)",
    "fused_l2_bound": "True where the fused chain's minimum L2 time at the run's L2 peak exceeds its DRAM time "
                      "(True/False)",
    "saved_per_step_ms_low": "WHAT-IF: step time fusion would save over all layers at the upper estimate (ms)",
    "saved_per_step_ms_high": "WHAT-IF: step time fusion would save over all layers at the lower bound (ms)",
    # ranks and communication
    "rank": "Global rank of the process (count from 0)",
    "late_rank": "The rank the others wait for: the one whose late arrivals at the collectives cost the iteration "
                 "most (rank)",
    "collectives": "Collective operations the row covers: on the rank in the phase, or for the late rank the "
                   "collectives matched across ranks (count)",
    "arrived_last": "Collectives at which the late rank arrived last (it had the shortest kernel) (count)",
    "caused_wait_ms": "Waiting the late rank caused the other ranks, summed over the collectives it arrived last at "
                      "(ms)",
    "cost_ms": "What the late rank cost the iteration: at each collective it arrived last at, the least any other "
               "rank waited, summed (ms)",
    "cost_noise_ms": "That cost's noise: the largest cost of any other rank by the same rule (ms)",
    "cost_pct": "The late rank's cost as % of its profiled iteration (%)",
    "gpu_work_ms": "The late rank's GPU work in the profiled iteration: its compute plus its collectives' transfer "
                   "(ms)",
    "step_over_gpu_ms": "How far the step outlasts that GPU work: the low end of the median step's 95 % interval "
                        "less gpu_work_ms; time no kernel of the last rank to launch fills (ms)",
    "hosts_pace": "True where the hosts pace the step: on GPUs, the late rank's launch gaps set it apart and the "
                  "step outlasts its GPU work by 5 % of the step or more beyond noise (True/False)",
    "remedy": "Where the hosts pace the step: what takes the launches off the hosts (one CUDA graph, a larger "
              "batch per rank) and the command that measures it; empty otherwise (text)",
    "gap_median_us": "Median host launch gap between the rank's consecutive kernels (us)",
    "others_gap_median_us": "The other ranks' median of their median launch gaps (us)",
    "gap_total_ms": "The rank's launch gaps summed, the positive ones (ms)",
    "others_gap_total_ms": "The other ranks' median of their summed launch gaps (ms)",
    "compute_ms": "The rank's kernel time outside the collectives (ms)",
    "others_compute_ms": "The other ranks' median compute time (ms)",
    "sm_clock_mhz": "The late rank's median SM clock during the timed steps; empty where not sampled (MHz)",
    "others_sm_clock_mhz": "The other ranks' median SM clock during the timed steps (MHz)",
    "other_processes": "Most other processes seen on the late rank's GPU during the timed steps; empty where not "
                       "sampled (count)",
    "busy_pct": "The rank's busy time as % of its profiled iteration's span (%)",
    "transfer_ms": "The rank's collectives' time moving data: each collective's shortest kernel over the ranks (ms)",
    "wait_ms": "The rank's collectives' time waiting for the other ranks: their kernel time less the transfer (ms)",
    "node": "Host name of the rank's node (text)",
    "node_rank": "The node's number in the job (count from 0)",
    "tp_rank": "The rank's index in its tensor-parallel group (count from 0)",
    "dp_rank": "The rank's data-parallel index (count from 0)",
    "final_loss": "The rank's training loss after its last step (loss)",
    "peak_memory_bytes": "The rank's peak GPU memory allocated by torch (bytes)",
    "gpu_sharing": "What the rank's GPU showed during the timed steps (other processes, utilization, SM clock), as "
                   "run.json records it (text)",
    "comm_ms": "The rank's collectives' kernel time, transfer and waiting (ms)",
    "layer_kind": "The layers' kind: mamba2, mamba1, attention or mlp (text)",
    "collective": "The collective: all_reduce, all_gather, reduce_scatter, broadcast, ... (text)",
    "measured_min": "Fewest launches of the collective in one layer on one rank (count)",
    "measured_max": "Most launches of the collective in one layer on one rank (count)",
    "predicted": "Launches per layer the model's structure predicts at TP > 1 (count)",
    "matches": "True where every layer on every rank launches the predicted count (True/False)",
    "message_bytes": "The collective's size as NCCL-tests counts it; the median where the row groups several "
                     "(bytes)",
    "time_per_layer_us": "The collective's kernel time per layer and rank (us)",
    "ranks": "Ranks with kernels in the phase (count)",
    "count": "Launches of the collective at that size, over all ranks (count)",
    "mean_us": "Mean transfer time: each instance's shortest kernel over the ranks (us)",
    "wait_mean_us": "Mean time waiting for the other ranks (us)",
    "algbw_gb_per_s": "Algorithm bandwidth: message bytes over the mean transfer time (GB/s)",
    "busbw_gb_per_s": "Bus bandwidth as NCCL-tests computes it: algbw x the ring's bus factor (GB/s)",
    "pct_of_link": "Bus bandwidth as % of the link's datasheet bandwidth; empty without a link (%)",
    "comm_us": "Time the rank's collectives run in the phase: the union of their kernels (us)",
    "exposed_us": "The part of that time no compute kernel of the rank overlaps (us)",
    "overlap_pct": "Share of the communication time compute overlaps: 100 x (1 - exposed / communication) (%)",
    "wait_us": "Time the rank's collectives waited for the other ranks in the phase (us)",
    "transfer_us": "Time the collectives' transfer parts run in the phase: the union of them (us)",
    "exposed_transfer_us": "The part of the transfer time no compute overlaps (us)",
    "phase_span_us": "Span of the rank's phase, first start to last end (us)",
    "slowest_rank": "The rank with the most compute time in the phase (rank)",
    "fastest_rank": "The rank with the least compute time in the phase (rank)",
    "compute_max_us": "The slowest rank's compute time in the phase (us)",
    "compute_min_us": "The fastest rank's compute time in the phase (us)",
    "imbalance_pct": "How much longer the slowest rank computes: 100 x (max / min - 1) (%)",
    "span_max_us": "Longest span of the phase over the ranks (us)",
    "span_min_us": "Shortest span of the phase over the ranks (us)",
    "link": "The link projected to, by its datasheet name (text)",
    "world_size": "GPUs (ranks) of the run, TP x DP; in a projection, the GPU count projected to (count)",
    "projected_us": "PROJECTION: the phase's communication time per step on that link and GPU count, alpha-beta ring "
                    "model at the link's peak, no overlap (us)",
    "kind": "What the finding is about (host, SSM kernels, late rank, counters, crossover, ...): filter findings by "
            "it (text)",
    # scaling
    "gpus": "GPUs of the multi-GPU run (count)",
    "tp": "Tensor-parallel degree (count)",
    "dp": "Data-parallel degree (count)",
    "sequence_parallel": "True where sequence parallelism is on (True/False)",
    "single_gpu_step_ms": "Median step of the run's single-GPU twin: the single-GPU run of the same workload, preset, "
                          "config and GPU among those given (a single-GPU run is its own); empty where none is (ms)",
    "single_gpu_run": "The label of the run's single-GPU twin, whose steps its speedup is measured against; empty "
                      "where none is given (text)",
    "speedup": "Speedup over the single-GPU run: its median step over this one's (the global batch is the same) "
               "(ratio)",
    "speedup_low": "Low end of the speedup's 95 % bootstrap interval over the two runs' kept steps (ratio)",
    "speedup_high": "High end of the speedup's 95 % bootstrap interval (ratio)",
    "efficiency_pct": "Parallel efficiency: 100 x speedup / GPUs (%)",
    "efficiency_pct_low": "Low end of the efficiency's 95 % interval (%)",
    "efficiency_pct_high": "High end of the efficiency's 95 % interval (%)",
    "forward_per_layer": "Collectives per layer in the forward, as measured (most over layers and ranks), e.g. "
                         "'1 all_gather + 1 reduce_scatter'; per kind of layer where they differ (text)",
    "backward_per_layer": "Collectives per layer in the backward, as measured (text)",
    "as_predicted": "True where every layer's collective counts match the structure's prediction (True/False)",
    "exposed_transfer_ms": "Transfer time a step no compute hides: the largest over ranks of its forward and backward "
                           "exposed transfer (ms)",
    "layer_message_mib": "Size of the layers' largest collective (MiB)",
    "busbw_gb_per_s_min": "Lowest bus bandwidth of the layers' largest collectives over phases and kinds (GB/s)",
    "busbw_gb_per_s_max": "Highest bus bandwidth of the layers' largest collectives over phases and kinds (GB/s)",
    # a suite
    "throughput": "Items (tokens or samples) per second at the median step (items/s)",
    "peak_gib": "Peak GPU memory torch allocated during the run (GiB)",
    "counter_coverage_pct": "% of the profiled iteration's kernel time whose launches carry Nsight Compute counters "
                            "(%)",
    "counters": "The run's counters: checked, unchecked (schema 1: joined by name and never checked) or none (text)",
    "profile_wall_s": "Wall time of profiling the run: the harness and the counter passes (s)",
    "ssm_time_pct": "SSM kernels' share of the run's kernel time (%)",
    "dram_pct_of_peak": "SSM kernels' DRAM throughput as % of peak (Nsight Compute), time-weighted (%)",
    "l1_hit_pct": "SSM kernels' L1/TEX hit rate, time-weighted (%)",
    "l2_hit_pct": "SSM kernels' L2 hit rate, time-weighted (%)",
    "memory_bound_pct": "% of the SSM kernel time in memory-bound launches (%)",
    "counters_checked": "True where the SSM kernels carry counters that passed the self-checks (measured or lent) "
                        "(True/False)",
    "mma_sync_pct": "% of the SSM kernel time in kernels doing their bf16 tensor work on mma.sync (or on both "
                    "families); empty where the chip does not split them (%)",
    **_CLASS_COLUMNS,
    **_CATEGORY_COLUMNS,
    # a sweep
    "sweep": "The sweep's folder name (text)",
    "d_state": "The point's d_state: the SSM state size (a varied setting of the workload's config) (count)",
    "chunk_size": "The point's chunk_size: the SSD chunk length (a varied setting) (tokens)",
    "seq_len": "The point's seq_len: the sequence length (a varied setting) (tokens)",
    "result": "How the point ended: complete, pending, or `failed: <why>` (text)",
    "wall_s": "Wall time the point took; empty where it was not run (s)",
    "items_per_step": "Items (tokens or samples) per training step (count)",
    "step_us_per_item": "Median step over the items per step: the end-to-end time per token (us)",
    "kernel_us_per_item": "Kernel time of the profiled iteration per item: the step without the host's gaps (us)",
    "ssm_us_per_item": "SSM kernel time of the profiled iteration per item (us)",
    "busy_past_step_pct": "How far the profiled iteration's busy time exceeds the median step, where by more than "
                          "2 %; empty otherwise (%)",
    "profiled_span_ms": "Kernel span of the point's profiled iteration (ms)",
    "us_per_item": "The row's kernel time (of its category or kernel) per item at the point (us)",
    "regime": "What the limiter means on a regime map: bandwidth, compute, latency, or no counters (text)",
    "step": "Index of the kept timed step, from 0 (count)",
    "points": "Sweep points (grid values) the row compares (count)",
    "best_chunk_size": "The chunk_size with the lowest step time per item (the smaller of equals) (tokens)",
    "runner_up_chunk_size": "The chunk_size second by step time per item (tokens)",
    "runner_up_slower_pct": "How much slower the runner-up is than the best, per item (%)",
    "runner_up_slower_low_pct": "Low end of that excess's 95 % interval from the two points' kept steps (%)",
    "runner_up_slower_high_pct": "High end of that excess's 95 % interval (%)",
    "tied_with": "The values within noise of the best (text)",
    "best_chunk_size_ssm_time": "The chunk_size with the lowest SSM kernel time per item (tokens)",
    "ssm_time_tied_with": "The values within noise of that best, by SSM kernel time (text)",
    "workload_a": "The first workload of the pair (text)",
    "workload_b": "The second workload of the pair (text)",
    "crossover_seq_len": "seq_len where the two workloads' step time per item cross, linear in log(seq_len) between "
                         "the grid points around it; empty where they do not cross in the grid (tokens)",
    "faster_below": "The workload faster below the crossing (throughout where none) (text)",
    "faster_above": "The workload faster above the crossing (text)",
    "crossings": "Times the faster workload changes over the grid (count)",
    "crossover_low": "Highest grid value below the crossing where the first workload is faster beyond noise (tokens)",
    "crossover_high": "Lowest grid value where the other workload is faster beyond noise (tokens)",
    "noise_verdict": "The crossing against the steps' noise: crossover (both sides have a point beyond noise), no "
                     "crossover, or within noise (text)",
    "tied_at": "Grid values where the two are within noise (text)",
    "tied_gap_pct": "Their gap at those values, in order (text, %)",
    "crossover_seq_len_kernel_time": "seq_len where the two cross on kernel time per item instead of step time "
                                     "(tokens)",
    "kernel_crossover_low": "crossover_low on kernel time per item (tokens)",
    "kernel_crossover_high": "crossover_high on kernel time per item (tokens)",
    "kernel_noise_verdict": "noise_verdict on kernel time per item (text)",
    "kernel_tied_at": "tied_at on kernel time per item (text)",
    "kernel_tied_gap_pct": "tied_gap_pct on kernel time per item (text, %)",
    # CUDA graphs (`analysis.step.cuda_graphs`)
    "graphed_step_ms": "Median step replayed as one captured CUDA graph (--cuda-graphs); on several ranks the slowest "
                       "rank's, step by step (ms)",
    "graphed_speedup": "The single-GPU run's median step over this run's graphed step (graphed_step_ms): the speedup "
                       "without per-launch host cost (ratio)",
    "graphed_speedup_low": "Low end of graphed_speedup's 95 % bootstrap interval over the two sets of steps (ratio)",
    "graphed_speedup_high": "High end of graphed_speedup's 95 % bootstrap interval (ratio)",
    "gain_ms": "The eager step less the graphed step: the host cost the graph took off a step (ms)",
    "host_wait_ms": "The eager step less the GPU's busy time of the profiled iteration: the most a graph could take "
                    "off (ms)",
    "gain_share_of_host_wait": "gain_ms over host_wait_ms (share 0-1)",
    "check": "ok where the graphed step is not under the GPU's busy time (by 5 %), else why the two steps did not run "
             "the same work (text)",
    # the host's time in the sampled steps (`analysis.step.host_time`)
    "site": "Where the host was: the innermost Python frame outside torch, Triton and the standard library, as "
            "`path:line in function`; empty where the sampler saw none (text)",
    "ms": "Host time a step charged to the row, mean over the sampled steps (ms)",
    "ms_low": "Low end of the 95 % bootstrap interval of `ms` over the sampled steps (ms)",
    "ms_high": "High end of the 95 % bootstrap interval of `ms` over the sampled steps (ms)",
    "host_pct": "The row's share of the host's mean sampled step (%)",
    "host_ms": "The host's mean sampled step: every charge of a step summed (ms)",
    "attributed_pct": "Share of the host's time the sampler named (any category but unattributed) (%)",
    "wait_covered_pct": "The named host time as a share of the GPU's wait for the host, at most 100 (%)",
    "overhead_pct": "What sampling cost the step: sampled steps' median over the unsampled steps', less 1 (%)",
    "overhead_low_pct": "Low end of the 95 % interval of overhead_pct (%)",
    "overhead_high_pct": "High end of the 95 % interval of overhead_pct (%)",
    "sampled_steps": "Steps the sampler read (as many more ran unsampled between them) (count)",
    "readings": "Stack readings the sampler took over the sampled steps (count)",
    "interval_ms": "The sampler's mean period between readings (ms)",
    "gc_ms": "Host time a step in garbage collection, timed by gc.callbacks, mean over the sampled steps (ms)",
    "sync_ms": "Host time a step in synchronizing calls, mean over the sampled steps (ms)",
    "top_category": "What the rank's host spent most time on (a host category) (text)",
    "top_site": "The line the rank's host spent most time at (text)",
    "top_site_ms": "Host time a step at top_site (ms)",
    "cpus": "The CPUs the process may run on, as Linux lists them (text)",
    "cpu_numa_nodes": "The NUMA nodes of those CPUs (text)",
    "gpu_numa_node": "The NUMA node of the rank's GPU, from sysfs; empty where not exposed (index)",
    "on_gpu_node": "Whether the process's CPUs all lie on its GPU's NUMA node (yes/no)",
    "torch_threads": "torch's intra-op threads in the process (count)",
    "omp_num_threads": "OMP_NUM_THREADS as the process was given it; empty where unset (text)",
    "threads": "The process's threads after the timed steps (count)",
    "switches_per_step": "Context switches of the process a timed step, voluntary and involuntary (count)",
    "migrations_per_step": "Moves of the process's threads between CPUs a timed step (count)",
    "late_ms": "The late rank's host time a step at the line (ms)",
    "others_ms": "The other ranks' median host time a step at the line (ms)",
    "excess_ms": "The late rank's host time at the line beyond the others' median (ms)",
    "excess_share": "Running share of the late rank's total excess host time, largest lines first (share 0-1)",
    "aligned_launches": "Compute launches (collectives apart) lined up across the ranks by their order on each rank, "
                        "the first apart: the positions every rank has (count)",
    "names_agree_pct": "Share of those positions where every rank launched the same kernel (%)",
    "gap_excess_ms": "The late rank's GPU idle before its compute launches (start less the latest end of any earlier "
                     "launch, collectives included) beyond the other ranks' median, position by position, summed "
                     "(ms)",
    "gap_excess_noise_ms": "That excess's noise: the largest the same rule finds on a rank nobody delayed, against the "
                           "other on-time ranks; empty with fewer than two of them (ms)",
    "gap_excess_where": "That excess in words: how much, its noise and where at least 80 % of it falls (phases, "
                        "layers, the kernels whose launches waited) (text)",
    "by": "How the late rank's idle excess is grouped: phase, layer or kernel (the kernel whose launch waited) (text)",
    "group": "The phase, the layer (or outside the layers) or the kernel name (text)",
    "excess_pct": "The group's share of the late rank's total idle excess (%)",
    "covered_pct": "Running share of that excess, largest groups first; the groups stop at the first reaching 80 % "
                   "(%)",
    "launch_gap_median_us": "The late rank's median gap before the group's launches: its start less the latest end of "
                            "its earlier compute launches (us)",
    "others_launch_gap_median_us": "Median over the group's launches of the other ranks' median gap there (us)",
    # findings and provenance
    "status": "The finding's verdict, what pages and other analyses read (e.g. GPU-bound, memory-bound, late, tie) "
              "(text)",
    "value": "The finding's headline number as the page shows it (text)",
    "finding": "The finding as a sentence (text)",
    "anchor": "The section of the same page that holds the finding's evidence, by its name without the file's "
              "prefix (e.g. host, ssm_kernels) (text)",
    "impact_ms": "Step time the finding is about, what findings are ranked by; empty where it is about no time (ms)",
    "item": "What the provenance row describes: source, measured, GPU, host, versions, workload, config, kernels, "
            "counters, launches, profiling cost, ranks (text)",
}

# The exceptions: a name that holds another thing in one section than everywhere else ((section, column) -> meaning).
SECTION_MEANINGS: dict[tuple[str, str], str] = {
    ("host", "verdict"): "Who holds the step up: host-bound (the GPU idles over 30 % of the step, or launching "
                         "takes longer than running), host-limited (waits at least 5 %), GPU-bound, or waits for "
                         "rank N (text)",
    ("provenance", "value"): "What the run is for that item (text)",
    ("cuda_graphs", "speedup"): "The eager step's median over the graphed step's (ratio)",
    ("cuda_graphs", "speedup_low"): "Low end of that speedup's 95 % bootstrap interval over the two sets of steps "
                                    "(ratio)",
    ("cuda_graphs", "speedup_high"): "High end of that speedup's 95 % bootstrap interval (ratio)",
    ("cuda_graphs", "verdict"): "The graph's speedup against its noise: faster, slower or within noise (text)",
    ("host_categories", "category"): "What the host was doing (`schema.HOST_CATEGORIES`): Python, torch's Python, "
                                     "dispatch and CUDA API, Triton launcher, autograd engine, synchronizing calls, "
                                     "garbage collection, unattributed (text)",
    ("host_sites", "category"): "What the host was doing at the site (`schema.HOST_CATEGORIES`) (text)",
    ("suite-late_rank_gaps", "excess_ms"): "The late rank's GPU idle before the group's launches beyond the other "
                                           "ranks' median, position by position, summed (ms)",
    ("late_rank_sites", "category"): "What the late rank's host was doing at the site (`schema.HOST_CATEGORIES`) "
                                     "(text)",
    ("communication_projection", "kind"): "What the number is: a projection, its model and assumptions (text)",
    ("table_ii_causes", "cause"): "A cause of the difference between ssmprof's Table II and the study's (text)",
    ("table_ii_causes", "evidence"): "That cause's number: the kernels near the tolerance, the run's ngroups, the "
                                     "library versions (text)",
    ("dram_beside_study", "ceiling"): "The ceiling the DRAM use is a % of: Nsight Compute's peak, the run's DRAM "
                                      "ceiling or the datasheet's 3350 GB/s (text)",
    ("calibration_defects", "unit"): "Unit of achieved and ceiling: TFLOP/s or GB/s (text)",
    ("suite-step_times", "unit"): "Unit of the throughput: tokens/s or samples/s (text)",
    ("suite-step_times", "workload"): _RUN_LABEL,
    ("suite-category_shares", "workload"): _RUN_LABEL,
    ("suite-ssm_kernels", "workload"): _RUN_LABEL,
    ("sweep-points", "run"): "The point's run directory, beside the sweep's manifest; empty until complete (text)",
    ("sweep-steps", "step_ms"): "That one kept timed step's time (ms)",
    ("gemm_work", "measured_flops"): "Measured tensor FLOPs of the phase's GEMM launches with checked counters, "
                                     "summed (FLOP)",
    ("gemm_work", "analytic_flops"): "2MNK of those launches' recorded shapes, summed (FLOP)",
    ("tensor_vector_thresholds", "class"): "The kernel's class on FLOPs at today's 1 % tolerance (its flop_class) "
                                           "(text)",
    ("tensor_vector_ssm", "time_share"): "The class's share of the phase's SSM kernel time (share 0-1)",
    ("ssd_dataflow", "duration_ns"): "The kernel's measured time per layer: its launches' sum over the layers (ns)",
    ("ssd_fusion", "speedup_low"): "WHAT-IF: the chain's time over the fused upper estimate (ratio)",
    ("ssd_fusion", "speedup_high"): "WHAT-IF: the chain's time over the fused lower bound (ratio)",
    ("sweep-best", "noise_verdict"): "The best value against the steps' noise: best (no other value within noise) or "
                                     "tie (text)",
    ("bus_bandwidth", "ranks"): "Ranks in the collective's process group (the TP degree where not recorded) (count)",
    ("suite-parallel", "wait_ms"): "Time a step waiting for the other ranks: the largest over ranks of its forward and "
                                   "backward collectives' waiting (ms)",
}


def meaning(section: str, column: str) -> str | None:
    """What `column` holds in `section` (a section's exception first), None where nothing says."""
    return SECTION_MEANINGS.get((section, column), COLUMN_MEANINGS.get(column))


def _cell(section: str, column: str) -> str:
    """A column's meaning as a markdown table cell."""
    return (meaning(section, column) or "").replace("|", "\\|")


def section_titles() -> dict[str, str]:
    """Every section a CSV file can hold (by its file's name less a run's index; not the sections only a chart
    draws), run sections, then a suite's, then a sweep's, each in the order its dataclass declares them -> its
    title."""
    return {prefix + section.name: titles.get(section.name) or UNTITLED.get(prefix + section.name, "")
            for _, prefix, sections, titles in PAGES for section in fields(sections)
            if not section.metadata.get("chart_only")}


INTRO = """\
`ssmprof report RUN_DIR --csv DIR` writes every section of the report as a CSV file into DIR, one frame each as
`DataFrame.to_csv(index=False)` writes it (`reports.csv_files`: missing values empty, booleans True/False). One run:
`<section>.csv`. Several runs: `<i>-<section>.csv` for run i, in the order given, and `suite-<section>.csv` for the
suite's overview. A sweep folder (`ssmprof report SWEEP_DIR --csv DIR`, or `ssmprof sweep`'s `sweep-csv/`):
`sweep-<section>.csv`. A section the data cannot have (no counters, one GPU, no SSM kernels, ...) has no file. In a
notebook, `ssmprof.load(path).frames()` gives a run's sections as the same frames under the same names
(`ssmprof.load(path).summary.<section>` one of them); a sweep's tables name the columns of its varied settings after
them (`d_state`, `chunk_size`, `seq_len` below). The pages show the columns under human headers
(`reports.style.HEADERS`) and leave a few out; the CSV files keep every one.

Units: ms, us and ns are durations; % is 0-100; a share is a fraction 0-1; bytes are bytes, GB/s 1e9 bytes/s, MiB
2^20 bytes; text is words or names. The columns listed are those the bundled reference runs write (their reviewed
snapshots, tests/data/golden-bundled-runs); the meanings live in `reports.columns`."""


def column_reference(sections: dict[str, list[str]]) -> str:
    """docs/columns.md: the intro, then per page (a run, a suite, a sweep) each of `sections` (section -> its
    columns, as `section_titles` names them) in the order the dataclasses declare them, its title and a table of
    its columns' meanings; last, the sections declared that `sections` lacks. Raises ValueError for a section
    nothing declares or a column nothing says the meaning of."""
    titles = section_titles()
    unknown = sorted(set(sections) - set(titles))
    if unknown:
        raise ValueError(f"sections no dataclass declares: {', '.join(unknown)}")
    missing = [f"{section}: {column}" for section, columns in sections.items() for column in columns
               if meaning(section, column) is None]
    if missing:
        raise ValueError(f"columns without a meaning in reports/columns.py: {'; '.join(missing)}")
    lines = ["# CSV columns: what each section's columns hold", "",
             "<!-- written by scripts/column_reference.py (python scripts/column_reference.py); do not edit -->", "",
             INTRO]
    for page, prefix, declared, _ in PAGES:
        keys = [prefix + section.name for section in fields(declared) if prefix + section.name in sections]
        lines += ["", f"## {page}"]
        for key in keys:
            lines += ["", f"### {key}", "", f"*{titles[key]}*", "", "| column | meaning |", "|---|---|"]
            lines += [f"| `{column}` | {_cell(key, column)} |" for column in sections[key]]
    absent = [key for key in titles if key not in sections]
    if absent:
        lines += ["", "## Sections no bundled run writes", "",
                  "Declared, but no bundled reference run has the data for them, so their columns are not listed here:",
                  ""]
        lines += [f"- `{key}`: {titles[key]}" for key in absent]
    return "\n".join(lines) + "\n"
