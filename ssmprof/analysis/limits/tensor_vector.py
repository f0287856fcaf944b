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

from ssmprof.analysis.launches.categories import SSM
from ssmprof.kernels import FORWARD_RECOMPUTE_KERNELS
from ssmprof.schema import RunInfo

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
    read = ["launch_idx", "kernel_name", "phase", "category", "duration_ns", "flops", "flops_tensor", "flops_vector",
            *[c for c in ("tensor_ops_bf16_wgmma", "tensor_ops_bf16_mma") if c in kernels.columns]]
    frame = kernels.loc[kernels["flops"].notna(), read]
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


def class_summary(classified: pd.DataFrame, category: str | None = SSM) -> pd.DataFrame:
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


# Table II of the study (seeds/001: Mamba2 on an H100, SSM kernels; forward 5 kernels, backward 9) counts kernels
# and their share of the phase's SSM time per class. Its backward row holds the backward kernels proper; the
# forward kernels that mamba-ssm launches again inside backward (`recomputed`) are a row of their own here.
TABLE_II_ROWS = ("forward", "backward", "recomputed in backward")
TABLE_II_COLUMNS = (TENSOR_ONLY, VECTOR_ONLY, TENSOR_VECTOR, NO_FLOPS)  # the study's order, then data movement
# The study's Table II and its SSM DRAM figure (seeds/001, Mamba2 training on an H100): per row and class,
# (kernels, % of the row's SSM time); the mean DRAM use of its SSM kernels, % of the datasheet's 3350 GB/s.
STUDY = "study (seeds/001)"
STUDY_TABLE_II = {"forward": {TENSOR_ONLY: (1, 2.40), VECTOR_ONLY: (2, 8.55), TENSOR_VECTOR: (2, 89.03)},
                  "backward": {TENSOR_ONLY: (1, 1.26), VECTOR_ONLY: (2, 6.86), TENSOR_VECTOR: (6, 91.87)}}
STUDY_SSM_DRAM_PCT = 57.5
STUDY_DRAM_GB_S = 3350.0
STUDY_WORKLOAD = "mamba2-lm"  # the model the study's Table II counts
CLASS_RULE = (f"A kernel is TensorOnly where at least {100 * TENSOR_ONLY_SHARE:.0f} % of its FLOPs are tensor-pipe "
              f"FLOPs, VectorOnly where at most {100 * VECTOR_ONLY_SHARE:.0f} % are, Tensor+Vector in between, and "
              "NoFLOPs without arithmetic; the classes are on FLOPs, as the study counts them (the compute-time "
              "classes of the tensor/vector table weigh a vector FLOP at the GPU's peaks). The time share is of the "
              "row's SSM kernel time.")


def _table_ii_row(classified: pd.DataFrame, row: str) -> pd.DataFrame:
    if row == "forward":
        return classified[classified["phase"] == "forward"]
    backward = classified[classified["phase"] == "backward"]
    return backward[backward["recomputed"] == (row == "recomputed in backward")]


def table_ii(classified: pd.DataFrame, category: str | None = SSM, column: str = "flop_class",
             tolerance: float | None = None) -> pd.DataFrame:
    """Table II in the study's form: per row (forward, backward without recomputed kernels, the forward kernels
    recomputed in backward), its kernels (distinct names), time (ms), share of its phase's time, and per class
    "N kernels, X %" (X: the class's share of the row's time). `column`: the class the cells count (default the
    FLOP class, CLASS_RULE); `tolerance`: count FLOP classes at another tolerance t instead (TensorOnly: tensor
    share >= 1 - t, VectorOnly: <= t; see `class_thresholds`)."""
    frame = classified if category is None else classified[classified["category"] == category]
    if tolerance is not None:
        share = frame["tensor_share"]  # NaN: no FLOPs
        frame = frame.assign(at_tolerance=np.select([share.isna(), share >= 1 - tolerance, share <= tolerance],
                                                    [NO_FLOPS, TENSOR_ONLY, VECTOR_ONLY], TENSOR_VECTOR))
        column = "at_tolerance"
    backward_ns = frame.loc[frame["phase"] == "backward", "duration_ns"].sum()
    rows = []
    for name in TABLE_II_ROWS:
        group = _table_ii_row(frame, name)
        if group.empty:
            continue
        total = group["duration_ns"].sum()
        phase_ns = total if name == "forward" else backward_ns
        cells = {}
        for cls in TABLE_II_COLUMNS:
            members = group[group[column] == cls]
            cells[cls] = _cell(members["kernel_name"].nunique(), 100 * members["duration_ns"].sum() / total)
        rows.append({"row": name, "kernels": group["kernel_name"].nunique(), "time_ms": total / 1e6,
                     "share_of_phase": total / phase_ns, **cells})
    return pd.DataFrame(rows, columns=["row", "kernels", "time_ms", "share_of_phase", *TABLE_II_COLUMNS])


def _cell(count: int, pct: float) -> str:
    """A Table II cell as the study writes it: "N kernels, X %"."""
    return f"{count} kernel{'s' if count != 1 else ''}, {pct:.2f} %"


def table_ii_beside_study(classified: pd.DataFrame) -> pd.DataFrame:
    """`table_ii`'s forward and backward rows (ssmprof) each followed by the study's (STUDY_TABLE_II), in the
    study's column order; the forward kernels recomputed in backward after them, ssmprof's alone (the study's
    backward does not list them)."""
    ours = table_ii(classified).assign(source="ssmprof")
    study = pd.DataFrame([{"row": row, "source": STUDY, "kernels": sum(n for n, _ in cells.values()),
                           **{cls: _cell(*cells[cls]) for cls in cells}} for row, cells in STUDY_TABLE_II.items()])
    table = pd.concat([ours, study], ignore_index=True)
    order = table["row"].map(TABLE_II_ROWS.index) * 2 + (table["source"] == STUDY)
    columns = ["row", "source", "kernels", *TABLE_II_COLUMNS[:3]]
    return table.assign(order=order).sort_values("order", ignore_index=True)[columns]


def table_ii_causes(classified: pd.DataFrame, config: dict, versions: dict) -> pd.DataFrame:
    """Why ssmprof's Table II differs from the study's, each cause with its number: the kernels within a factor of
    two of the "only" tolerance (the study never states its own; at half ours the backward counts change), the
    Mamba-2 groups the run's preset uses (mamba-ssm's default is 1: B and C once per group, so more vector work
    around the same dot products) and the library versions that compiled the kernels."""
    thresholds = class_thresholds(classified)
    near = thresholds["changes_at_pct"].between(100 * VECTOR_ONLY_SHARE / 2, 200 * VECTOR_ONLY_SHARE,
                                                 inclusive="right")
    edge = thresholds[near]  # within a factor of two of the tolerance: half or twice it changes their class
    half = table_ii(classified, tolerance=VECTOR_ONLY_SHARE / 2).set_index("row")
    rows = [{"cause": "the only-class tolerance (ours 1 %; the study states none)",
             "evidence": f"{r.kernel_name} ({r.row}): {100 * r.tensor_flop_share:.2f} % tensor FLOPs, {r['class']} "
                         f"at 1 %, {r.class_other_side} on the other side of {r.changes_at_pct:.2f} %; at 0.5 % the "
                         f"{r.row} row counts " + " / ".join(half.loc[r.row, cls].split(",")[0]
                                                            for cls in TABLE_II_COLUMNS[:3])}
            for r in (row for _, row in edge.iterrows())]
    rows.append({"cause": "Mamba-2 groups of B and C (ngroups)",
                 "evidence": f"this run {config.get('ngroups', 'not recorded')}; mamba-ssm's default 1"})
    rows.append({"cause": "the libraries that compiled the SSD kernels",
                 "evidence": f"mamba_ssm {versions.get('mamba_ssm')}, Triton {versions.get('triton')}; the study "
                             "states neither"})
    return pd.DataFrame(rows, columns=["cause", "evidence"])


def class_thresholds(classified: pd.DataFrame, category: str | None = SSM) -> pd.DataFrame:
    """Per kernel and Table II row, how far its class is from changing: with one tolerance t for both "only"
    classes (TensorOnly: tensor share >= 1 - t; VectorOnly: <= t; today t = VECTOR_ONLY_SHARE), a kernel whose
    tensor share of FLOPs is s is an "only" class for t >= min(s, 1 - s) and Tensor+Vector below it:
    `changes_at_pct` = 100 min(s, 1 - s) (0: pure tensor or pure vector, never changes), the class at today's
    tolerance and the one on the other side of the threshold (`class_other_side`); the same on the compute-time
    share (`time_changes_at_pct`)."""
    frame = classified if category is None else classified[classified["category"] == category]
    frame = frame[frame["flops_tensor"].fillna(0) + frame["flops_vector"].fillna(0) > 0]
    rows = []
    for name in TABLE_II_ROWS:
        group = _table_ii_row(frame, name)
        for kernel, launches in group.groupby("kernel_name"):
            tensor, vector = launches["flops_tensor"].fillna(0).sum(), launches["flops_vector"].fillna(0).sum()
            share = tensor / (tensor + vector)
            time_share = time_weighted_share(launches)
            edge = min(share, 1 - share)
            only = TENSOR_ONLY if share > 0.5 else VECTOR_ONLY
            other = only if edge > VECTOR_ONLY_SHARE else TENSOR_VECTOR
            rows.append({"kernel_name": kernel, "row": name, "tensor_flop_share": share,
                         "class": launches["flop_class"].iloc[0], "changes_at_pct": 100 * edge,
                         "class_other_side": other if edge > 0 else "",
                         "time_changes_at_pct": 100 * min(time_share, 1 - time_share)})
    table = pd.DataFrame(rows, columns=["kernel_name", "row", "tensor_flop_share", "class", "changes_at_pct",
                                        "class_other_side", "time_changes_at_pct"])
    order = table["row"].map(TABLE_II_ROWS.index)
    return table.assign(order=order).sort_values(["order", "changes_at_pct"], ignore_index=True).drop(columns="order")


def time_weighted_share(launches: pd.DataFrame) -> float:
    """A kernel's tensor share of compute time over its launches (each launch's `tensor_time_share`, weighted by
    its compute FLOPs)."""
    weights = launches["flops_tensor"].fillna(0) + launches["flops_vector"].fillna(0)
    return float((launches["tensor_time_share"] * weights).sum() / weights.sum())


# A wgmma instruction computes 64 rows of its tile per warpgroup of 4 warps (m64nNk16): Triton emits it only for
# tiles of at least that many rows, and the warp-level mma.sync otherwise.
WGMMA_ROWS = 64


def autotuned_rows(info: RunInfo) -> dict[str, int]:
    """Kernel function -> the rows of the tile its Triton autotuner chose (`BLOCK_SIZE_M`), from run.json's
    `triton_autotune` (the first choice where a kernel was tuned for several keys)."""
    rows: dict[str, int] = {}
    for name, entries in info.triton_autotune.items():
        for _, _, config in entries:
            if "BLOCK_SIZE_M: " in config:
                rows.setdefault(name.rsplit(".", 1)[-1], int(config.split("BLOCK_SIZE_M: ")[1].split(",")[0]))
    return rows
