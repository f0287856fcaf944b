"""Tensor vs vector: do the "tensor-core friendly" kernels run on tensor cores?

Classified on FLOPs, not on tensor-pipe instructions (some vector kernels issue a few tensor-pipe
instructions and do no tensor math): a kernel is TensorOnly when at least 99 % of its FLOPs are on the
tensor path, VectorOnly when at most 1 % are, Tensor+Vector in between, NoFLOPs when it does no arithmetic
(data movement).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

TENSOR_ONLY_SHARE = 0.99
VECTOR_ONLY_SHARE = 0.01
CLASSES = ("TensorOnly", "Tensor+Vector", "VectorOnly", "NoFLOPs")
TENSOR_ONLY, TENSOR_VECTOR, VECTOR_ONLY, NO_FLOPS = CLASSES
FLOP_CLASSES = (TENSOR_ONLY, TENSOR_VECTOR, VECTOR_ONLY)  # the classes of kernels that do arithmetic


def classify(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per launch with counters: kernel_name, phase, category, flops_tensor, flops_vector, tensor_share, class.
    `kernels`: an `analysis_frame`."""
    frame = kernels[kernels["flops"].notna()].copy()
    share = frame["flops_tensor"] / frame["flops"].replace(0, np.nan)
    frame["tensor_share"] = share
    frame["class"] = np.select(
        [frame["flops"] == 0, share >= TENSOR_ONLY_SHARE, share <= VECTOR_ONLY_SHARE],
        [NO_FLOPS, TENSOR_ONLY, VECTOR_ONLY], TENSOR_VECTOR)
    return frame[["launch_idx", "kernel_name", "phase", "category", "duration_ns", "flops_tensor", "flops_vector",
                  "tensor_share", "class"]]


def class_summary(classified: pd.DataFrame, category: str | None = "SSM scan") -> pd.DataFrame:
    """Kernel counts (distinct names) and time share of each class, per phase (default: SSM kernels)."""
    frame = classified if category is None else classified[classified["category"] == category]
    rows = []
    for phase, group in frame.groupby("phase"):
        total = group["duration_ns"].sum()
        for name in CLASSES:
            members = group[group["class"] == name]
            rows.append({"phase": phase, "class": name, "kernels": members["kernel_name"].nunique(),
                         "time_share": members["duration_ns"].sum() / total if total else 0.0})
    return pd.DataFrame(rows, columns=["phase", "class", "kernels", "time_share"])  # no SSM kernels: no rows
