"""Building blocks shared by the workloads, each routed through the kernel plan.

On the GPU every layer runs the real fused kernels (mamba-ssm's Mamba2 module on its memory-efficient
path, mamba-ssm's Triton add+RMSNorm, SDPA flash attention). On the CPU the same parameters run through
pure-torch references: mamba-ssm's `*_ref` functions composed the way the fused path composes its
kernels. `tests/test_layers_gpu.py` checks the two against each other on a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from torch import nn

from ssmprof.kernels import (
    GATED_NORM_REFERENCE_ENTRY,
    NORM_ENTRY,
    SELECTIVE_SCAN_ENTRY,
    SSD_REFERENCE_ENTRY,
    KernelPlan,
    mamba_ssm,
    mamba_ssm_module,
)


def ssd_ref(x, dt, A, B, C, D, dt_bias, chunk_size):
    """The SSD scan in pure torch: mamba-ssm's `ssd_minimal_discrete` (Listing 1 of the Mamba-2 paper)
    plus the dt softplus, the D skip and padding to whole chunks.

    mamba-ssm's `ssd_chunk_scan_combined_ref` is not used for training: it needs whole chunks, and its
    backward turns to NaN once exp() of the masked-out decay overflows, which happens at realistic
    dt and A. `ssd_minimal_discrete` masks with -inf before exp(), so its gradients stay finite.

    x: (b, l, h, p); dt: (b, l, h); A, dt_bias: (h,); B, C: (b, l, g, n); D: (h,). Returns (b, l, h, p).
    """
    module, function = SSD_REFERENCE_ENTRY
    ssd_minimal_discrete = getattr(mamba_ssm_module(module), function)
    seqlen, nheads = x.shape[1], x.shape[2]
    # Like the fused kernels, keep the scan itself in (at least) fp32 whatever the input dtype.
    compute = torch.promote_types(x.dtype, torch.float32)
    x_in = x
    x, dt, A, B, C, D, dt_bias = (t.to(compute) for t in (x, dt, A, B, C, D, dt_bias))
    dt = F.softplus(dt + dt_bias)
    B, C = (repeat(t, "b l g n -> b l (g r) n", r=nheads // t.shape[2]) for t in (B, C))
    # Zero dt on the padding: no input enters the state there, and causality keeps real outputs exact.
    pad = (0, 0, 0, 0, 0, -seqlen % chunk_size)
    xdt, B, C = (F.pad(t, pad) for t in (x * dt.unsqueeze(-1), B, C))
    y, _ = ssd_minimal_discrete(xdt, F.pad(A * dt, pad[2:]), B, C, chunk_size)
    return (y[:, :seqlen].to(compute) + x * D.unsqueeze(-1)).to(x_in.dtype)


def mamba2_mixer_ref(mixer: Any, u: torch.Tensor, seqlen: int | None = None) -> torch.Tensor:
    """Pure-torch forward of a mamba_ssm `Mamba2` module (the composition its fused path computes).

    `seqlen` given: `u` is flattened to (batch * seqlen, d_model) as `Mamba2.forward(u, seqlen=)` takes it
    (sequence parallelism splits that dimension; a tensor-parallel `in_proj` gathers it back). The gated
    RMSNorm's group size comes from the module's own (per-rank) sizes, as on the fused path."""
    module, function = GATED_NORM_REFERENCE_ENTRY
    rms_norm_ref = getattr(mamba_ssm_module(module), function)
    zxbcdt = mixer.in_proj(u)
    flat = seqlen is not None
    if flat:
        zxbcdt = rearrange(zxbcdt, "(b l) d -> b l d", l=seqlen)
    seqlen = zxbcdt.shape[1]
    xbc_dim = mixer.d_ssm + 2 * mixer.ngroups * mixer.d_state
    z, xbc, dt = torch.split(zxbcdt, [mixer.d_ssm, xbc_dim, mixer.nheads], dim=-1)
    # Causal depthwise conv: the module's conv1d pads both sides by d_conv-1; keep the causal part.
    xbc = F.silu(mixer.conv1d(xbc.transpose(1, 2))[..., :seqlen]).transpose(1, 2)
    x, B, C = torch.split(xbc, [mixer.d_ssm, mixer.ngroups * mixer.d_state, mixer.ngroups * mixer.d_state], -1)
    y = ssd_ref(
        rearrange(x, "b l (h p) -> b l h p", p=mixer.headdim),
        dt,
        -torch.exp(mixer.A_log.float()),
        rearrange(B, "b l (g n) -> b l g n", g=mixer.ngroups),
        rearrange(C, "b l (g n) -> b l g n", g=mixer.ngroups),
        mixer.D,
        mixer.dt_bias,
        mixer.chunk_size,
    )
    y = rms_norm_ref(
        rearrange(y, "b l h p -> b l (h p)"),
        mixer.norm.weight,
        None,
        z=z,
        eps=mixer.norm.eps,
        group_size=mixer.d_ssm // mixer.ngroups,
        norm_before_gate=mixer.norm_before_gate,
    ).to(zxbcdt.dtype)
    return mixer.out_proj(rearrange(y, "b l d -> (b l) d") if flat else y)


class Mamba2Mixer(nn.Module):
    """mamba-ssm's `Mamba2` (fused memory-efficient path on the GPU), reference forward on the CPU."""

    def __init__(self, d_model: int, d_state: int, headdim: int, expand: int, ngroups: int,
                 chunk_size: int, plan: KernelPlan, layer_idx: int):
        super().__init__()
        self.reference = plan.device == "cpu"
        self.mamba = mamba_ssm().Mamba2(
            d_model,
            d_state=d_state,
            d_conv=4,
            expand=expand,
            headdim=headdim,
            ngroups=ngroups,
            chunk_size=chunk_size,
            # The fused split-conv1d-scan path needs causal-conv1d; without it (an allowed fallback)
            # mamba-ssm runs torch's depthwise conv and the unfused SSD chain.
            use_mem_eff_path=plan.impl("conv1d") == "causal-conv1d-cuda",
            layer_idx=layer_idx,
        )

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return mamba2_mixer_ref(self.mamba, u) if self.reference else self.mamba(u)


def selective_scan(plan: KernelPlan, u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=True):
    """Mamba-1 selective scan through the plan: the CUDA kernel, or mamba-ssm's pure-torch reference.
    Shapes as mamba-ssm's `selective_scan_fn`: u, delta, z (b, d, l); A (d, n); B, C (b, n, l); D (d,)."""
    module, fused, reference = SELECTIVE_SCAN_ENTRY
    interface = mamba_ssm_module(module)
    scan = getattr(interface, fused if plan.impl("selective_scan") == "selective-scan-cuda" else reference)
    return scan(u, delta, A, B, C, D, z=z, delta_bias=delta_bias, delta_softplus=delta_softplus)


def mamba1_mixer_ref(mixer: Any, u: torch.Tensor, plan: KernelPlan, seqlen: int | None = None,
                     reduce_x_dbl=None, conv=None) -> torch.Tensor:
    """Forward of a mamba_ssm `Mamba` (Mamba-1) module without its fused `mamba_inner_fn`: torch conv1d,
    projections, then the selective scan the plan picks (mamba-ssm's slow path, step for step).

    `seqlen` given: `u` is (batch * seqlen, d_model) (sequence parallelism). `reduce_x_dbl`: what completes
    x_proj's output when d_inner is sharded over ranks (tensor parallelism: an all-reduce). `conv`: the causal
    conv1d + SiLU as causal-conv1d's `causal_conv1d_fn(x, weight, bias, activation=)` computes it (default: the
    module's torch conv1d)."""
    xz = mixer.in_proj(u)
    flat = seqlen is not None
    if flat:
        xz = rearrange(xz, "(b l) d -> b l d", l=seqlen)
    seqlen = xz.shape[1]
    x, z = rearrange(xz, "b l d -> b d l").chunk(2, dim=1)
    if conv is None:
        x = F.silu(mixer.conv1d(x)[..., :seqlen])
    else:
        x = conv(x, rearrange(mixer.conv1d.weight, "d 1 w -> d w"), mixer.conv1d.bias, activation="silu")
    x_dbl = mixer.x_proj(rearrange(x, "b d l -> (b l) d"))
    if reduce_x_dbl is not None:
        x_dbl = reduce_x_dbl(x_dbl)
    dt, B, C = torch.split(x_dbl, [mixer.dt_rank, mixer.d_state, mixer.d_state], dim=-1)
    dt = rearrange(mixer.dt_proj.weight @ dt.t(), "d (b l) -> b d l", l=seqlen)
    B, C = (rearrange(t, "(b l) n -> b n l", l=seqlen).contiguous() for t in (B, C))
    y = selective_scan(plan, x, dt, -torch.exp(mixer.A_log.float()), B, C, mixer.D.float(), z=z,
                       delta_bias=mixer.dt_proj.bias.float())
    return mixer.out_proj(rearrange(y, "b d l -> (b l) d" if flat else "b d l -> b l d"))


class Mamba1Mixer(nn.Module):
    """mamba-ssm's `Mamba` (Mamba-1). On the GPU its fused `mamba_inner_fn` (causal-conv1d + selective-scan
    CUDA in one autograd function); otherwise the same math through `mamba1_mixer_ref`."""

    def __init__(self, d_model: int, d_state: int, expand: int, plan: KernelPlan, layer_idx: int):
        super().__init__()
        self.plan = plan
        self.fused = (plan.impl("selective_scan") == "selective-scan-cuda"
                      and plan.impl("conv1d") == "causal-conv1d-cuda")
        self.mamba = mamba_ssm().Mamba(d_model, d_state=d_state, d_conv=4, expand=expand, use_fast_path=True,
                                       layer_idx=layer_idx)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.mamba(u) if self.fused else mamba1_mixer_ref(self.mamba, u, self.plan)


class AddRMSNorm(nn.Module):
    """residual += x; x = RMSNorm(residual). One Triton kernel on the GPU (as mamba-ssm's Block does)."""

    def __init__(self, dim: int, plan: KernelPlan, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self.fused = plan.device == "cuda"

    def forward(self, x, residual=None, prenorm=True):
        module, fused, reference = NORM_ENTRY
        layer_norm = mamba_ssm_module(module)
        if self.fused:
            return getattr(layer_norm, fused)(x, self.weight, None, residual=residual, eps=self.eps, prenorm=prenorm,
                                              residual_in_fp32=True, is_rms_norm=True)
        return getattr(layer_norm, reference)(x, self.weight, None, residual=residual, eps=self.eps, prenorm=prenorm,
                                              upcast=True)


class SelfAttention(nn.Module):
    """Multi-head attention with grouped KV heads; flash attention on the GPU, no position embedding
    (the Mamba-2 hybrids rely on the Mamba layers for position, as in Waleffe et al. 2024)."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, plan: KernelPlan, causal: bool = True):
        super().__init__()
        if d_model % n_heads or n_heads % n_kv_heads:
            raise ValueError("d_model must divide into heads and heads into KV groups")
        self.n_heads, self.n_kv_heads, self.causal = n_heads, n_kv_heads, causal
        self.head_dim = d_model // n_heads
        self.qkv = nn.Linear(d_model, (n_heads + 2 * n_kv_heads) * self.head_dim, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.impl = plan.impl("attention")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.attend(self.qkv(x)))

    def attend(self, qkv: torch.Tensor) -> torch.Tensor:
        """(b, l, (heads + 2 kv heads) * head_dim) projections -> (b, l, heads * head_dim) attention output."""
        q, k, v = torch.split(
            qkv,
            [self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim, self.n_kv_heads * self.head_dim],
            dim=-1,
        )
        # flash kernels have no fp32 path: an fp32 pass of a bf16-planned model (the TP numerics' fp32 arbiter,
        # autocast off) takes SDPA's default, as the plan of an fp32 run does (`kernels._cuda_choice`)
        impl = self.impl if qkv.dtype in (torch.bfloat16, torch.float16) else "sdpa"
        if impl == "flash-attn":
            from flash_attn import flash_attn_func

            shape = "b l (h d) -> b l h d"
            out = flash_attn_func(rearrange(q, shape, d=self.head_dim), rearrange(k, shape, d=self.head_dim),
                                  rearrange(v, shape, d=self.head_dim), causal=self.causal)
            return rearrange(out, "b l h d -> b l (h d)")
        q, k, v = (rearrange(t, "b l (h d) -> b h l d", d=self.head_dim) for t in (q, k, v))
        if impl == "sdpa-flash":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                out = self._sdpa(q, k, v)
        else:
            out = self._sdpa(q, k, v)
        return rearrange(out, "b h l d -> b l (h d)")

    def _sdpa(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal,
                                              enable_gqa=self.n_kv_heads != self.n_heads)


class MLP(nn.Module):
    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class PreNormBlock(nn.Module):
    """mixer(RMSNorm(x + residual)), carrying the residual stream separately (mamba-ssm's Block layout)."""

    def __init__(self, d_model: int, mixer: nn.Module, plan: KernelPlan):
        super().__init__()
        self.norm = AddRMSNorm(d_model, plan)
        self.mixer = mixer

    def forward(self, hidden, residual=None):
        hidden, residual = self.norm(hidden, residual, prenorm=True)
        return self.mixer(hidden), residual


class CausalLM(nn.Module):
    """Token embedding, a stack of pre-norm blocks, final norm, tied LM head."""

    def __init__(self, vocab_size: int, d_model: int, mixers: Sequence[nn.Module], plan: KernelPlan):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(PreNormBlock(d_model, mixer, plan) for mixer in mixers)
        self.norm_f = AddRMSNorm(d_model, plan)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.embedding.weight
        _init_weights(self, len(mixers))

    def blocks(self) -> list[PreNormBlock]:
        """The layers, typed (an nn.ModuleList yields them as plain modules)."""
        return [cast(PreNormBlock, layer) for layer in self.layers]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden, residual = self.embedding(input_ids), None
        for layer in self.layers:
            hidden, residual = layer(hidden, residual)
        return self.lm_head(self.norm_f(hidden, residual, prenorm=False))


def _init_weights(model: CausalLM, n_layers: int) -> None:
    """GPT-2 style init with output projections scaled by depth (what mamba-ssm's LM does)."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and module.weight is not model.embedding.weight:
            std = 0.02 / math.sqrt(2 * n_layers) if name.endswith(("out_proj", "fc2")) else 0.02
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
