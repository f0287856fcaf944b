"""Tensor vs vector: do the "tensor-core friendly" kernels run on tensor cores?

Measured on FLOPs, not on tensor-pipe instructions (some vector kernels issue a few tensor-pipe
instructions and do no tensor math). A vector FLOP costs far more than a tensor FLOP (on an H100 the dense
bf16 tensor peak is 15x the fp32 peak), so FLOP share is not the share of compute time: with the GPU's
peaks given, each kernel's tensor and vector work are turned into the time they take at those peaks, and
the class is defined on the tensor share of that compute time (`tensor_time_share`); the FLOP-share class
stays beside it (`flop_class`). TensorOnly: at least 99 % tensor, VectorOnly: at most 1 %, Tensor+Vector in
between, NoFLOPs: no arithmetic (data movement). `near_boundary` marks kernels within a factor of two of a
threshold (e.g. 98-99.5 % tensor) or whose two classes differ. Backward launches that redo forward work
(mamba-ssm's SSD chain again, fla's w/u and chunk states, Mamba-3 MIMO's forward inside its backward:
`kernels.FORWARD_RECOMPUTE_KERNELS`) are marked `recomputed`.

On Hopper each kernel's bf16 tensor work is also named by its instruction family (`tensor_instruction`):
wgmma (warpgroup, asynchronous, reads operands from shared memory: cuBLAS's nvjet GEMMs) or mma.sync (the
warp-level Ampere instruction), from the two halves of the tensor-path ops; Triton picks one per kernel, so
the SSD chain runs some kernels on each.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssmprof.kernels import FORWARD_RECOMPUTE_KERNELS

TENSOR_ONLY_SHARE = 0.99
VECTOR_ONLY_SHARE = 0.01
CLASSES = ("TensorOnly", "Tensor+Vector", "VectorOnly", "NoFLOPs")
TENSOR_ONLY, TENSOR_VECTOR, VECTOR_ONLY, NO_FLOPS = CLASSES
FLOP_CLASSES = (TENSOR_ONLY, TENSOR_VECTOR, VECTOR_ONLY)  # the classes of kernels that do arithmetic
INSTRUCTION_FAMILIES = ("wgmma", "mma.sync", "both")
WGMMA, MMA_SYNC, BOTH = INSTRUCTION_FAMILIES


def tensor_instruction(kernels: pd.DataFrame) -> pd.Series:
    """Per launch: the instruction family of its bf16 tensor ops (all but 1 % on one family names it, "both"
    otherwise); "" without bf16 tensor work or where the chip does not split them (A100: mma.sync only)."""
    halves = kernels.reindex(columns=["tensor_ops_bf16_wgmma", "tensor_ops_bf16_mma"])  # absent: not collected
    wgmma, mma = halves["tensor_ops_bf16_wgmma"], halves["tensor_ops_bf16_mma"]
    total = wgmma + mma
    share = wgmma / total.where(total > 0)
    return pd.Series(np.select([share >= TENSOR_ONLY_SHARE, share <= VECTOR_ONLY_SHARE, share.notna()],
                               [WGMMA, MMA_SYNC, BOTH], ""), index=kernels.index)


def _classes(frame: pd.DataFrame, share: pd.Series) -> np.ndarray:
    return np.select([frame["flops"] == 0, share >= TENSOR_ONLY_SHARE, share <= VECTOR_ONLY_SHARE],
                     [NO_FLOPS, TENSOR_ONLY, VECTOR_ONLY], TENSOR_VECTOR)


def _near(share: pd.Series) -> pd.Series:
    vector, tensor = 1 - share, share
    return vector.between(VECTOR_ONLY_SHARE / 2, 2 * VECTOR_ONLY_SHARE) | tensor.between(
        VECTOR_ONLY_SHARE / 2, 2 * VECTOR_ONLY_SHARE)


def classify(kernels: pd.DataFrame, ceilings=None) -> pd.DataFrame:
    """Per launch with counters: kernel_name, phase, category, flops_tensor, flops_vector, tensor_share (of
    FLOPs), tensor_time_share (of compute time at `ceilings`' bf16 tensor and fp32 peaks; FLOP share where no
    ceilings are given), class (on compute time), flop_class, near_boundary, recomputed, tensor_instruction.
    `kernels`: an `analysis_frame`."""
    frame = kernels[kernels["flops"].notna()].copy()
    share = frame["flops_tensor"] / frame["flops"].replace(0, np.nan)
    frame["tensor_share"] = share
    time_share = share
    if ceilings is not None:
        tensor_s = frame["flops_tensor"].fillna(0) / (ceilings.bf16_tensor_tflops * 1e12)
        vector_s = frame["flops_vector"].fillna(0) / (ceilings.fp32_tflops * 1e12)
        time_share = tensor_s / (tensor_s + vector_s).replace(0, np.nan)
    frame["tensor_time_share"] = time_share
    frame["class"] = _classes(frame, time_share)
    frame["flop_class"] = _classes(frame, share)
    frame["near_boundary"] = (_near(share) | _near(time_share) | (frame["class"] != frame["flop_class"])) & (
        frame["flops"] > 0)
    frame["recomputed"] = (frame["phase"] == "backward") & frame["kernel_name"].str.startswith(
        FORWARD_RECOMPUTE_KERNELS)
    frame["tensor_instruction"] = tensor_instruction(frame)
    return frame[["launch_idx", "kernel_name", "phase", "category", "duration_ns", "flops_tensor", "flops_vector",
                  "tensor_share", "tensor_time_share", "class", "flop_class", "near_boundary", "recomputed",
                  "tensor_instruction"]]


def instruction_summary(classified: pd.DataFrame) -> pd.DataFrame:
    """Per category and tensor instruction family (launches with bf16 tensor work, where the chip splits it):
    the kernels (distinct names, longest first), their count and time (ms)."""
    frame = classified[classified["tensor_instruction"] != ""]
    rows = []
    for (category, family), group in frame.groupby(["category", "tensor_instruction"]):
        by_name = group.groupby("kernel_name")["duration_ns"].sum().sort_values(ascending=False)
        rows.append({"category": category, "tensor_instruction": family, "kernels": len(by_name),
                     "time_ms": by_name.sum() / 1e6, "names": ", ".join(by_name.index)})
    return pd.DataFrame(rows, columns=["category", "tensor_instruction", "kernels", "time_ms", "names"])


RECOMPUTE_EXCLUDED = "backward without recomputed forward"


def class_summary(classified: pd.DataFrame, category: str | None = "SSM scan") -> pd.DataFrame:
    """Kernel counts (distinct names) and time share of each class, per phase (default: SSM kernels); where
    backward recomputes forward kernels, a second backward row set without them."""
    frame = classified if category is None else classified[classified["category"] == category]
    groups = list(frame.groupby("phase"))
    if frame["recomputed"].any():
        groups.append((RECOMPUTE_EXCLUDED, frame[(frame["phase"] == "backward") & ~frame["recomputed"]]))
    rows = []
    for phase, group in groups:
        total = group["duration_ns"].sum()
        for name in CLASSES:
            members = group[group["class"] == name]
            rows.append({"phase": phase, "class": name, "kernels": members["kernel_name"].nunique(),
                         "time_share": members["duration_ns"].sum() / total if total else 0.0})
    return pd.DataFrame(rows, columns=["phase", "class", "kernels", "time_share"])  # no SSM kernels: no rows
