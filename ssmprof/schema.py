"""The data contract: every file ssmprof writes is defined, versioned, read and written here, and only here.

A run directory = `run.json` + `kernels.parquet`; everything downstream reads only this.

`kernels.parquet` has one row per kernel launch of the profiled training iteration. Its columns are
`KERNEL_COLUMNS` (identity, context, time; always present) and `COUNTER_COLUMNS` (raw Nsight Compute
values in canonical units, NaN where not collected), each documented below with its unit. Analyses may
add columns (e.g. `category`) to the frames they return; the file holds measurements only.

`run.json` says who, what and where: GPU and clocks as found, software versions, workload, preset and
config, kernel provenance, the Triton autotuning choices of the profiled process (`triton_autotune`, optional),
harness numbers, collector costs and coverage, and `status`: "complete", or "failed: <why>". Run
directories are written atomically (a hidden `.NAME.partial-PID` sibling renamed into place at the end), so
an interrupted run never looks like a good one. `RunInfo` types the keys readers rely on and keeps any others.

Beside runs: the device profile (`DeviceProfile`, by `ssmprof calibrate`), the regression baseline
(`Baseline`, by `ssmprof baseline`), the suite manifest (`SuiteManifest`, by `ssmprof suite`) and the sweep
manifest (`SweepManifest`, by `ssmprof sweep`): pydantic
models with a `version`, written by `write_document` and read by `read_document`, which turns a missing,
unreadable, other-version or malformed file into one `CorruptFile` line.

The run history is a folder of parquet files, one per appended run (`write_history_entry`, `HISTORY_COLUMNS`);
questions across its runs are DuckDB queries, in `history_store`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails

from ssmprof.errors import CorruptFile, CorruptRun, SsmprofError

SCHEMA_VERSION = 2  # 2: launch_shapes, shared_mem_bytes, counter_status, counter_lender; run.json `checks`
RUN_JSON = "run.json"
KERNELS_PARQUET = "kernels.parquet"
PHASES = ("forward", "backward", "optimizer")  # the NVTX-marked phases of a training step (profiler.markers)
FORWARD, BACKWARD, OPTIMIZER = PHASES
SCRIPT_PRESET = "script"  # run.json `workload.preset` of a --script run: its sizes are the script's own
# What the host was doing when the sampler read its stack (`profiler.host_sampler`, run.json `harness.host_time`):
# Python of the model and the loop, torch's own Python (modules, functional, optimizer), a call into C (dispatch and
# the CUDA API: launches, allocation), Triton's launcher, autograd's engine (C++), a call that waits for the GPU,
# garbage collection, and the rest of a step after its last reading
HOST_CATEGORIES = ("Python", "torch's Python", "dispatch and CUDA API", "Triton launcher", "autograd engine",
                   "synchronizing calls", "garbage collection", "unattributed")
PYTHON, TORCH_PYTHON, DISPATCH, TRITON, AUTOGRAD, SYNCHRONIZING, GARBAGE_COLLECTION, UNATTRIBUTED = HOST_CATEGORIES
PHASE_VALUES = (*PHASES, "other")  # `phase` of a launch: one of PHASES, or "other" (outside every phase)


@dataclass(frozen=True)
class Column:
    dtype: str  # pandas dtype
    unit: str
    description: str
    default: Any = None  # the value of a column a table lacks (None: required, or NaN for counters)


# A launch configuration: the grid and block a kernel was launched with (kernels.parquet's columns of that name).
LAUNCH_CONFIG = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]


def config_label(row: Any) -> str:
    """A launch configuration in words, one format on every page and note: "grid 4x8x4 block 128x1x1". `row`:
    anything indexed by the LAUNCH_CONFIG column names (a frame's row, a record)."""
    return (f"grid {row['grid_x']}x{row['grid_y']}x{row['grid_z']} "
            f"block {row['block_x']}x{row['block_y']}x{row['block_z']}")


def duration_words(seconds: float) -> str:
    """A wait in words, one format for the cost a profile prints before its counter passes and the page that
    reports it after: "45 s", "2 min 10 s" (whole seconds)."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


KERNEL_COLUMNS: dict[str, Column] = {
    "launch_idx": Column("int64", "", "order of the launch within the profiled iteration, from 0"),
    "kernel_name": Column("string", "", "short demangled name: no namespace, template arguments or parameters"),
    "kernel_name_full": Column("string", "", "full demangled name"),
    "phase": Column("string", "", "forward, backward, optimizer or other (outside the three phase ranges)"),
    "launch_op": Column("string", "", "the framework op that launched it (e.g. aten::mm), empty if unknown"),
    "stream": Column("int64", "", "CUDA stream id"),
    "grid_x": Column("int64", "blocks", "grid size, x"),
    "grid_y": Column("int64", "blocks", "grid size, y"),
    "grid_z": Column("int64", "blocks", "grid size, z"),
    "block_x": Column("int64", "threads", "block size, x"),
    "block_y": Column("int64", "threads", "block size, y"),
    "block_z": Column("int64", "threads", "block size, z"),
    "shared_mem_bytes": Column("int64", "bytes", "shared memory per block, static + dynamic (-1: not recorded); with "
                               "name, grid and block the launch configuration Nsight Compute counts invocations by"),
    "launch_shapes": Column("string", "", "input shapes of the launching op as torch.profiler records them (JSON), "
                            "empty if unknown: with the op, what identifies the problem a library kernel solves"),
    "start_ns": Column("int64", "ns", "start on the timeline, relative to the iteration's first kernel"),
    "duration_ns": Column("int64", "ns", "duration on the timeline (torch.profiler/CUPTI): the time base"),
    "counter_status": Column("string", "", "where this row's counters come from: measured (this launch was "
                             "profiled), lent (from a profiled launch of the same configuration and problem, or scaled "
                             "by `counter_scale` from another problem of it or its family's nearest grid), "
                             "rejected: <check> (counters failed a self-check and were removed), unmatched (no "
                             "profiled launch of its problem), not collected, or unchecked (schema 1 runs)"),
    "counter_lender": Column("int64", "", "launch_idx of the launch whose counters this row carries (its own when "
                             "measured), -1 when none"),
}
# Where a launch ran in a multi-GPU (tensor/data-parallel) run and what it communicated. Optional: a single-GPU
# run (and every run written before these existed) is rank 0 with no layer ranges and no collectives.
PARALLEL_COLUMNS: dict[str, Column] = {
    "rank": Column("int64", "", "global rank of the process that launched it (0 in a single-GPU run)", 0),
    "layer": Column("int64", "", "model layer whose `ssmprof/layer/<i>/<kind>` range (forward or backward) the "
                    "launch fell in; -1 outside every layer or where layers were not marked", -1),
    "layer_kind": Column("string", "", "that layer's kind: mamba2, mamba1, attention or mlp (empty: none)", ""),
    "collective": Column("string", "", "the collective a communication launch performs: all_reduce, all_gather, "
                         "reduce_scatter, broadcast, ... (empty: not a collective)", ""),
    "message_bytes": Column("int64", "bytes", "a collective's size as NCCL-tests counts it (all-reduce: the "
                            "buffer; all-gather: the gathered output; reduce-scatter: the input); -1: none", -1),
    "group_size": Column("int64", "ranks", "ranks in the collective's process group; -1 where not recorded", -1),
}
# How a lent launch's counters were made from its lender's (`profiler.counters.attach_counters`). Optional: runs
# written before families were lent by grid lent only within a configuration, at scale 1.
LENDING_COLUMNS: dict[str, Column] = {
    "counter_scale": Column("float64", "x", "the factor the lender's work counters (bytes, instructions, tensor "
                            "ops, waves) were multiplied by: this launch's grid over its lender's where it borrows "
                            "from another grid of its family, 1 where measured or lent within its configuration",
                            1.0),
}
# On the CPU (gloo) there are no kernels: a run's rows are its innermost aten ops and its gloo collectives, and
# `stream` holds the thread id.

# Statuses whose counters passed the self-checks: the only counters analyses may trust.
CHECKED_STATUSES = ("measured", "lent")

# Canonical counter column -> Nsight Compute metric (Hopper names; ncu 2025.3). Units are canonical:
# bytes, percent, counts. FLOPs are derived in analysis (fp32 = fadd + fmul + 2 * ffma; a tensor-path op
# is one FLOP, as calibrated on the H100: 2*M*N*K ops for an M x N x K GEMM).
COUNTER_METRICS: dict[str, tuple[str, str, str]] = {
    "ncu_duration_ns": ("gpu__time_duration.sum", "ns", "kernel duration under ncu (replayed, clocks as found)"),
    "dram_read_bytes": ("dram__bytes_read.sum", "bytes", "bytes read from DRAM"),
    "dram_write_bytes": ("dram__bytes_write.sum", "bytes", "bytes written to DRAM"),
    "dram_throughput_pct": ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "DRAM throughput, % of peak"),
    "l2_bytes": ("lts__t_bytes.sum", "bytes", "bytes requested from L2"),
    "l2_hit_rate_pct": ("lts__t_sector_hit_rate.pct", "%", "L2 sector hit rate"),
    "l2_throughput_pct": ("lts__t_bytes.avg.pct_of_peak_sustained_elapsed", "%", "L2 bytes, % of peak"),
    "l1_bytes": ("l1tex__t_bytes.sum", "bytes", "bytes requested from L1/TEX"),
    "l1_hit_rate_pct": ("l1tex__t_sector_hit_rate.pct", "%", "L1/TEX sector hit rate"),
    "inst_fadd": ("sm__sass_thread_inst_executed_op_fadd_pred_on.sum", "inst", "fp32 adds (thread instructions)"),
    "inst_fmul": ("sm__sass_thread_inst_executed_op_fmul_pred_on.sum", "inst", "fp32 multiplies"),
    "inst_ffma": ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "inst", "fp32 fused multiply-adds"),
    "inst_hadd": ("sm__sass_thread_inst_executed_op_hadd_pred_on.sum", "inst", "fp16 adds"),
    "inst_hmul": ("sm__sass_thread_inst_executed_op_hmul_pred_on.sum", "inst", "fp16 multiplies"),
    "inst_hfma": ("sm__sass_thread_inst_executed_op_hfma_pred_on.sum", "inst", "fp16 fused multiply-adds"),
    "inst_dadd": ("sm__sass_thread_inst_executed_op_dadd_pred_on.sum", "inst", "fp64 adds"),
    "inst_dmul": ("sm__sass_thread_inst_executed_op_dmul_pred_on.sum", "inst", "fp64 multiplies"),
    "inst_dfma": ("sm__sass_thread_inst_executed_op_dfma_pred_on.sum", "inst", "fp64 fused multiply-adds"),
    "tensor_ops_bf16": ("sm__ops_path_tensor_src_bf16_dst_fp32.sum", "ops", "tensor-path ops, bf16 in, fp32 acc"),
    "tensor_ops_fp16": ("sm__ops_path_tensor_src_fp16.sum", "ops", "tensor-path ops, fp16 in"),
    "tensor_ops_tf32": ("sm__ops_path_tensor_src_tf32_dst_fp32.sum", "ops", "tensor-path ops, tf32 in"),
    "tensor_ops_fp64": ("sm__ops_path_tensor_src_fp64.sum", "ops", "tensor-path ops, fp64"),
    "tensor_ops_fp8": ("sm__ops_path_tensor_src_fp8.sum", "ops", "tensor-path ops, fp8 in"),
    "tensor_ops_bf16_wgmma": ("sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum", "ops",
                              "bf16 tensor ops issued as Hopper warpgroup MMA (wgmma/HGMMA)"),
    "tensor_ops_bf16_mma": ("sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32.sum", "ops",
                            "bf16 tensor ops issued as warp-level MMA (mma.sync/HMMA; Triton SSD kernels)"),
    "tensor_pipe_pct": ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", "%",
                        "tensor pipe active, % of peak while the SM is active"),
    "fma_pipe_pct": ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", "%",
                     "FMA pipe active, % of peak while the SM is active"),
    "alu_pipe_pct": ("sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active", "%",
                     "ALU pipe (integer, logic, compare, conversion) active, % of peak while the SM is active"),
    "xu_pipe_pct": ("sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active", "%",
                    "XU pipe (special functions: exp, log, rcp, sqrt) instruction rate, % of peak, SM active"),
    "lsu_pipe_pct": ("sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active", "%",
                     "load/store pipe instruction rate, % of peak while the SM is active"),
    "issue_active_pct": ("smsp__issue_active.avg.pct_of_peak_sustained_active", "%",
                         "cycles a warp scheduler issued an instruction, % of cycles it was active"),
    "achieved_occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active", "%",
                               "resident warps per active cycle, % of the SM's maximum (achieved occupancy)"),
    # The instruction-level bounds (`analysis.limits.instruction_bounds`, Ding & Williams' instruction roofline): warp
    # instructions against the schedulers' issue peak (one a cycle each), and shared memory as a level of its own
    # (the L1 columns above exclude it), in transactions (wavefronts: one a cycle per SM at most) and bytes.
    "warp_inst_executed": ("smsp__inst_executed.sum", "inst", "warp instructions executed"),
    "inst_issue_pct": ("smsp__inst_executed.avg.pct_of_peak_sustained_active", "%",
                       "warp instructions per active cycle, % of the issue peak (one per scheduler per cycle)"),
    "shared_wavefronts": ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", "wavefronts",
                          "shared-memory transactions (wavefronts) of the L1 data pipe: loads, stores, atomics, "
                          "ldmatrix and wgmma operand reads"),
    "shared_pipe_pct": ("l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_active", "%",
                        "shared-memory wavefronts, % of the L1 data pipe's peak (one a cycle) while active"),
    "shared_bytes": ("sm__sass_data_bytes_mem_shared.sum", "bytes", "shared-memory bytes the instructions access"),
    # launch attributes: recorded for every profiled launch at no extra replay pass
    "registers_per_thread": ("launch__registers_per_thread", "registers", "registers per thread"),
    "waves_per_sm": ("launch__waves_per_multiprocessor", "waves", "thread-block waves per SM (grid / resident)"),
    "occupancy_limit_registers": ("launch__occupancy_limit_registers", "blocks",
                                  "blocks per SM the register file allows"),
    "occupancy_limit_shared_mem": ("launch__occupancy_limit_shared_mem", "blocks",
                                   "blocks per SM shared memory allows"),
    "occupancy_limit_warps": ("launch__occupancy_limit_warps", "blocks", "blocks per SM the warp slots allow"),
    "occupancy_limit_blocks": ("launch__occupancy_limit_blocks", "blocks", "blocks per SM the block slots allow"),
}


def _metric_columns(metrics: dict[str, tuple[str, str, str]]) -> dict[str, Column]:
    """Float columns for a metric group, each described by its meaning and the metric it holds."""
    return {name: Column("float64", unit, f"{description} [{metric}]")
            for name, (metric, unit, description) in metrics.items()}


COUNTER_COLUMNS: dict[str, Column] = _metric_columns(COUNTER_METRICS)
# Why warps wait, from a separate Nsight Compute pass over the first launch of the kernels that matter
# (warp-state counters take replay passes of their own; `profiler.counters.stall_targets`). Each reason is
# the average number of warps stalled on it per issue cycle: they add up to `stall_warps_per_issue`, the
# warps resident per issue cycle (ncu's "warp cycles per issued instruction" breakdown).
STALL_REASONS: dict[str, str] = {
    "long_scoreboard": "waiting on global/local memory (L1TEX) results",
    "short_scoreboard": "waiting on shared memory or special-function (MIO) results",
    "barrier": "waiting at a thread-block barrier",
    "membar": "waiting at a memory barrier",
    "mio_throttle": "MIO queue full (shared memory, special functions)",
    "lg_throttle": "local/global memory queue full",
    "tex_throttle": "texture/L1 pipe queue full",
    "math_pipe_throttle": "math pipe busy (waiting for its turn on FMA/ALU/XU/tensor)",
    "gmma": "waiting on warpgroup MMA (wgmma) results",
    "wait": "fixed-latency dependency",
    "dispatch_stall": "dispatcher stall",
    "branch_resolving": "waiting for a branch target",
    "no_instruction": "instruction cache miss or fetch",
    "imc_miss": "immediate constant cache miss",
    "sleeping": "sleeping (nanosleep or all threads yielded)",
    "drain": "draining memory stores at exit",
    "misc": "miscellaneous",
    "not_selected": "eligible, another warp was issued",
    "selected": "issuing",
}
STALL_METRICS: dict[str, tuple[str, str, str]] = {
    "stall_duration_ns": ("gpu__time_duration.sum", "ns", "kernel duration under the warp-stall pass"),
    "stall_warps_per_issue": ("smsp__average_warps_active_per_issue_active.ratio", "warps/issue",
                              "warps resident per issue cycle (the sum of the stall reasons)"),
    **{f"stall_{reason}": (f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio", "warps/issue",
                           f"warps stalled per issue cycle: {meaning}")
       for reason, meaning in STALL_REASONS.items()},
}
STALL_COLUMNS: dict[str, Column] = {
    **_metric_columns(STALL_METRICS),
    "stall_lender": Column("float64", "", "launch_idx of the launch whose warp-stall counters this row carries (its "
                           "own when profiled in the stall pass; the same configuration and problem otherwise), "
                           "NaN where none"),
}
ALL_COLUMNS: dict[str, Column] = {**KERNEL_COLUMNS, **PARALLEL_COLUMNS, **LENDING_COLUMNS, **COUNTER_COLUMNS,
                                  **STALL_COLUMNS}


class SchemaError(SsmprofError):
    pass


class _Open(BaseModel):
    """A run.json section: the keys readers rely on are typed, any others are kept (run.json grows new
    sections and keys, e.g. `triton_autotune`, without a schema version bump)."""

    model_config = ConfigDict(extra="allow")


class _RunSection(_Open):
    """A run.json section ssmprof writes: every key is declared, and an unknown one is refused on writing and
    reading, so that a writer's typo or a key added without its declaration here fails at once, not in a reader
    that never finds it. Keys a reader does not use yet are declared too, with the type the writer gives them."""

    model_config = ConfigDict(extra="forbid")


class WorkloadSection(_Open):
    name: str
    preset: str
    config: dict[str, Any]


class WorkloadSource(_Open):
    """run.json `workload.source`: where a workload outside the suite came from (`workloads.user.Origin`): the
    spec that loads it again, its file and that file's sha256 as loaded, and the module of a `module:Name`."""

    spec: str
    file: str
    sha256: str
    module: str | None = None


class RunWorkload(WorkloadSection):
    """run.json `workload`: a baseline keeps `WorkloadSection` (written as the run had it)."""

    overrides: dict[str, Any] = {}
    source: WorkloadSource | None = None  # a user's `file.py:Name` or `module:Name` only

    model_config = ConfigDict(extra="forbid")


class GpuSection(_Open):
    name: str


class Clocks(_RunSection):
    """run.json `gpu.clocks`, as nvidia-smi reported them when the run started (none on the CPU)."""

    sm_mhz: int | float | None = None
    memory_mhz: int | float | None = None
    driver: str | None = None
    sm_max_mhz: int | float | None = None
    memory_max_mhz: int | float | None = None
    note: str | None = None  # why the clocks were not read


class RunGpu(GpuSection):
    """run.json `gpu` (a device profile keeps `GpuSection`)."""

    sm_count: int | None = None
    compute_capability: str | None = None  # "9.0": picks Nsight Compute's metric set (`profiler.ncu_argv.chip_for`)
    memory_bytes: int | None = None
    l2_bytes: int | None = None
    clocks: Clocks = Clocks()

    model_config = ConfigDict(extra="forbid")


class HostSection(_RunSection):
    """run.json `host`: the CPU that launched the kernels (a step partly bound by the host differs between hosts)."""

    cpu: str = "not recorded"
    cpu_count: int | None = None
    hostname: str | None = None
    python: str | None = None


class GraphedSteps(_RunSection):
    """run.json `harness.cuda_graphs`: the timed steps replayed as one CUDA graph (`--cuda-graphs`)."""

    step_ms: float | None = None
    step_times_ms: list[float] = []


class HostTime(_RunSection):
    """run.json `harness.host_time`: where the host's time in a step went (`profiler.host_sampler`). `steps` more
    steps after the timed ones, sampled and unsampled in turn (their GPU step times: the sampler's overhead), and what
    each sampled step's host time was charged to, as (step, category of HOST_CATEGORIES, site, ms); where the
    sampler failed, only why (`missing`)."""

    missing: str | None = None
    interval_ms: float = 0.0
    switch_interval_ms: float = 0.0
    readings: int = 0
    sampled_steps_ms: list[float] = []
    unsampled_steps_ms: list[float] = []
    rows: list[tuple[int, str, str, float]] = []


class ProcessSection(_RunSection):
    """run.json `harness.process` (and each rank's in `parallel.ranks`): where the training process ran beside its
    GPU and what Linux counted over its timed steps (`profiler.harness.process_record`)."""

    cpus: str  # the CPUs it may run on, as Linux lists them ("0-63")
    cpu_count: int
    cpu_numa_nodes: list[int] = []  # the NUMA nodes of those CPUs
    gpu_numa_node: int | None = None  # its GPU's, from sysfs; None where not exposed or off the GPU
    omp_num_threads: str | None = None  # the environment's, as given
    mkl_num_threads: str | None = None
    torch_threads: int | None = None  # torch's intra-op threads
    threads: int | None = None  # the process's threads after the timed steps
    per_step: dict[str, float] = {}  # voluntary_switches, involuntary_switches, migrations a timed step


class HarnessSection(_RunSection):
    step_ms: float  # median of `step_times_ms`
    throughput: float
    step_times_ms: list[float] = []
    # each profiled iteration's time (ms) and how many the harness ran to find one like the timed steps
    # (`profiler.harness.representative`); absent in runs written before it kept them
    profiled_ms: list[float] | None = None
    profiled_tries: int | None = None
    items_per_step: int | None = None  # tokens, images or graphs per step (`unit`)
    unit: str | None = None
    peak_memory_bytes: int | None = None
    seconds: dict[str, float] = {}  # build, warm-up, timed and profiled steps
    warmup: int | None = None  # warm-up steps before the timed ones; a counter pass repeats them
    peak_reserved_bytes: int | None = None
    final_loss: float | None = None
    cuda_graphs: GraphedSteps | None = None
    # the calls of one step that make the host wait for the GPU, counted by site (`profiler.syncs`); absent off the
    # GPU, for a --script run and in runs written before it was looked for
    sync_sites: dict[str, int] | None = None
    host_time: HostTime | None = None  # absent where not sampled and in runs written before the sampler
    # the timed steps were extended to the harness's cap and their median's interval is still wider than 5 %
    # (`noise.steady`); absent where it held, or was not asked
    steps_capped: bool | None = None
    process: ProcessSection | None = None  # absent in runs written before it was recorded


class HarnessCollector(_RunSection):
    wall_s: float = float("nan")
    # a parallel run: the part of `wall_s` its sampled steps' own job took (`distributed.sampled_hosts`)
    sampled_job_s: float | None = None
    host_launch_us: float | None = None  # the host's cost of a tiny launch (`profiler.harness`)
    autotune_from: str | None = None  # the run whose Triton autotuning choices this one pinned (--autotune-from)


class TimingPass(_RunSection):
    """run.json `collectors.timeline.timing`: the pipelined iterations timed under CUDA activity alone
    (`profiler.timeline.timed_table`): each one's kernel span, the one whose times the kernel table holds
    (`kept`, the median span), the detail pass's own span (host ops recorded: the old traced iteration), and
    whether the two passes joined ("joined", or why not)."""

    iterations: int
    spans_ms: list[float] = []
    kept: int | None = None
    detail_span_ms: float | None = None
    joined: str = ""


class TimelineCollector(_RunSection):
    tool: str | None = None
    wall_s: float | None = None
    ranks: int | None = None  # multi-rank runs: the ranks whose timelines were recorded
    timing: TimingPass | None = None  # absent in runs written before the timing pass


class PassReplay(_RunSection):
    """One Nsight Compute pass's replays: launches profiled, median replay passes and GiB restored per pass."""

    launches: int
    passes_median: float
    gib_per_pass_median: float
    gib_per_pass_max: float | None = None


class LentFamily(_RunSection):
    """A family profiled at grid bins (`profiler.counters.family_errors`): its configurations and launches, their
    share of the kernel time, how many were measured and lent, and the held-out check of lending by grid (median
    |lent / measured - 1| in % over `held_out` measured launches inside its measured grids; None: none to hold
    out, or the counter not collected)."""

    family: str
    kernel_name: str
    configurations: int
    launches: int
    time_fraction: float
    measured: int
    lent: int
    held_out: int
    dram_error_pct: float | None = None
    l2_error_pct: float | None = None
    inst_error_pct: float | None = None


class NotProfiled(_RunSection):
    """Launches a counter pass left out by rule: `functions` under `min_share` of the kernel time each (or, for
    the second pass, problems under it), and the share of kernel time they hold together."""

    launches: int = 0
    functions: int = 0
    min_share: float = 0.0
    time_fraction: float = 0.0


class StallPass(_RunSection):
    """run.json `collectors.counters.stalls`: the warp-stall pass (`profiler.counters.stall_targets`)."""

    profiled_not_placed: list[str] = []
    functions: list[str] = []
    launches_profiled: int | None = None
    time_fraction: float | None = None


class CountersCollector(_RunSection):
    """run.json `collectors.counters`: how Nsight Compute was run and what it could not do. `profiled_not_placed`:
    the launch configurations profiled whose counters found no launch of the timeline to sit on, a defect of
    the join (or a kernel the child ran differently) that the report names."""

    mode: str = "none"  # none, sampled, focus, ... (`--counters`)
    # the caches before each replayed pass (`--ncu-cache`, `profiler.ncu_argv.CACHE_CONTROL`): "flush", Nsight Compute's
    # default, or "keep"; None in runs recorded before the option, which all flushed
    cache: str | None = None
    tool: str | None = None
    wall_s: float = 0.0
    pass_wall_s: list[float] = []
    pass_replay: list[PassReplay | None] = []
    pass_seconds: list[dict[str, float]] = []  # each pass's parts outside the replayed iteration, by name
    # the plan's cost as predicted before its passes started (`profiler.counter_cost`), whole and per pass, the
    # --budget it was chosen within, and what that budget made it leave out (words; empty: nothing)
    predicted_s: float | None = None
    pass_predicted_s: list[float] = []
    budget_s: float | None = None
    left_out: str = ""
    minor_functions: NotProfiled | None = None
    too_small_for_pass_2: NotProfiled | None = None
    profiled_not_placed: list[str] = []
    stalls: StallPass | None = None
    chip: str | None = None  # Nsight Compute's metric set (`profiler.ncu_argv.chip_for`)
    metrics: list[str] = []
    stall_metrics: list[str] = []
    columns_not_collected: dict[str, str] = {}  # column -> why
    columns_not_on_chip: list[str] = []
    configurations: int | None = None  # launch configurations of the timeline
    ambiguous_configurations: list[str] = []
    launches_profiled: int | None = None
    kernels_profiled: int | None = None
    profiled_not_on_timeline: list[str] = []
    targeted_invocations: dict[str, list[int]] = {}  # function -> the invocations a targeted pass profiled
    focus_kernels: list[str] = []  # --counters focus
    families: list[LentFamily] = []  # the families profiled at grid bins, with their held-out check
    # the share of the counter passes' report rows that found their launch on the timeline (None: before it was kept)
    grid_match_pct: float | None = None
    traced_weights: bool | None = None  # the passes ran the traced iteration's weights (`Workload.routes_tokens`)
    pass_gpus: int | None = None
    pass_work: dict[str, Any] | None = None  # each pass's training losses, checked alike (`check_same_work`)
    replay_mode: str | None = None  # kernel or application
    replay_through_host: bool | None = None
    report_bytes: int | None = None
    rank: int | None = None  # multi-rank runs: the first rank profiled
    ranks: list[int] = []  # multi-rank runs: the ranks profiled


class CollectorsSection(_RunSection):
    harness: HarnessCollector = HarnessCollector()
    timeline: TimelineCollector = TimelineCollector()
    counters: CountersCollector = CountersCollector()


class CoverageSection(_RunSection):
    launches: int
    phase_time_fraction: float
    counter_time_fraction: float
    kernel_time_ns: int | None = None


class RejectedGroup(_RunSection):
    """A row of `checks.rejected`: the launches of one kernel and phase whose counters one self-check removed.
    For the GEMM FLOPs check, the evidence (medians over the launches; None for other checks and in runs
    written before them): measured tensor FLOPs / 2MNK and the upper bound they were held to (see
    `analysis.trust.counter_checks`)."""

    kernel_name: str
    phase: str
    check: str
    launches: int
    time_ns: int
    launch_op: str | None = None  # None in runs grouped without it
    gemm_ratio: float | None = None
    gemm_ratio_max: float | None = None


class ChecksSection(_RunSection):
    """run.json `checks` (schema 2): the counter self-checks' summary
    (`analysis.trust.counter_checks.check_counters`)."""

    rejected: list[RejectedGroup] = []
    status_time_fraction: dict[str, float] = {}  # counter_status -> share of kernel time
    status_launches: dict[str, int] = {}  # counter_status -> launches
    max_fraction_of_peak: dict[str, float] = {}  # unit -> the largest measured fraction of its datasheet peak
    hit_rates_clipped: int | None = None
    duration_tolerance: dict[str, float] | None = None
    gemm_ratio_band: dict[str, Any] | None = None
    gemm_flops: dict[str, Any] = {}  # phase -> measured and analytic GEMM FLOPs
    stalls: dict[str, Any] | None = None  # the warp-stall self-check's tolerance and what it rejected


class Link(_RunSection):
    """The datasheet link between a multi-GPU run's GPUs (`hardware.link_for`)."""

    name: str = "link not known"
    gb_s: int | float | None = None  # a direction
    key: str | None = None
    latency_us: float | None = None
    source: str | None = None


class ParallelSection(_RunSection):
    """run.json `parallel` (multi-rank runs only): the split, each rank's harness numbers (`ranks`: one dict
    per rank with `rank`), the link, and the rank Nsight Compute profiled (None: none did)."""

    world_size: int = 1
    tp: int = 1
    dp: int = 1
    sequence_parallel: bool = False
    counters_rank: int | None = None
    ranks: list[dict[str, Any]] = []
    link: Link | None = None
    nccl_version: str | None = None
    backend: str | None = None  # nccl or gloo
    nnodes: int = 1
    counters_ranks: list[int] = []
    topology: str | None = None  # `nvidia-smi topo -m` as printed


class ClockReading(_RunSection):
    """A clock sampled while the timed steps ran (MHz): median, min, max, and how many samples."""

    median: float
    min: float
    max: float
    samples: int = 0


class GpuSharingSection(_RunSection):
    """run.json `gpu_sharing`: whether other processes held the GPU while the timed steps ran (sampled through
    NVML, `profiler.nvml.SharingMonitor`); `shared` None where it could not be read. Absent in older runs."""

    shared: bool | None
    samples: int
    shared_sample_fraction: float | None = None
    max_other_processes: int | None = None
    other_pids: list[int] = []
    sm_utilization_pct: float | None = None
    memory_utilization_pct: float | None = None
    sm_clock_mhz: ClockReading | None = None  # sampled during the timed steps; absent in older runs
    note: str | None = None


class RunInfo(_RunSection):
    """run.json as every reader takes it: validated on every write and read, and passed on typed. Sections
    and keys a reader relies on are typed here; optional ones have the default a missing key means."""

    schema_version: int
    status: str
    created: str | None = None  # ISO time the run was written
    workload: RunWorkload
    gpu: RunGpu
    host: HostSection = HostSection()
    versions: dict[str, Any]
    provenance: dict[str, Any]
    triton_autotune: dict[str, list] = {}  # kernel -> [(key, ..., config text)] chosen by Triton's autotuner
    harness: HarnessSection
    collectors: CollectorsSection
    coverage: CoverageSection
    checks: ChecksSection | None = None  # schema 2; absent in schema 1 runs
    gpu_sharing: GpuSharingSection | None = None  # absent in runs profiled before it was sampled
    parallel: ParallelSection | None = None  # multi-rank runs only


@dataclass
class Run:
    """A run directory as every reader takes it: run.json typed (`RunInfo`), the kernel table in contract order,
    and where it was read from (None for a run built in memory)."""

    info: RunInfo
    kernels: pd.DataFrame
    path: Path | None = None


# Columns earlier run directories carry that the contract no longer holds: dropped on reading. sm_throughput_pct
# (`sm__throughput`, a composite of many units' throughputs) was collected and never read by any analysis.
RETIRED_COLUMNS = frozenset({"sm_throughput_pct"})


def countable(kernels: pd.DataFrame) -> pd.DataFrame:
    """The launches whose time counters can describe: all but a parallel run's collectives, which Nsight Compute
    never replays (a replayed NCCL kernel deadlocks) and whose time on a waiting rank is the other ranks' lateness,
    not work. Read alike by run.json's coverage and the counter-status table, so the share is one answer."""
    return kernels[kernels["collective"].fillna("") == ""] if "collective" in kernels else kernels


def conform_kernels(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with every contract column, in contract order and dtypes (counters default to NaN)."""
    missing = [name for name in KERNEL_COLUMNS if name not in frame.columns]
    if missing:
        raise SchemaError(f"kernel table lacks required columns: {', '.join(missing)}")
    bad_phase = set(frame["phase"].dropna().unique()) - set(PHASE_VALUES)
    if bad_phase:
        raise SchemaError(f"unknown phase values {sorted(bad_phase)}; allowed: {', '.join(PHASE_VALUES)}")
    if list(frame.columns) == list(ALL_COLUMNS) and all(
            frame[name].dtype == pd.api.types.pandas_dtype(column.dtype) for name, column in ALL_COLUMNS.items()):
        return frame.reset_index(drop=True)  # as written: its columns' arrays kept as they are, not copied
    out = {}
    for name, column in ALL_COLUMNS.items():
        values = frame[name] if name in frame.columns else (float("nan") if column.default is None
                                                            else column.default)
        try:
            out[name] = pd.Series(values, index=frame.index).astype(column.dtype)
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"column {name} cannot be {column.dtype}: {exc}") from None
    extra = [c for c in frame.columns if c not in ALL_COLUMNS and c not in RETIRED_COLUMNS]
    if extra:
        raise SchemaError(f"kernel table has columns outside the contract: {', '.join(extra)}")
    return pd.DataFrame(out, index=frame.index).reset_index(drop=True)  # one block a type, not one a column


def _from_schema_1(kernels: pd.DataFrame) -> pd.DataFrame:
    """A schema-1 kernel table with the columns schema 2 added: its counters were joined by (short name, grid
    size, block size), which lends one problem's counters to another, and never checked: `unchecked`."""
    counted = kernels["ncu_duration_ns"].notna() if "ncu_duration_ns" in kernels.columns else False
    return kernels.assign(shared_mem_bytes=-1, launch_shapes="", counter_lender=-1,
                          counter_status=np.where(counted, "unchecked", "not collected"))


def check_info(info: dict) -> RunInfo:
    """run.json's dict as the typed `RunInfo`; a defect is one `SchemaError` line."""
    try:
        return RunInfo.model_validate(info)
    except ValidationError as exc:
        raise SchemaError(f"run.json {_defects(exc)}") from None


def _defects(exc: ValidationError, shown: int = 6) -> str:
    """A pydantic validation error as one line: missing keys, unknown keys (dotted paths), then wrong values."""
    errors = exc.errors()
    missing = [_dotted(e["loc"]) for e in errors if e["type"] == "missing"]
    unknown = [_dotted(e["loc"]) for e in errors if e["type"] == "extra_forbidden"]
    wrong = [_wrong(e) for e in errors if e["type"] not in ("missing", "extra_forbidden")]
    parts = [f"lacks: {_first(missing, shown)}"] if missing else []
    parts += [f"unknown keys: {_first(unknown, shown)}"] if unknown else []
    parts += [_first(wrong, shown, "; ")] if wrong else []
    return "; ".join(parts)


def _wrong(error: ErrorDetails) -> str:
    """One wrong value in words: the key, what it should be and what the file holds. pydantic's message names
    our classes ("a valid dictionary or instance of RunGpu"), which mean nothing to the user: a model is "an
    object" here, as JSON calls it."""
    expected = re.sub(r"a valid dictionary( or instance of \w+)?", "an object", error["msg"])
    expected = re.sub(r"(an )?instance of \w+", "an object", expected)
    given = repr(error.get("input"))
    given = given if len(given) <= 40 else given[:37] + "..."
    return f"{_dotted(error['loc']) or 'document'}: {expected}, got {given}"


def _dotted(loc: tuple) -> str:
    return ".".join(map(str, loc))


def _first(items: list[str], shown: int, sep: str = ", ") -> str:
    more = f"{sep}... ({len(items) - shown} more)" if len(items) > shown else ""
    return sep.join(items[:shown]) + more


def new_run_info(sections: dict[str, Any]) -> RunInfo:
    """A run.json about to be written, typed: the sections a writer built, stamped with this schema's version and
    the complete status; a defect (a missing or unknown key, a wrong value) is one `SchemaError` line."""
    return check_info({**sections, "schema_version": SCHEMA_VERSION, "status": "complete"})


def write_run(path: Path, info: RunInfo, kernels: pd.DataFrame, overwrite: bool = False,
              extra_files: dict[str, Path] | None = None) -> Path:
    """Write a complete run directory atomically (with `extra_files` copied in by name); returns its path. run.json
    holds the keys the writer set (`new_run_info`), not every default of `RunInfo`."""
    path = Path(path)
    document = info.model_dump(mode="json", exclude_unset=True)
    table = conform_kernels(kernels)
    if path.exists() and not overwrite:
        raise SsmprofError(f"{path} exists already (choose another --out, or remove it)")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.parent / f".{path.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir()
        table.to_parquet(staging / KERNELS_PARQUET, index=False)
        for name, source in (extra_files or {}).items():
            shutil.copyfile(source, staging / name)
        (staging / RUN_JSON).write_text(json.dumps(document, indent=2, default=str))
        if path.exists():
            shutil.rmtree(path)
        os.replace(staging, path)
    except OSError as exc:
        raise SsmprofError(f"cannot write run directory {path}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path


def write_stage(path: Path, stage: str) -> None:
    """A rank's stage file: the harness stage it last entered, one line of text (`distributed._behind` reads it)."""
    path.write_text(stage)


def read_stage(path: Path) -> str:
    """A rank's stage file ("" where the rank never wrote one)."""
    return path.read_text() if path.exists() else ""


def _check_exists(path: Path) -> None:
    if not path.exists():
        raise CorruptRun(f"{path} does not exist (give a run directory written by `ssmprof profile`)")


def run_identity(path: Path) -> str:
    """A run directory's identity: a digest of its run.json and kernels.parquet bytes. A copy of a run is the
    same run (same identity), so a history or baseline can refuse to count one measurement twice; any rerun,
    even of one configuration, differs in its times and its creation time."""
    _check_exists(Path(path))
    digest = hashlib.sha256()
    for name in (RUN_JSON, KERNELS_PARQUET):
        try:
            digest.update((Path(path) / name).read_bytes())
        except OSError as exc:
            raise CorruptRun(f"{Path(path) / name} cannot be read ({exc.strerror or exc})") from None
    return digest.hexdigest()[:16]


def read_run_info(path: Path) -> RunInfo:
    """Read and validate a run directory's run.json alone (what a caller needing no kernels reads); any defect
    is a `CorruptRun` with one line saying what."""
    path = Path(path)
    _check_exists(path)
    if path.name == RUN_JSON and path.is_file():
        raise CorruptRun(f"{path} is a run's {RUN_JSON}: give its run directory, {path.parent}")
    if not (path / RUN_JSON).is_file():
        raise CorruptRun(f"{path} is not a run directory (no {RUN_JSON})")
    try:
        info = json.loads((path / RUN_JSON).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptRun(f"{path / RUN_JSON} is not valid JSON ({exc})") from None
    if not isinstance(info, dict):
        raise CorruptRun(f"{path / RUN_JSON} is not a JSON object")
    status = info.get("status")
    if status != "complete":
        raise CorruptRun(f"{path} is not a complete run (status: {status})")
    version = info.get("schema_version")
    if version not in (1, SCHEMA_VERSION):
        raise CorruptRun(f"{path} has schema version {version}, this ssmprof reads 1 and {SCHEMA_VERSION}")
    try:
        return check_info(info)
    except SchemaError as exc:
        raise CorruptRun(f"{path}: {exc}") from None


def read_run(path: Path) -> Run:
    """Read and validate a run directory (`read_run_info`, then kernels.parquet); any defect is a `CorruptRun`
    with one line saying what."""
    path = Path(path)
    typed = read_run_info(path)
    try:
        kernels = pd.read_parquet(path / KERNELS_PARQUET)
        kernels = conform_kernels(kernels if typed.schema_version == SCHEMA_VERSION else _from_schema_1(kernels))
    except SchemaError as exc:
        raise CorruptRun(f"{path}: {exc}") from None
    except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError) on a damaged file
        raise CorruptRun(f"{path / KERNELS_PARQUET} cannot be read ({exc})") from None
    # a profiled iteration launches kernels: an empty table is a run cut short, and every reader below (span,
    # shares, baseline noise) would divide by it or take the max of nothing
    if kernels.empty:
        raise CorruptRun(f"{path / KERNELS_PARQUET} holds no kernels: not a profiled iteration")
    return Run(typed, kernels, path)



# --- The other files ssmprof writes: device profile, baseline, suite manifest. Each is a versioned model,
# written only by `write_document` and read only by `read_document`, which turns any defect into one line.


class _Closed(BaseModel):
    """Part of a file only ssmprof writes: unknown keys are refused (a misspelt key must not pass silently)."""

    model_config = ConfigDict(extra="forbid")


class _Versioned(_Closed):
    """A whole file. `VERSION` is what this ssmprof writes and reads; `WHAT` names the file in messages."""

    VERSION: ClassVar[int]
    WHAT: ClassVar[str]
    REBUILD: ClassVar[str] = ""  # how to make a file of this version from one of another, where there is a way
    version: int


class MeasuredCeilings(_Closed):
    dram_gb_s: float
    l2_gb_s: float | None = None  # None where the measurement was not trustworthy (the profile's note says why)
    l1_gb_s: float | None = None  # profiles measured before the L1 ceiling have none
    bf16_tensor_tflops: float
    fp32_tflops: float
    source: str = "measured by ssmprof calibrate"


class CalibrationCheck(_Closed):
    """One known-work check of `ssmprof calibrate` (see `profiler/calibrate.KNOWN_WORK`)."""

    check: str
    kernel: str
    expected: float
    measured: float | None  # None (NaN when computed) where the check's kernel was not found
    unit: str
    error_pct: float | None
    tolerance_pct: float
    passed: bool


class DeviceProfile(_Versioned):
    """`ssmprof calibrate`'s output: ceilings measured on one GPU (`gpu.name`), which rooflines of runs from
    that GPU use instead of the datasheet's, beside the checks that vouch for the counter formulas."""

    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "device profile"
    # Profiles written before the field existed have none; their format is version 1.
    version: int = 1
    gpu: GpuSection
    measured: MeasuredCeilings
    datasheet: dict[str, float]
    checks: list[CalibrationCheck]
    ncu_wall_s: float
    note: str | None = None
    # Which probe and collector set each ceiling, and each collector's own measures (the ceiling is the faster,
    # see `analysis.trust.calibration.combined_ceilings`); profiles written before the probes ran under Nsight Compute
    # have neither.
    set_by: dict[str, str] = {}
    by_collector: dict[str, dict[str, float | None]] = {}


class BaselineRow(_Closed):
    """One measurement over the baseline's runs: a scope (total, phase, category, site, kernel: see
    `analysis.change.gate`), what it is of (the key fields that scope uses; "" and 0 otherwise) and a metric."""

    scope: str
    kernel_name: str = ""
    phase: str = ""
    launch_op: str = ""
    category: str = ""
    grid_x: int = 0
    grid_y: int = 0
    grid_z: int = 0
    block_x: int = 0
    block_y: int = 0
    block_z: int = 0
    metric: str
    median: float
    spread: float  # median absolute deviation scaled to a standard deviation
    runs: int  # how many of the baseline's runs had this row


class BaselineSource(_Closed):
    """Where the baseline's runs were measured: `ssmprof regress` refuses runs of another GPU or config
    (unless told otherwise) and names any other difference in its summary."""

    gpu: str
    driver: str | None = None  # run.json gpu.clocks.driver, where recorded
    host: dict[str, Any] | None = None  # run.json host, where recorded
    versions: dict[str, Any]
    runs: list[str]  # the run directories' names


class Baseline(_Versioned):
    """`ssmprof baseline`'s output, the reference `ssmprof regress` gates runs of the same workload on.
    Version 2: every scope (totals, phases, categories, sites, kernels) and where the runs came from;
    version 1 baselines (kernels only) are refused: rebuild them with `ssmprof baseline`."""

    VERSION: ClassVar[int] = 2
    WHAT: ClassVar[str] = "baseline"
    REBUILD: ClassVar[str] = "rebuild it from its runs with `ssmprof baseline RUN... -o FILE`"
    workload: WorkloadSection
    source: BaselineSource
    rows: list[BaselineRow]

    def table(self) -> pd.DataFrame:
        return pd.DataFrame([row.model_dump() for row in self.rows], columns=list(BaselineRow.model_fields))


class SuiteManifest(_Versioned):
    """What `ssmprof suite` wrote into its folder (`SUITE_MANIFEST`): the runs (directory names beside the
    manifest, in suite order) of one preset, and how long the suite took."""

    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "suite manifest"
    preset: str
    counters: str
    steps: int
    workloads: list[str]
    runs: list[str]
    wall_s: float


SUITE_MANIFEST = "suite.json"

PENDING, COMPLETE, FAILED = "pending", "complete", "failed"  # a sweep point's status: or "failed: <why>"


class SweepPoint(_Closed):
    """One point of a sweep: a workload at one combination of the varied settings."""

    workload: str
    settings: dict[str, Any]  # the varied settings of this point, typed as the workload's config types them
    status: str = PENDING  # pending (not run yet), complete, or "failed: <one line why>"
    run: str | None = None  # its run directory, beside the manifest, once complete
    wall_s: float | None = None  # how long the point took, where it was run

    @property
    def complete(self) -> bool:
        return self.status == COMPLETE


class SweepManifest(_Versioned):
    """What `ssmprof sweep` writes into its folder (`SWEEP_MANIFEST`), rewritten after every point so that an
    interrupted sweep says which points ran: the workloads, one preset, the settings held (`fixed`) and varied
    (`axes`, values in grid order), how each point ended, and how long the sweep took so far."""

    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "sweep manifest"
    workloads: list[str]
    preset: str
    axes: dict[str, list[Any]]
    fixed: dict[str, Any]
    counters: str
    steps: int
    points: list[SweepPoint]
    wall_s: float


SWEEP_MANIFEST = "sweep.json"
Document = TypeVar("Document", bound=_Versioned)


def make_document(kind: type[Document], **fields) -> Document:
    """A document of this ssmprof's version, validated now (a defect is a bug here, not in a file)."""
    try:
        return kind.model_validate({"version": kind.VERSION, **fields})
    except ValidationError as exc:
        raise SchemaError(f"{kind.WHAT} {_defects(exc)}") from None


def write_document(document: _Versioned, path: Path) -> Path:
    """Write atomically (a hidden sibling renamed into place): a reader never sees half a file, and a sweep
    manifest rewritten after every point is whole whenever the sweep is interrupted."""
    path = Path(path)
    staging = _staged(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging.write_text(document.model_dump_json(indent=2) + "\n")
        os.replace(staging, path)
    except OSError as exc:
        raise SsmprofError(f"cannot write {document.WHAT} {path}: {exc.strerror or exc}") from None
    finally:
        staging.unlink(missing_ok=True)
    return path


def read_document(kind: type[Document], path: Path) -> Document:
    """Read and validate a device profile, baseline or suite manifest; any defect is one `CorruptFile` line."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptFile(f"cannot read {kind.WHAT} {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise CorruptFile(f"{kind.WHAT} {path} is not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise CorruptFile(f"{kind.WHAT} {path} is not a JSON object")
    field = kind.model_fields["version"]
    if "version" not in document and field.is_required():  # e.g. a run.json given as the baseline
        raise CorruptFile(f"{kind.WHAT} {path} has no version: it is not a {kind.WHAT} that ssmprof wrote")
    found = document.get("version", field.default)
    if found != kind.VERSION:
        rebuild = f": {kind.REBUILD}" if kind.REBUILD else ""
        raise CorruptFile(f"{kind.WHAT} {path} has version {found}, this ssmprof reads {kind.VERSION}{rebuild}")
    try:
        return kind.model_validate(document)
    except ValidationError as exc:
        raise CorruptFile(f"{kind.WHAT} {path} is not a valid {kind.WHAT}: {_defects(exc)}") from None


# --- The profiler's scratch files: what a multi-GPU run's ranks, a counter pass's child and a sharded sweep's
# points hand to the process that joins them. Each is a versioned model written atomically by `write_document`
# (a reader polling a shared folder never sees half a file) and read by `read_document`; frames and traces go
# through `write_frame` / `write_trace` below. Nothing in `profiler/` opens a file itself.


class RankJob(_Versioned):
    """What every rank of a multi-GPU run does (`profiler.distributed`), as one file the torchrun job's ranks
    read: the workload and split, the mode (`distributed.MODES`), the shared folder the ranks write into, the
    ranks Nsight Compute wraps (`ncu_ranks`) and the pass they replay (`ncu_pass`, counters mode only), and whether
    the step is also timed as one CUDA graph (`cuda_graphs`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "rank job"
    version: int = 1
    workload: str
    preset: str
    overrides: dict[str, Any]
    warmup: int
    steps: int
    tp: int
    dp: int
    sequence_parallel: bool
    device: str  # "cuda" or "cpu"
    mode: str
    scratch: str  # the folder (shared by every node) the ranks write their results into
    allow_fallback: bool = False
    autotune: str | None = None  # an `AutotunePins` file: the timeline's Triton choices, pinned by counter passes
    keep_trace: bool = False  # timeline mode: also write each rank's raw torch.profiler trace
    # train and timeline modes, GPU only: also capture the step, its collectives inside, as one CUDA graph and time
    # its replays (`harness.time_graphed_steps`; `--cuda-graphs`)
    cuda_graphs: bool = False
    ncu_ranks: tuple[int, ...] = ()  # counters mode: the ranks that run under Nsight Compute
    ncu_pass: dict[str, Any] | None = None  # counters mode: report stem, mode, metrics, targets, names, timeout

    @property
    def world_size(self) -> int:
        return self.tp * self.dp


class RankRun(_Open):
    """A rank's harness result (`harness.RunResult` as a dict): the keys the merge of the ranks reads, typed; the
    rest kept as the harness wrote them."""

    step_times_ms: list[float]
    final_loss: float | None = None
    peak_memory_bytes: int | None = None
    gpu: dict[str, Any] = {}
    gpu_sharing: dict[str, Any] | None = None  # `nvml.SharingMonitor.summary`; None off the GPU
    graphed_step_times_ms: list[float] | None = None  # `--cuda-graphs`: the rank's replays; None without
    host_time: dict[str, Any] | None = None  # `harness.sampled_steps`; None where not sampled
    process: dict[str, Any] | None = None  # `harness.process_record`


class RankResult(_Versioned):
    """What one rank wrote at its end (`rank-<r>.json`): who it was, its harness result (`harness.RunResult`
    as a dict) or its numerics check, its Triton choices, or the one line it failed with."""

    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "rank result"
    version: int = 1
    rank: int
    node: str  # the host the rank ran on
    node_rank: int = 0  # its torchrun agent's number (GROUP_RANK): which node of the job
    tp_rank: int | None = None
    dp_rank: int | None = None
    result: RankRun | None = None
    numerics: dict[str, Any] | None = None
    triton_autotune: dict[str, Any] = {}
    timing: TimingPass | None = None  # timeline mode on the GPU: the rank's timing pass (`timeline.timed_table`)
    error: str | None = None
    failed_at: float | None = None  # when it failed (seconds since the epoch): the first rank to fail is the cause


class ScriptJob(_Versioned):
    """What `ssmprof profile --script` asks of a training script's process (`profiler.script_child`): the
    script and its arguments, the device, the mode (`timeline`: warm up, time, profile under torch.profiler;
    `counters`: the same iteration under Nsight Compute), the iterations of each stage, and where the result
    goes. Its path is the environment variable `api.SCRIPT_ENV`, the protocol `ssmprof.step()` reads."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "script job"
    version: int = 1
    script: str  # as the user named it: error lines name it so
    args: list[str] = []
    device: str  # "cuda" or "cpu"
    mode: str  # "timeline" or "counters"
    warmup: int
    steps: int
    # iterations timed under CUDA activity alone after the timed ones (`timeline.TimelineCapture.timing_window`),
    # whose kernel times stand for the profiled iteration's; 0: none (the CPU, counter passes)
    timing_iterations: int = 0
    # iterations after the timed ones, unsampled and sampled in turn (`profiler.host_sampler`); 0: none (counter
    # passes)
    sampled_iterations: int = 0
    result: str  # the `ScriptResult` file (timeline mode)
    table: str  # the kernel table's parquet file (timeline mode)
    # an `AutotunePins` file pinned at the first marked step: the timeline's Triton choices (counters mode), or
    # those of the run --autotune-from names (the timeline)
    autotune: str | None = None


class ScriptResult(_Versioned):
    """What a profiled script's process wrote at its end: its harness result (`harness.RunResult` as a dict),
    its Triton choices and the iterations it ran, or the one line it failed with and that line's error kind
    (`errors` class name)."""

    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "script result"
    version: int = 1
    steps_run: int = 0
    result: dict[str, Any] | None = None
    triton_autotune: dict[str, Any] = {}
    timing: TimingPass | None = None  # the timing pass joined to the profiled iteration (`timeline.timed_table`)
    error: str | None = None
    error_kind: str | None = None


class AutotunePins(_Versioned):
    """The Triton autotuning choices of a timeline run (`autotune.snapshot`), which its counter passes pin."""

    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "autotune choices"
    version: int = 1
    choices: dict[str, Any]


def write_autotune_pins(choices: dict[str, Any], folder: Path) -> Path:
    """The pins file (`AutotunePins`) a counter pass or a script's child reads, written as `folder`/autotune.json."""
    return write_document(make_document(AutotunePins, choices=choices), folder / "autotune.json")


class PassRecord(_Versioned):
    """What a counter pass's child wrote (`profiler.ncu_child --timings`): when each stage began and ended
    (time.time() stamps and the harness's seconds per stage), and the work it ran (`work`: GPU, config, kernel
    provenance, loss), which the passes of one profile must agree on (`counters.check_same_work`)."""

    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "pass timings"
    version: int = 1
    stamps: dict[str, float]
    work: dict[str, Any] = {}


class SweepPointFile(_Versioned):
    """One point of a sweep as its own file (`points/<run>.json` beside the manifest): written by whichever
    process (shard) ran the point, so that shards never rewrite one another's points; the manifest read
    through `read_sweep` carries them."""

    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "sweep point"
    version: int = 1
    point: SweepPoint
    shard: str = "1/1"


SWEEP_POINTS = "points"


def read_sweep(folder: Path) -> SweepManifest:
    """The sweep manifest in `folder` with each point's own file (`SWEEP_POINTS`) laid over it: what every
    shard of the sweep finished, whichever process wrote the manifest last."""
    manifest = read_document(SweepManifest, Path(folder) / SWEEP_MANIFEST)
    found = {}
    points_folder = Path(folder) / SWEEP_POINTS
    for path in sorted(points_folder.glob("*.json")) if points_folder.is_dir() else []:
        point = read_document(SweepPointFile, path).point
        found[(point.workload, json.dumps(point.settings, sort_keys=True))] = point
    points = [found.get((p.workload, json.dumps(p.settings, sort_keys=True)), p) for p in manifest.points]
    return manifest.model_copy(update={"points": points})


def _staged(path: Path) -> Path:
    """A hidden sibling unique to this process and thread: concurrent writers never share one."""
    import threading

    return path.parent / f".{path.name}.partial-{os.getpid()}-{threading.get_ident()}"


def _write_atomically(path: Path, write) -> Path:
    """`write(staging)` into a hidden sibling of `path`, then renamed into place: a reader never sees half a file;
    any failure is one line."""
    path = Path(path)
    staging = _staged(path)
    try:
        write(staging)
        os.replace(staging, path)
    except OSError as exc:
        raise SsmprofError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        staging.unlink(missing_ok=True)
    return path


def write_frame(frame: pd.DataFrame, path: Path) -> Path:
    """A scratch table (a rank's kernels) written atomically as parquet."""
    return _write_atomically(path, lambda staging: frame.to_parquet(staging, index=False))


# --- The history: one parquet file per appended run in a folder; `history_store` queries them across runs.

HISTORY_VERSION = 1
HISTORY_GLOB = "*.parquet"
HISTORY_RUN_COLUMNS: dict[str, Column] = {  # the same on every row of one appended run
    "history_version": Column("int64", "", "version of this table's layout (HISTORY_VERSION)"),
    "run_id": Column("string", "", "unique per run: created time, workload and the run's `run_identity`"),
    "created": Column("string", "", "when the run was profiled (run.json `created`, ISO 8601, UTC)"),
    "commit": Column("string", "", "the commit of the code the run measured (CI: the commit under test)"),
    "workload": Column("string", "", "workload name"),
    "preset": Column("string", "", "preset name"),
    "config": Column("string", "", "the workload config as sorted JSON: runs of one config are one series"),
    "gpu": Column("string", "", "GPU name"),
    "driver": Column("string", "", "driver version, empty if not recorded"),
    "host_cpu": Column("string", "", "CPU of the host, empty if not recorded"),
    "versions": Column("string", "", "software versions as sorted JSON"),
    "gpu_shared": Column("string", "", "whether other processes used the GPU during the timed steps: yes, no, "
                         "or unknown (not sampled)"),
}
HISTORY_ROW_COLUMNS: dict[str, Column] = {  # one measurement of the run
    "scope": Column("string", "", "step (the harness), total, phase, category, site or kernel (see "
                    "`analysis.change.gate`)"),
    "kernel_name": Column("string", "", "kernel (site and kernel scopes), else empty"),
    "phase": Column("string", "", "phase (phase, site and kernel scopes), else empty"),
    "launch_op": Column("string", "", "launching op (site and kernel scopes), else empty"),
    "category": Column("string", "", "category (category and kernel scopes), else empty"),
    **{axis: Column("int64", "", "launch configuration (kernel scope), else 0") for axis in LAUNCH_CONFIG},
    "metric": Column("string", "", "what `value` is, e.g. time_ns, time_per_launch_ns, step_ms, host_wait_ms, "
                     "pct_of_roof, dram_throughput_pct, achieved_occupancy_pct, limiter"),
    "value": Column("float64", "", "the measurement in the metric's unit (NaN for `limiter`)"),
    "low": Column("float64", "", "lower end of its 95 % interval, NaN where none"),
    "high": Column("float64", "", "upper end of its 95 % interval, NaN where none"),
    "label": Column("string", "", "a text value (the limiter), else empty"),
}
HISTORY_COLUMNS = {**HISTORY_RUN_COLUMNS, **HISTORY_ROW_COLUMNS}


def write_history_entry(folder: Path, rows: pd.DataFrame) -> Path:
    """Append one run to the history folder: a new parquet file (written beside, renamed into place), so
    concurrent appends never touch each other's files and a reader never sees half of one."""
    missing = [c for c in HISTORY_COLUMNS if c not in rows]
    if missing or rows["run_id"].nunique() != 1:
        raise SchemaError(f"a history entry is one run with every history column (missing: {missing})")
    table = rows[list(HISTORY_COLUMNS)].astype({name: c.dtype for name, c in HISTORY_COLUMNS.items()})
    folder = make_folder(folder)
    return _write_atomically(folder / f"{rows['run_id'].iloc[0]}.parquet",
                             lambda staging: table.to_parquet(staging, index=False))


def read_frame(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise CorruptFile(f"{path} cannot be read ({exc})") from None


def write_trace(trace: dict, path: Path) -> Path:
    """A torch.profiler (Kineto) trace, gzipped JSON as HolisticTraceAnalysis reads it, written atomically."""
    import gzip

    def write(staging: Path) -> None:
        with gzip.open(staging, "wt") as f:
            json.dump(trace, f)

    return _write_atomically(path, write)


def read_trace(path: Path) -> dict:
    """A Chrome trace as torch.profiler exports it (plain or gzipped JSON)."""
    import gzip

    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise CorruptFile(f"trace {path} cannot be read ({exc})") from None


def copy_file(source: Path, destination: Path) -> Path:
    """Copy a file the profiler produced (an Nsight Compute report) to where the user asked, atomically."""
    return _write_atomically(destination, lambda staging: shutil.copyfile(source, staging))


def make_folder(path: Path) -> Path:
    """A scratch folder (and its parents), there already or made now."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SsmprofError(f"cannot make folder {path}: {exc.strerror or exc}") from None
    return Path(path)


def remove_folder(path: Path) -> None:
    """Remove a scratch folder and what it holds."""
    shutil.rmtree(path, ignore_errors=True)


def signal_file(path: Path) -> None:
    """Create an empty file one process waits for (a counter pass's go-ahead)."""
    Path(path).touch()
