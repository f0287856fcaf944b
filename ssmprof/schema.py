"""The data contract: a run directory = `run.json` + `kernels.parquet`. Everything downstream reads only this.

`kernels.parquet` has one row per kernel launch of the profiled training iteration. Its columns are
`KERNEL_COLUMNS` (identity, context, time; always present) and `COUNTER_COLUMNS` (raw Nsight Compute
values in canonical units, NaN where not collected), each documented below with its unit. Analyses may
add columns (e.g. `category`) to the frames they return; the file holds measurements only.

`run.json` says who, what and where: GPU and clocks as found, software versions, workload, preset and
config, kernel provenance, the Triton autotuning choices of the profiled process (`triton_autotune`, optional),
harness numbers, collector costs and coverage, and `status`: "complete", or "failed: <why>". Run
directories are written atomically (a hidden `.NAME.partial-PID` sibling renamed into place at the end), so
an interrupted run never looks like a good one.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ssmprof.errors import CorruptRun, SsmprofError

SCHEMA_VERSION = 2  # 2: launch_shapes, shared_mem_bytes, counter_status, counter_lender; run.json `checks`
RUN_JSON = "run.json"
KERNELS_PARQUET = "kernels.parquet"
PHASE_VALUES = ("forward", "backward", "optimizer", "other")


@dataclass(frozen=True)
class Column:
    dtype: str  # pandas dtype
    unit: str
    description: str


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
                             "profiled), lent (from a profiled launch of the same configuration and problem), "
                             "rejected: <check> (counters failed a self-check and were removed), unmatched (no "
                             "profiled launch of its problem), not collected, or unchecked (schema 1 runs)"),
    "counter_lender": Column("int64", "", "launch_idx of the launch whose counters this row carries (its own when "
                             "measured), -1 when none"),
}
COUNTER_STATUSES = ("measured", "lent", "unmatched", "not collected", "unchecked")  # plus "rejected: <check>"

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
    "sm_throughput_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "SM throughput, % of peak"),
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
}
COUNTER_COLUMNS: dict[str, Column] = {
    name: Column("float64", unit, f"{description} [{metric}]")
    for name, (metric, unit, description) in COUNTER_METRICS.items()
}
ALL_COLUMNS: dict[str, Column] = {**KERNEL_COLUMNS, **COUNTER_COLUMNS}

# run.json: required keys (dotted paths) that readers rely on.
REQUIRED_RUN_KEYS = (
    "schema_version", "status", "workload.name", "workload.preset", "workload.config", "gpu.name", "versions",
    "provenance", "harness.step_ms", "harness.throughput", "collectors", "coverage.launches",
    "coverage.phase_time_fraction", "coverage.counter_time_fraction",
)


class SchemaError(SsmprofError):
    pass


@dataclass
class Run:
    info: dict
    kernels: pd.DataFrame
    path: Path | None = None


def conform_kernels(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with every contract column, in contract order and dtypes (counters default to NaN)."""
    missing = [name for name in KERNEL_COLUMNS if name not in frame.columns]
    if missing:
        raise SchemaError(f"kernel table lacks required columns: {', '.join(missing)}")
    bad_phase = set(frame["phase"].dropna().unique()) - set(PHASE_VALUES)
    if bad_phase:
        raise SchemaError(f"unknown phase values {sorted(bad_phase)}; allowed: {', '.join(PHASE_VALUES)}")
    out = pd.DataFrame(index=frame.index)
    for name, column in ALL_COLUMNS.items():
        values = frame[name] if name in frame.columns else float("nan")
        try:
            out[name] = pd.Series(values, index=frame.index).astype(column.dtype)
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"column {name} cannot be {column.dtype}: {exc}") from None
    extra = [c for c in frame.columns if c not in ALL_COLUMNS]
    if extra:
        raise SchemaError(f"kernel table has columns outside the contract: {', '.join(extra)}")
    return out.reset_index(drop=True)


def _from_schema_1(kernels: pd.DataFrame) -> pd.DataFrame:
    """A schema-1 kernel table with the columns schema 2 added: its counters were joined by (short name, grid
    size, block size), which lends one problem's counters to another, and never checked: `unchecked`."""
    counted = kernels["ncu_duration_ns"].notna() if "ncu_duration_ns" in kernels.columns else False
    return kernels.assign(shared_mem_bytes=-1, launch_shapes="", counter_lender=-1,
                          counter_status=np.where(counted, "unchecked", "not collected"))


def check_info(info: dict) -> None:
    missing = [key for key in REQUIRED_RUN_KEYS if not _has(info, key)]
    if missing:
        raise SchemaError(f"run.json lacks: {', '.join(missing)}")


def _has(info: dict, dotted: str) -> bool:
    node = info
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def write_run(path: Path, info: dict, kernels: pd.DataFrame, overwrite: bool = False,
              extra_files: dict[str, Path] | None = None) -> Path:
    """Write a complete run directory atomically (with `extra_files` copied in by name); returns its path."""
    path = Path(path)
    info = {**info, "schema_version": SCHEMA_VERSION, "status": "complete"}
    check_info(info)
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
        (staging / RUN_JSON).write_text(json.dumps(info, indent=2, default=str))
        if path.exists():
            shutil.rmtree(path)
        os.replace(staging, path)
    except OSError as exc:
        raise SsmprofError(f"cannot write run directory {path}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path


def read_run(path: Path) -> Run:
    """Read and validate a run directory; any defect is a `CorruptRun` with one line saying what."""
    path = Path(path)
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
        check_info(info)
        kernels = pd.read_parquet(path / KERNELS_PARQUET)
        kernels = conform_kernels(kernels if version == SCHEMA_VERSION else _from_schema_1(kernels))
    except SchemaError as exc:
        raise CorruptRun(f"{path}: {exc}") from None
    except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError) on a damaged file
        raise CorruptRun(f"{path / KERNELS_PARQUET} cannot be read ({exc})") from None
    return Run(info, kernels, path)
