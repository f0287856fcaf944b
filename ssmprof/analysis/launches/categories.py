"""Kernel categories: one ordered rule table from kernel (and launching-op) names to what the kernel does.

First matching rule wins, so specific rules come before general ones (an implicit-GEMM convolution is a
convolution, not a GEMM; a copy done by an elementwise kernel is memory traffic, not arithmetic).
Names are the contract's short kernel names; `launch_op` disambiguates the generic elementwise kernels.
Where the short name says nothing (template wrappers such as `cutlass::Kernel2<...gemm...>`, whose short
name is `Kernel2`), the demangled full name is tried before settling on `other`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pandas as pd

from ssmprof.analysis.launches.distinct import per_distinct
from ssmprof.kernels import FUSED_KERNEL_NAMES, FUSED_KERNELS

# The part of a collective's kernel spent waiting for the other ranks of a multi-rank run
# (`communication.with_waiting_category`): no rule names it; the collective keeps "communication" for its transfer.
WAITING = "waiting for other ranks"
SSM = "SSM scan"  # the sequence mixers' kernels (SSD chain, selective scan, Mamba-3, Gated DeltaNet): one category
CATEGORIES = ("GEMM", SSM, "convolution", "attention", "normalization", "elementwise/activation",
              "reduction/loss", "sort/scan", "memory", "optimizer", "communication", WAITING, "graph gather/scatter",
              "other")

# The fused kernels' names come from the kernel adapter (`kernels.FUSED_KERNELS`, `kernels.FUSED_KERNEL_NAMES`: those
# matched by whole name only), the one place that knows them.
_SSD, _SCAN, _CONV, _MAMBA3, _GDN = ("|".join(FUSED_KERNELS[op])
                                    for op in ("ssd", "selective_scan", "conv1d", "mamba3", "gated_delta"))
_WHOLE = "|".join(re.escape(name) for names in FUSED_KERNEL_NAMES.values() for name in names)

# (category, regex on the short kernel name, regex on the launching op or None); case-insensitive.
RULES: tuple[tuple[str, str, str | None], ...] = (
    ("communication", r"^(nccl|gloo:)", None),  # NCCL kernels; gloo collectives of CPU reference runs
    # Mamba-2 SSD chain, Mamba-1 scan, Mamba-3 (SISO, MIMO), Gated DeltaNet's chunked delta rule (and fla's TileLang
    # chunk_bwd_dqkwg, by whole name): one category, so a suite sets the sequence mixers' kernels side by side
    (SSM, rf"^_?({_SSD})|{_SCAN}|^({_MAMBA3})|^({_GDN})|^({_WHOLE})$", None),
    ("convolution", rf"{_CONV}|conv_depthwise|convolution|implicit_gemm|fprop|dgrad|wgrad|winograd|"
                    r"nchwtonhwc|nhwctonchw|cudnn", None),
    ("attention", r"flash_(fwd|bwd)|fmha|attention", None),
    ("optimizer", r"multi_tensor_apply|fused_adam|adamw?_|_sgd_", None),
    ("normalization", r"layer_norm|rms_norm|rmsnorm|batch_norm|group_norm|welford|_norm_|gammabeta|l2norm", None),
    ("GEMM", r"^nvjet|gemm|cutlass|^sm\d+_xmma|cublas|splitkreduce|gemv", None),
    ("reduction/loss", r"cross_entropy|nll_loss|softmax|reduce_kernel|logsumexp", None),
    # cub radix sorts (graph node ordering), cumsum/cumprod scans
    ("sort/scan", r"radixsort|devicescan|segmentedsort|mergesort|bitonic|kernel_scan_|cumsum", None),
    ("memory", r".", r"aten::embedding"),  # token embedding gathers and their backward scatter-adds
    ("graph gather/scatter", r"scatter|gather|index_select|indexselect|index_add|indexfunc|segment_", None),
    ("memory", r"memcpy|memset|copy|fill|catarraybatched|transpose|permute|contiguous", None),
    ("memory", r"elementwise", r"aten::(copy_|fill_|zero_|clone|contiguous|to|_to_copy|cat|stack|pad)$"),
    ("elementwise/activation", r"elementwise|silu|swiglu|gelu|relu|sigmoid|softplus|tanh|pointwise|triton_poi|"
                               r"_swiglu", None),
)
_COMPILED = tuple((category, re.compile(name, re.I), re.compile(op, re.I) if op else None)
                  for category, name, op in RULES)


def categorize(kernel_name: str, launch_op: str = "", full_name: str = "") -> str:
    for name in (kernel_name, full_name) if full_name else (kernel_name,):
        for category, pattern, op in _COMPILED:
            if pattern.search(name) and (op is None or op.search(launch_op or "")):
                return category
    return "other"


GRAPH = "graph gather/scatter"
# What makes gathers graph message passing: aggregation back onto nodes (scatter-adds, index_add). A run that
# gathers but never aggregates (a language model's token-embedding lookup, one `aten::gather`) moves memory.
_AGGREGATES = re.compile(r"scatter|index_add|indexfunc|segment_", re.I)


def with_categories(kernels: pd.DataFrame) -> pd.DataFrame:
    """The kernel table with a `category` column. Run-level rule after the per-launch table: where no launch
    of the run aggregates (scatter, index_add), its "graph gather/scatter" launches are "memory"."""
    full = kernels["kernel_name_full"] if "kernel_name_full" in kernels.columns else pd.Series("", kernels.index)
    categories = pd.Series(per_distinct([kernels["kernel_name"], kernels["launch_op"], full], categorize),
                           index=kernels.index, dtype=object)
    graph = kernels[categories == GRAPH].drop_duplicates(["kernel_name", "launch_op"])
    if len(graph) and not any(_AGGREGATES.search(name) or _AGGREGATES.search(op or "")
                              for name, op in zip(graph["kernel_name"], graph["launch_op"], strict=True)):
        categories = categories.where(categories != GRAPH, "memory")
    return kernels.assign(category=categories.to_numpy())


# Composable filters in HTA's style: each takes the kernel frame and returns a boolean mask.
KernelFilter = Callable[[pd.DataFrame], pd.Series]


def phase_is(*phases: str) -> KernelFilter:
    return lambda kernels: kernels["phase"].isin(phases)


def category_is(*categories: str) -> KernelFilter:
    return lambda kernels: kernels["category"].isin(categories)
