"""The kernel adapter: the one place that knows which real kernels exist and which one each op uses.

mamba-ssm 2.3.2.post1 imports its compiled `selective_scan_cuda` extension unconditionally, so
`import mamba_ssm` fails wherever `make kernels` has not run (every CPU machine, a fresh GPU host).
`mamba_ssm()` makes the import work by standing a placeholder in for the missing extension; calling
into the placeholder raises `KernelUnavailable` naming the fix. causal-conv1d needs nothing of the
sort: mamba-ssm already treats its absence as "use torch's conv".

`plan_kernels()` decides, per op, the implementation a run uses and records it as provenance. On a
GPU a missing fused kernel is an error unless fallbacks are allowed, because a fallback changes what
is being characterized. On the CPU every op takes its pure-torch reference and says so. Where the host's stack
is one a library refuses at run time (fla-core's Gated DeltaNet backward on Hopper with Triton 3.4-3.7.0), the
plan decides before any model is built: the library's own way round it, or a one-line refusal.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import types
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from ssmprof.errors import KernelUnavailable

BUILD_HINT = "run `make kernels` (builds causal-conv1d and selective-scan for this GPU)"
GPU_DEPS_HINT = ("`make install` on a GPU host installs the `gpu` extra (fla-core) and, where its wheels are "
                 "there (`make wheelhouse-mimo` offline), the `mimo` extra (tilelang==0.1.8)")

# The ops a workload can ask for, each with a one-line meaning (shown by `ssmprof doctor`).
OPS = {
    "ssd": "Mamba-2 SSD chain (chunk_cumsum/chunk_state/state_passing/bmm_chunk/chunk_scan)",
    "conv1d": "causal depthwise conv1d of the Mamba blocks",
    "selective_scan": "Mamba-1 selective scan",
    "norm": "residual add + RMSNorm",
    "attention": "causal / bidirectional self-attention",
    "mamba3": "Mamba-3 SISO scan (mamba-ssm Triton: angle_dt + mamba3_siso fwd/bwd)",
    "mamba3_mimo": "Mamba-3 MIMO scan (mamba-ssm TileLang mamba_mimo fwd/bwd + Triton helpers)",
    "gated_delta": "Gated DeltaNet chunked delta rule (fla-core Triton chunk_gated_delta_rule; on Hopper with "
                   "Triton 3.4-3.7.0 its backward's chunk_bwd_dqkwg on fla's TileLang backend)",
}


# The fused kernels we characterize, named once: the GPU kernel names the timeline sees (mamba-ssm 2.3.2.post1,
# causal-conv1d 1.7.0) and the Python entry points the workloads call. Analyses match kernels by these
# names (categories, the SSD model) and the layers call the entry points, so an upstream rename is one edit.
# Importing this table needs no torch (reports and analyses load none).
FUSED_KERNELS = {
    # the Mamba-2 SSD chain's Triton kernels, forward and backward, by name stem ("_chunk_scan_fwd_kernel", ...)
    "ssd": ("chunk_cumsum", "chunk_state", "state_passing", "bmm_chunk", "chunk_scan"),
    "selective_scan": ("selective_scan",),  # Mamba-1 CUDA selective scan (selective_scan_fwd_kernel, ...)
    "conv1d": ("causal_conv1d",),  # causal-conv1d CUDA (causal_conv1d_fwd_kernel, ...)
    # Mamba-3 (mamba-ssm 2.3.2.post1): SISO Triton kernels (mamba3_siso_fwd_kernel, mamba3_siso_bwd_kernel_dqkv,
    # ...), the rotary-angle cumsum (angle_dt_fwd_kernel), MIMO TileLang kernels (mamba_mimo_fwd_kernel_kernel,
    # mamba_mimo_bwd_fwd/bwd_bwd) and the MIMO Triton helpers (dacs_segsum_kernel, bwd_dadt_cumsum_fused_kernel,
    # bwd_segsum_dadt_kernel, bwd_dtrap_ddt_kernel)
    "mamba3": ("mamba3_siso", "mamba_mimo", "angle_dt", "dacs_segsum", "bwd_dadt_cumsum", "bwd_segsum_dadt",
               "bwd_dtrap_ddt"),
    # Gated DeltaNet (fla-core 0.6.0 chunk path): gate + chunk cumsum, kkT + triangular solve (WY form), w/u, the
    # inter-chunk state recurrence, the output; backward: dhu, dqkwg, dv_local, prepare_wy_repr_bwd, gate bwd
    "gated_delta": ("gdn_gate", "chunk_gated_delta_rule", "chunk_scaled_dot_kkt", "solve_tril", "merge_16x16",
                    "recompute_w_u", "prepare_wy_repr", "chunk_fwd_kernel_o", "chunk_bwd_kernel_d",
                    "chunk_local_cumsum", "fused_beta_sigmoid"),
}
# Fused kernels known by their whole name only, a stem of theirs being too generic to match by. fla-core 0.6.0's
# TileLang chunk_bwd_dqkwg (`fla/ops/common/backends/tilelang/chunk_bwd.py`, what the plan puts the Gated DeltaNet
# backward's dq/dk/dw/dg on where fla refuses its Triton kernel, `gated_delta_choice`): its prim_func is named
# `kernel`, and TileLang names a CUDA kernel `<prim_func>_kernel` (extern "C", so the trace's name is that too; cf.
# mamba_mimo_fwd_kernel -> mamba_mimo_fwd_kernel_kernel), so `kernel_kernel`. Not yet seen in a trace of ours: a
# name that proves otherwise lands in 'other' until added here. fla's other TileLang kernels (kda, attn, rwkv6,
# sinkhorn) have the same name, but no ssmprof workload calls those ops, and no other kernel of ours is named so.
FUSED_KERNEL_NAMES = {"gated_delta": ("kernel_kernel",)}


def is_fused_kernel(kernel_name: str) -> bool:
    """Whether a kernel is one of FUSED_KERNELS (by name stem) or FUSED_KERNEL_NAMES (by whole name): the SSM and
    convolution kernels of the study."""
    return (any(kernel_name == name for names in FUSED_KERNEL_NAMES.values() for name in names)
            or any(stem in kernel_name for stems in FUSED_KERNELS.values() for stem in stems))


# The forward SSD chain in launch order (`_mamba_chunk_scan_combined_fwd`): each kernel's name prefix.
SSD_FORWARD_KERNELS = ("_chunk_cumsum_fwd", "_bmm_chunk_fwd", "_chunk_state_fwd", "_state_passing_fwd",
                       "_chunk_scan_fwd")
# mamba-ssm entry points (module under mamba_ssm, fused function, its pure-torch reference).
SSD_FUSED_ENTRY = "mamba_split_conv1d_scan_combined"  # what Mamba2's memory-efficient path calls
SELECTIVE_SCAN_ENTRY = ("ops.selective_scan_interface", "selective_scan_fn", "selective_scan_ref")
NORM_ENTRY = ("ops.triton.layer_norm", "layer_norm_fn", "rms_norm_ref")
SSD_REFERENCE_ENTRY = ("modules.ssd_minimal", "ssd_minimal_discrete")
GATED_NORM_REFERENCE_ENTRY = ("ops.triton.layernorm_gated", "rms_norm_ref")
GATED_NORM_FUSED_ENTRY = ("ops.triton.layernorm_gated", "rmsnorm_fn")  # RMSNorm(x) * silu(z), one Triton kernel
MAMBA3_MODULE = "modules.mamba3"  # mamba-ssm's Mamba3 layer: SISO (Triton) or MIMO (TileLang) on the GPU
# fla-core's chunked gated delta rule (Triton; `use_*_in_kernel` fuse the l2norm, gate and beta sigmoid into it)
GATED_DELTA_ENTRY = ("fla.ops.gated_delta_rule", "chunk_gated_delta_rule")
GATED_DELTA_IN_KERNEL = {"use_qk_l2norm_in_kernel": True, "use_gate_in_kernel": True,
                         "use_beta_sigmoid_in_kernel": True}
# fla-core 0.6.0's dispatcher hands parts of that chain to other backends where their packages are installed: its
# `common` TileLang backend (on by default on Hopper with Triton >= 3.4, wherever TileLang and nvcc are, which
# Mamba-3 MIMO's `mimo` extra brings) takes the backward's chunk_bwd_dqkwg as a TileLang kernel
# (FUSED_KERNEL_NAMES); FlashQLA would take the whole op (its verifier refuses our in-kernel gate and beta today).
# fla reads their switches (FLA_TILELANG, FLA_FLASH_QLA) at every dispatch. Where fla's Triton chain runs, both
# are pinned off, so what runs is the Triton chain the plan records, whatever else is installed.
FLA_BACKENDS_OFF = {"FLA_TILELANG": "0", "FLA_FLASH_QLA": "0"}
# fla #640: Triton >= 3.4.0 and < 3.7.1 miscompiles fla's gated chunk_bwd_dqkwg on Hopper, so fla-core 0.6.0's
# Triton path raises a RuntimeError there (`fla/ops/common/chunk_o.py`, IS_NVIDIA_HOPPER and TRITON_ABOVE_3_4_0
# and not TRITON_ABOVE_3_7_1) and its `common` TileLang backend is the way round it. FLA_TILELANG has no finer
# grain than every TileLang backend of fla at once (a backend's own switch is FLA_TILELANG too, and FLA_TILELANG
# != "0" switches on all of them): of the Gated DeltaNet chain, the `common` backend implements chunk_bwd_dqkwg
# only, and the other TileLang backends it also switches on (kda, attn, dplr, rwkv6, sinkhorn) serve ops that no
# ssmprof workload calls, so every other kernel of the chain stays on fla's Triton path.
FLA_640_TRITON = ("3.4.0", "3.7.1")  # the Triton versions fla refuses on Hopper: from, up to (not included)
GDN_TRITON = "fla-triton-chunk"  # the gated_delta impl: fla's Triton chain
GDN_TILELANG_DQKWG = "fla-triton-chunk+tilelang-dqkwg"  # the same with chunk_bwd_dqkwg on fla's TileLang backend
FLA_BACKENDS = {GDN_TRITON: FLA_BACKENDS_OFF, GDN_TILELANG_DQKWG: {"FLA_TILELANG": "1", "FLA_FLASH_QLA": "0"}}
MIMO_TILELANG = "tilelang==0.1.8"  # the `mimo` extra's TileLang (mamba-ssm's pin)
GATED_DELTA_CHUNK_SIZES = (16, 32, 64)  # what fla's chunk kernels accept
GDN_V_HEADS_PER_QK_HEAD = 2  # Qwen3-Next's layout (32 value heads read 16 q/k heads); the hybrid's GDN layers use it
MAMBA3_CHUNK = 64  # mamba-ssm's recommended Mamba-3 chunk tile (SISO: steps; MIMO: steps x rank)
# Backward kernels that recompute forward work (their FLOPs repeat the forward's): mamba-ssm's SSD chain launched
# again in backward, fla's w/u and chunk states, Mamba-3 MIMO's forward recompute inside its backward.
FORWARD_RECOMPUTE_KERNELS = SSD_FORWARD_KERNELS + ("recompute_w_u_fwd", "chunk_gated_delta_rule_fwd_kernel_h",
                                                   "mamba_mimo_bwd_fwd")


# What a provenance entry begins with where an op ran on PyTorch code instead of its fused kernels: our references,
# torch's depthwise conv, and transformers' own PyTorch path (`workloads.hf`). `analysis.trust.provenance` checks
# these words against the kernels the timeline saw.
TRANSFORMERS_FALLBACK = "PyTorch fallback"
FALLBACK_IMPLS = (TRANSFORMERS_FALLBACK, "torch-reference", "torch-conv1d")


class _MissingExtension(types.ModuleType):
    """Stands in for a compiled extension that was not built; any use raises a clear error."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__ssmprof_missing__ = True

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise KernelUnavailable(f"the CUDA extension `{self.__name__}` is not built: {BUILD_HINT}")


def hybrid_chunk(ssm_layer: str | None, chunk_size: int) -> int:
    """The chunk a hybrid's SSM layer runs (`--set ssm_layer=...`; None: a model of one mixer, its own chunk): the
    Mamba-2 `chunk_size`, capped at MAMBA3_CHUNK for Mamba-3 layers and at fla's largest for Gated DeltaNet layers.
    The workloads build their layers with it and the analytic models size their tiles with it."""
    if ssm_layer == "mamba3":
        return min(chunk_size, MAMBA3_CHUNK)
    if ssm_layer == "gdn":
        return min(chunk_size, max(GATED_DELTA_CHUNK_SIZES))
    return chunk_size


def mamba3_steps(chunk_size: int, mimo: bool, mimo_rank: int) -> int:
    """Steps per chunk of a Mamba-3 layer: the tile's rows over the MIMO rank (the layer's chunk and the analytic
    model's)."""
    return chunk_size // mimo_rank if mimo else chunk_size


def _extension_built(name: str) -> bool:
    module = sys.modules.get(name)
    if module is not None:
        return not getattr(module, "__ssmprof_missing__", False)
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


class _NoTextGeneration:
    """Stands in for mamba_ssm's `GenerationMixin` (the base of its `MambaLMHeadModel`): ssmprof trains, it never
    generates text."""

    def generate(self, *args, **kwargs):
        raise KernelUnavailable("ssmprof imports mamba_ssm without its text-generation utilities: it only trains")


def _without_text_generation() -> None:
    """Keep mamba_ssm's text-generation utilities out of the import: `import mamba_ssm` imports its LM head model,
    whose generation mixin imports `transformers.generation` (and with it scikit-learn and torch.distributed's
    tensor ops): 7.0 of the 8 s that importing mamba_ssm took on the H100 host, paid again by every Nsight Compute
    pass's child (6-12 s of planning a pass in earlier paper runs: docs/history.md). Training uses none of it. Measured
    on the H200 suite (tests/data/suite-cost-h200), planning fell to 1.6-6.1 s a pass but the model build rose by
    about as much: torch.optim imports torch._dynamo at its first param group, which transformers had imported."""
    stand_in: Any = types.ModuleType("mamba_ssm.utils.generation")  # given the attribute mamba_ssm imports
    stand_in.GenerationMixin = _NoTextGeneration
    sys.modules.setdefault("mamba_ssm.utils.generation", stand_in)


def mamba_ssm():
    """Import mamba_ssm whether or not its selective-scan extension is built, without its text generation."""
    if not _extension_built("selective_scan_cuda"):
        sys.modules["selective_scan_cuda"] = _MissingExtension("selective_scan_cuda")
    if "mamba_ssm" not in sys.modules:
        _without_text_generation()
    try:
        return importlib.import_module("mamba_ssm")
    except ImportError as exc:
        raise KernelUnavailable(f"mamba-ssm cannot be imported ({exc}): run `make install`") from exc


# The optional packages `Availability.probe` imports, each for the ops that use it (and nothing else imports them
# on the way to planning): `preload` imports the same ahead of a pass's turn.
OPTIONAL_PACKAGES = {"causal_conv1d": ("conv1d",), "flash_attn": ("attention",),
                     "fla.ops.gated_delta_rule": ("gated_delta",), "tilelang": ("mamba3_mimo", "gated_delta")}


def preload(ops: tuple[str, ...]) -> None:
    """Import what planning `ops` and building the model will import, touching no GPU: an Nsight Compute pass
    started ahead of its turn does this while the pass before it replays (`profiler.counters.NcuPass`)."""
    import torch._dynamo  # noqa: F401  (torch.optim imports it at its first param group: 1-2 s)

    for module, users in OPTIONAL_PACKAGES.items():
        if any(op in ops for op in users):
            _importable(module)
    if any(op in ops for op in ("ssd", "norm", "selective_scan")):
        mamba_ssm()


def mamba_ssm_module(path: str):
    """A submodule of mamba_ssm, e.g. `mamba_ssm_module("ops.triton.layer_norm")`, through `mamba_ssm()`."""
    mamba_ssm()
    return importlib.import_module(f"mamba_ssm.{path}")


def _missing_kernel(what: str):
    def unavailable(*args, **kwargs):
        raise KernelUnavailable(f"{what}: {GPU_DEPS_HINT}")

    return unavailable


def mamba3_module():
    """mamba_ssm's Mamba-3 module. Without TileLang its MIMO entry point is None and `Mamba3(is_mimo=True)`
    refuses to be built, even where it will only run our reference; a stand-in that raises when called
    lets the layer (and its parameters) exist on any machine."""
    module = mamba_ssm_module(MAMBA3_MODULE)
    if module.mamba3_mimo_combined is None:
        module.mamba3_mimo_combined = _missing_kernel("Mamba-3 MIMO needs TileLang (tilelang==0.1.8)")
    return module


def gated_delta_rule_fused(impl: str = GDN_TRITON):
    """fla-core's `chunk_gated_delta_rule`, the fused Gated DeltaNet kernel chain, with fla's backends switched as
    the plan's `impl` says (FLA_BACKENDS: its Triton kernels only, or chunk_bwd_dqkwg on its TileLang backend); fla
    reads the switches at every dispatch."""
    os.environ.update(FLA_BACKENDS[impl])
    module, function = GATED_DELTA_ENTRY
    try:
        return getattr(importlib.import_module(module), function)
    except ImportError as exc:
        raise KernelUnavailable(f"fla-core cannot be imported ({exc}): {GPU_DEPS_HINT}") from exc


@dataclass(frozen=True)
class Availability:
    cuda: bool
    triton: bool
    causal_conv1d: bool
    selective_scan: bool
    sdpa_flash: bool
    flash_attn: bool
    hopper: bool = False  # sm_90 or newer: Mamba-3's SISO kernels load through TMA tensor descriptors
    tilelang: bool = False  # Mamba-3 MIMO (JIT-compiled with nvcc at the first call of each shape)
    fla: bool = False  # fla-core (Gated DeltaNet)
    # what fla's Gated DeltaNet backward depends on (`gated_delta_choice`): the GPU, Triton's version, and whether
    # fla finds an nvcc for TileLang's JIT (fla.utils.has_usable_nvcc; fla's TileLang backends need one)
    capability: tuple[int, int] = (0, 0)
    device_name: str = ""
    triton_version: str = ""
    nvcc: bool = False

    @classmethod
    def probe(cls, ops: tuple[str, ...] | None = None) -> Availability:
        """What this machine has, for the ops given (all where None). The optional packages are imported only
        for the ops that use them: importing fla-core alone takes seconds, and every Nsight Compute pass's child
        plans its kernels again; what is not probed reads as not available."""
        import torch

        def wanted(module: str) -> bool:  # an optional package is imported only where an op given uses it
            return ops is None or any(op in ops for op in OPTIONAL_PACKAGES[module])

        cuda = torch.cuda.is_available()
        triton = cuda and _importable("triton")
        tilelang = cuda and wanted("tilelang") and _importable("tilelang")
        fla = cuda and wanted("fla.ops.gated_delta_rule") and _importable("fla.ops.gated_delta_rule")
        return cls(
            cuda=cuda,
            triton=triton,
            causal_conv1d=wanted("causal_conv1d") and _extension_built("causal_conv1d_cuda")
            and _importable("causal_conv1d"),
            selective_scan=_extension_built("selective_scan_cuda"),
            sdpa_flash=cuda
            and torch.backends.cuda.flash_sdp_enabled()
            and torch.cuda.get_device_capability()[0] >= 8,
            flash_attn=cuda and wanted("flash_attn") and _importable("flash_attn"),
            hopper=cuda and torch.cuda.get_device_capability()[0] >= 9,
            tilelang=tilelang,
            fla=fla,
            capability=torch.cuda.get_device_capability() if cuda else (0, 0),
            device_name=torch.cuda.get_device_name() if cuda else "",
            triton_version=getattr(importlib.import_module("triton"), "__version__", "") if triton else "",
            nvcc=tilelang and fla and importlib.import_module("fla.utils").has_usable_nvcc(),
        )


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class KernelChoice:
    op: str
    impl: str
    fused: bool  # the real fused GPU kernel (what a characterization is about)
    note: str = ""
    refusal: str = ""  # a fallback's own one-line refusal (cause and remedies), where the generic one would mislead

    def describe(self) -> str:
        return f"{self.impl}" + (f" ({self.note})" if self.note else "")


@dataclass
class KernelPlan:
    device: str  # "cuda" or "cpu"
    choices: dict[str, KernelChoice] = field(default_factory=dict)

    def impl(self, op: str) -> str:
        return self.choices[op].impl

    def provenance(self) -> dict[str, str]:
        return {op: choice.describe() for op, choice in self.choices.items()}

    @property
    def fallbacks(self) -> list[KernelChoice]:
        return [c for c in self.choices.values() if not c.fused]


def _cuda_choice(op: str, have: Availability, dtype: str) -> KernelChoice:
    if op == "ssd":
        if have.causal_conv1d:
            return KernelChoice(op, "triton-fused", True, SSD_FUSED_ENTRY)
        return KernelChoice(op, "triton", False, "SSD chain without the fused conv: causal-conv1d not built")
    if op == "conv1d":
        if have.causal_conv1d:
            return KernelChoice(op, "causal-conv1d-cuda", True)
        return KernelChoice(op, "torch-conv1d", False, "causal-conv1d not built")
    if op == "selective_scan":
        if have.selective_scan:
            return KernelChoice(op, "selective-scan-cuda", True)
        return KernelChoice(op, "torch-reference", False, "selective_scan_cuda not built")
    if op == "norm":
        return KernelChoice(op, "triton-fused", True, "mamba_ssm layer_norm_fn, add+RMSNorm in one kernel")
    if op == "attention":
        if dtype == "fp32":
            return KernelChoice(op, "sdpa", False, "flash attention needs bf16 or fp16; this run is fp32")
        if have.flash_attn:
            return KernelChoice(op, "flash-attn", True)
        if have.sdpa_flash:
            return KernelChoice(op, "sdpa-flash", True, "torch SDPA, flash backend only")
        return KernelChoice(op, "sdpa", False, "flash backend unavailable")
    if op == "mamba3":
        if have.hopper:
            return KernelChoice(op, "triton-siso", True, "mamba3_siso_combined")
        return KernelChoice(op, "torch-reference", False, "Mamba-3 SISO kernels need sm_90+ (TMA)")
    if op == "mamba3_mimo":
        if have.tilelang:
            return KernelChoice(op, "tilelang-mimo", True, "mamba3_mimo, TileLang JIT (nvcc) + Triton helpers")
        return KernelChoice(op, "torch-reference", False, f"tilelang not installed ({GPU_DEPS_HINT})")
    if op == "gated_delta":
        if not have.fla:
            return KernelChoice(op, "torch-reference", False, f"fla-core not installed ({GPU_DEPS_HINT})")
        return gated_delta_choice(have.capability, have.triton_version, have.tilelang, have.nvcc, have.device_name)
    raise KeyError(op)


def fla_hopper(capability: tuple[int, int], device_name: str = "") -> bool:
    """fla-core 0.6.0's IS_NVIDIA_HOPPER (`fla/utils/hardware.py`): compute capability 9.x, or a name holding
    "NVIDIA H". Blackwell (10.x, 12.x) is not."""
    return capability[0] == 9 or "NVIDIA H" in device_name


def fla_refuses_triton_dqkwg(triton_version: str) -> bool:
    """Whether this Triton is one fla #640 names (>= 3.4.0, < 3.7.1), compared as fla compares it (packaging)."""
    from packaging.version import InvalidVersion, Version

    low, fixed = FLA_640_TRITON
    try:
        return Version(low) <= Version(triton_version) < Version(fixed)
    except InvalidVersion:
        return False


def gated_delta_choice(capability: tuple[int, int], triton_version: str, tilelang: bool, nvcc: bool = True,
                       device_name: str = "") -> KernelChoice:
    """How fla's Gated DeltaNet chain runs on a GPU of this compute capability (and name) with this Triton, where
    fla-core is installed; `tilelang`: tilelang imports; `nvcc`: fla finds an nvcc for its JIT. Where fla refuses
    its Triton chunk_bwd_dqkwg (fla #640: Hopper, Triton 3.4.0 to 3.7.0), that kernel goes to fla's TileLang
    backend if it can run, and the op is refused otherwise (a fallback with its own refusal: the cause, the
    remedies); everywhere else, fla's Triton chain with every other backend off."""
    op, chain = "gated_delta", "fla chunk_gated_delta_rule, gate/l2norm/beta fused"
    if not (fla_hopper(capability, device_name) and fla_refuses_triton_dqkwg(triton_version)):
        return KernelChoice(op, GDN_TRITON, True, chain)
    low, fixed = FLA_640_TRITON
    cause = f"fla #640: Triton >= {low} and < {fixed} miscompiles it on Hopper, and this is Triton {triton_version}"
    if tilelang and nvcc:
        return KernelChoice(op, GDN_TILELANG_DQKWG, True,
                            f"{chain}; chunk_bwd_dqkwg on fla's TileLang backend ({cause})")
    if tilelang:
        missing, remedy = ("fla finds no nvcc to compile its TileLang one with",
                           "put a CUDA toolkit's nvcc on PATH or in CUDA_HOME")
    else:
        missing, remedy = ("tilelang, which its TileLang one needs, is not installed",
                           f"install the `mimo` extra's {MIMO_TILELANG}")
    refusal = (f"Gated DeltaNet cannot train here: fla-core refuses its Triton chunk_bwd_dqkwg ({cause}), and "
               f"{missing}: upgrade Triton to >= {fixed}, or {remedy} (--allow-fallback trains our torch reference "
               "instead)")
    return KernelChoice(op, "torch-reference", False, f"fla refuses its Triton chunk_bwd_dqkwg ({cause}); {missing}",
                        refusal)


def plan_kernels(ops: tuple[str, ...], device: str, allow_fallback: bool = False,
                 dtype: str = "bf16") -> KernelPlan:
    """Choose an implementation for each op (`dtype`: the run's compute dtype); refuse GPU fallbacks
    unless allowed, in the fallback's own line where it has one (`KernelChoice.refusal`). Called before any
    model is built."""
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        raise KeyError(f"unknown kernel ops {unknown}")
    if device == "cpu":
        return KernelPlan(
            "cpu", {op: KernelChoice(op, "torch-reference", False, "CPU run") for op in ops}
        )
    have = Availability.probe(ops)
    if not have.triton:
        raise KernelUnavailable("Triton cannot run here: the SSD and norm kernels need a CUDA GPU and triton")
    plan = KernelPlan("cuda", {op: _cuda_choice(op, have, dtype) for op in ops})
    own = [c.refusal for c in plan.fallbacks if c.refusal]
    if own and not allow_fallback:
        raise KernelUnavailable(own[0])
    if plan.fallbacks and not allow_fallback:
        missing = ", ".join(f"{c.op}: {c.note}" for c in plan.fallbacks)
        raise KernelUnavailable(
            f"fused kernels unavailable ({missing}); {BUILD_HINT}, or pass --allow-fallback to "
            "characterize the fallback path on purpose"
        )
    if any(op in ops for op in ("ssd", "norm", "selective_scan")):
        mamba_ssm()
    return plan


# Python packages whose import needs their own CUDA extension (built by `make kernels`), and that extension.
NEEDS_EXTENSION = {"causal_conv1d": "causal_conv1d_cuda"}


def unbuilt_extensions() -> dict[str, str]:
    """The packages installed here whose import fails only because their CUDA extension is not built, each with
    what `ssmprof doctor` shows for it (`profiler.environment.stack_report`) instead of "not installed"."""
    from importlib import metadata

    found = {}
    for name, extension in NEEDS_EXTENSION.items():
        if _extension_built(extension):
            continue
        try:
            version = metadata.version(name.replace("_", "-"))
        except metadata.PackageNotFoundError:
            continue
        found[name] = f"{version} installed, CUDA extension not built (make kernels)"
    return found


def package_source(distribution: str) -> str | None:
    """Where an installed distribution came from, from the `direct_url.json` pip writes into its dist-info for an
    install that is not from an index (PEP 610): a git URL, `git <commit> <url>`; a local folder (editable or
    not), the folder and its `git describe` and commit as they are now (an editable install runs that code; a
    plain one was built from it, maybe at an earlier commit); a wheel or archive, its URL and hash. None for an
    install from an index (its version says it all) or a distribution not installed."""
    from importlib import metadata

    try:
        text = metadata.distribution(distribution).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        found = json.loads(text) if text else None
    except json.JSONDecodeError:
        return "direct_url.json unreadable"
    if not isinstance(found, dict) or "url" not in found:
        return None
    url = found["url"]
    vcs = found.get("vcs_info")
    if vcs:
        return f"{vcs.get('vcs', 'vcs')} {vcs.get('commit_id', 'unknown commit')} {url}"
    folder = found.get("dir_info")
    if folder is not None:
        how = "editable" if folder.get("editable") else "built from"
        path = urllib.parse.unquote(urllib.parse.urlparse(url).path)
        return f"{how} {path} ({_git_state(path)})"
    archive = found.get("archive_info", {})
    digest = archive.get("hashes", {}).get("sha256") or archive.get("hash")
    return f"{url}" + (f" (sha256 {digest.removeprefix('sha256=')})" if digest else "")


def _git_state(folder: str) -> str:
    """`git <describe> <commit>` of a checkout, `+ changes` where its tree has uncommitted ones; or why none."""
    try:
        described, commit = (subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True,
                                            timeout=10, check=True).stdout.strip()
                             for args in (["describe", "--tags", "--always", "--dirty=+changes"],
                                          ["rev-parse", "HEAD"]))
    except (OSError, subprocess.SubprocessError):
        return "not a git checkout"
    return f"git {described} {commit}"
