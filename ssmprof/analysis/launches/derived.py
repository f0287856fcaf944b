"""Per-kernel derived quantities from the raw counters: FLOPs by path and precision, bytes, intensities.

Conventions (checked by `ssmprof calibrate` on the H100): a tensor-path op is one FLOP; an FMA thread
instruction is two FLOPs, an add or a multiply one. Counters are per launch; rates use the duration the
counters were measured with (`ncu_duration_ns`), falling back to the timeline duration.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

TENSOR_COLUMNS = ("tensor_ops_bf16", "tensor_ops_fp16", "tensor_ops_tf32", "tensor_ops_fp64", "tensor_ops_fp8")


def _fma_flops(kernels: pd.DataFrame, prefix: str) -> pd.Series:
    return kernels[f"inst_{prefix}add"] + kernels[f"inst_{prefix}mul"] + 2 * kernels[f"inst_{prefix}fma"]


def tensor_flops(kernels: pd.DataFrame) -> pd.Series:
    """Per launch, its tensor-path ops of every precision (NaN without counters)."""
    return kernels[list(TENSOR_COLUMNS)].sum(axis=1, min_count=1)


def derive(kernels: pd.DataFrame) -> pd.DataFrame:
    """The kernel table plus: flops_fp32/fp16/fp64 (vector), flops_vector, flops_tensor, flops,
    dram_bytes, ai_dram/ai_l2/ai_l1 (FLOP per byte), seconds, flop_per_s, dram_bytes_per_s."""
    out = kernels.copy(deep=False)  # copy-on-write: the columns added here stay out of `kernels`
    out["flops_fp32"] = _fma_flops(kernels, "f")
    out["flops_fp16"] = _fma_flops(kernels, "h")
    out["flops_fp64"] = _fma_flops(kernels, "d")
    out["flops_vector"] = out[["flops_fp32", "flops_fp16", "flops_fp64"]].sum(axis=1, min_count=1)
    out["flops_tensor"] = tensor_flops(kernels)
    out["flops"] = out[["flops_vector", "flops_tensor"]].sum(axis=1, min_count=1)
    out["dram_bytes"] = kernels["dram_read_bytes"] + kernels["dram_write_bytes"]
    for level, column in (("dram", "dram_bytes"), ("l2", "l2_bytes"), ("l1", "l1_bytes")):
        out[f"ai_{level}"] = out["flops"] / out[column].replace(0, np.nan)
    seconds = kernels["ncu_duration_ns"].fillna(kernels["duration_ns"]) / 1e9
    out["seconds"] = seconds.replace(0, np.nan)
    out["flop_per_s"] = out["flops"] / out["seconds"]
    out["dram_bytes_per_s"] = out["dram_bytes"] / out["seconds"]
    return out
