"""Gated DeltaNet (Yang, Kautz, Hatamizadeh 2025, "Gated Delta Networks: Improving Mamba2 with Delta Rule"),
the linear-attention layer of Qwen3-Next: the layer through the kernel plan, and our own references.

Per value head, with state S (d_k x d_v), gate a_t = exp(g_t) in (0, 1] and write strength beta_t in (0, 1):

    S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,     o_t = S_t^T q_t      (q, k unit-norm)

`gated_delta_rule_recurrent` steps it. `gated_delta_rule_chunked` (what CPU runs train on) computes it in
chunks: writing S_t = a_t S_{t-1} + k_t d_t^T, the corrections d_t of one chunk solve a unit lower-triangular
system, (I + A) d = diag(beta) (V - diag(G) K S_0) with A_ts = beta_t (G_t / G_s) k_t.k_s for s < t and G the
gate product from the chunk start (the WY form the fused kernels also use); then o_t = G_t S_0^T q_t +
sum_{s<=t} (G_t / G_s)(q_t.k_s) d_s and S_C = G_C S_0 + sum_s (G_C / G_s) k_s d_s^T. Tests check the forms agree
and, on a GPU, that fla's `chunk_gated_delta_rule` agrees with them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ssmprof.kernels import (
    GATED_DELTA_IN_KERNEL,
    GATED_NORM_FUSED_ENTRY,
    GATED_NORM_REFERENCE_ENTRY,
    KernelPlan,
    gated_delta_rule_fused,
    mamba_ssm_module,
)


def _heads(q, k, v):
    """Grouped value heads (more v heads than q/k heads): v head i reads q/k head i // (hv / h)."""
    groups = v.shape[2] // q.shape[2]
    return q.repeat_interleave(groups, 2), k.repeat_interleave(groups, 2)


def gated_delta_rule_recurrent(q, k, v, g, beta, scale=None):
    """The gated delta rule one step at a time (the definition). q, k (b, l, h, dk), unit-norm; v (b, l, hv, dv);
    g (log gate, <= 0) and beta (b, l, hv); scale defaults to dk^-1/2. Returns o (b, l, hv, dv)."""
    compute = torch.promote_types(v.dtype, torch.float32)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    q, k = _heads(q, k, v)
    q, k, v, g, beta = (t.to(compute) for t in (q, k, v, g, beta))
    state = q.new_zeros(q.shape[0], v.shape[2], q.shape[-1], v.shape[-1])
    outputs = []
    for t in range(q.shape[1]):
        kt, bt = k[:, t], beta[:, t, :, None]
        decayed = torch.exp(g[:, t])[..., None, None] * state
        state = decayed + kt[..., None] * (bt * (v[:, t] - torch.einsum("bhk,bhkv->bhv", kt, decayed)))[..., None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, state))
    return torch.stack(outputs, 1)


def gated_delta_rule_chunked(q, k, v, g, beta, scale=None, chunk_size=64):
    """The gated delta rule in chunks of `chunk_size` steps; same arguments and result as the recurrent form."""
    compute = torch.promote_types(v.dtype, torch.float32)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    seqlen, C = q.shape[1], chunk_size
    q, k = _heads(q, k, v)
    q, k, v, g, beta = (t.to(compute) for t in (q, k, v, g, beta))
    pad = -seqlen % C  # padding steps: gate 1, beta 0 (they write nothing)
    q, k, v = (F.pad(t, (0, 0, 0, 0, 0, pad)) for t in (q, k, v))
    g, beta = (F.pad(t, (0, 0, 0, pad)) for t in (g, beta))
    q, k, v = (rearrange(t, "b (c l) h d -> b h c l d", l=C) for t in (q, k, v))
    g, beta = (rearrange(t, "b (c l) h -> b h c l", l=C) for t in (g, beta))
    cs = torch.cumsum(g, -1)  # log G from the chunk start
    causal = torch.tril(torch.ones(C, C, dtype=torch.bool, device=q.device))
    ratio = torch.exp((cs[..., :, None] - cs[..., None, :]).masked_fill(~causal, -math.inf))  # G_t / G_s, s <= t
    A = (beta[..., None] * ratio * (k @ k.transpose(-1, -2))).tril(-1)
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    solve = lambda rhs: torch.linalg.solve_triangular(eye + A, beta[..., None] * rhs, upper=False,  # noqa: E731
                                                       unitriangular=True)
    u, w = solve(v), solve(torch.exp(cs)[..., None] * k)  # d = u - w S_0
    attend = (q @ k.transpose(-1, -2)) * ratio * scale
    state = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])
    outputs = []
    for c in range(q.shape[2]):
        d = u[:, :, c] - w[:, :, c] @ state
        outputs.append(torch.exp(cs[:, :, c])[..., None] * (q[:, :, c] * scale) @ state + attend[:, :, c] @ d)
        last = cs[:, :, c, -1:]
        state = torch.exp(last)[..., None] * state + (torch.exp(last - cs[:, :, c])[..., None] * k[:, :, c]
                                                      ).transpose(-1, -2) @ d
    return rearrange(torch.stack(outputs, 2), "b h c l d -> b (c l) h d")[:, :seqlen]


class GatedDeltaNetMixer(nn.Module):
    """A Gated DeltaNet layer as Qwen3-Next builds it: one input projection (q, k, v, output gate z, beta, gate),
    a causal depthwise conv (kernel 4) + SiLU over q, k, v, l2-normalised q and k, gate
    g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b), the gated delta rule, a per-head RMSNorm gated
    by silu(z), and the output projection. `n_qk_heads` q/k heads serve `n_v_heads` value heads (Qwen3-Next: 2x).
    GPU: causal-conv1d, fla's fused chunk kernels (l2norm, gate and beta inside; on Hopper with Triton 3.4-3.7.0
    the backward's chunk_bwd_dqkwg on fla's TileLang backend, `kernels.gated_delta_choice`) and mamba-ssm's
    gated-norm Triton kernel; CPU: torch conv, our chunked reference and mamba-ssm's `rms_norm_ref`."""

    def __init__(self, d_model: int, n_qk_heads: int, n_v_heads: int, head_dim: int, chunk_size: int,
                 plan: KernelPlan, d_conv: int = 4):
        super().__init__()
        self.n_qk, self.n_v, self.head_dim, self.chunk_size = n_qk_heads, n_v_heads, head_dim, chunk_size
        self.fused = plan.choices["gated_delta"].fused
        self.impl = plan.impl("gated_delta")  # which of fla's backends the fused chain takes (kernels.FLA_BACKENDS)
        self.conv_impl = plan.impl("conv1d")
        self.norm_fused = plan.choices["norm"].fused  # the plan's Triton norms (here the gated rmsnorm_fn), as recorded
        key_dim, value_dim = n_qk_heads * head_dim, n_v_heads * head_dim
        self.split = [key_dim, key_dim, value_dim, value_dim, n_v_heads, n_v_heads]  # q k v z b a
        self.in_proj = nn.Linear(d_model, sum(self.split), bias=False)
        self.conv1d = nn.Conv1d(2 * key_dim + value_dim, 2 * key_dim + value_dim, d_conv, groups=2 * key_dim +
                                value_dim, padding=d_conv - 1, bias=False)
        # Qwen3-Next's initialisation: A uniform in (0, 16); dt in [1e-3, 1e-1] log-uniform through softplus
        self.A_log = nn.Parameter(torch.log(torch.empty(n_v_heads).uniform_(1e-4, 16)))
        dt = torch.exp(torch.rand(n_v_heads) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.norm_weight = nn.Parameter(torch.ones(head_dim))
        self.out_proj = nn.Linear(value_dim, d_model, bias=False)

    def _conv(self, qkv: torch.Tensor) -> torch.Tensor:
        if self.conv_impl == "causal-conv1d-cuda":
            from causal_conv1d import causal_conv1d_fn

            weight = rearrange(self.conv1d.weight, "d 1 w -> d w")
            return causal_conv1d_fn(qkv.transpose(1, 2), weight, None, activation="silu").transpose(1, 2)
        return F.silu(self.conv1d(qkv.transpose(1, 2))[..., : qkv.shape[1]]).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, z, b, a = torch.split(self.in_proj(x), self.split, dim=-1)
        q, k, v = torch.split(self._conv(torch.cat([q, k, v], -1)), self.split[:3], dim=-1)
        q, k = (rearrange(t, "b l (h d) -> b l h d", d=self.head_dim) for t in (q, k))
        v = rearrange(v, "b l (h d) -> b l h d", d=self.head_dim)
        if self.fused:
            o, _ = gated_delta_rule_fused(self.impl)(q, k, v, a, b, **GATED_DELTA_IN_KERNEL, A_log=self.A_log,
                                                     dt_bias=self.dt_bias, chunk_size=self.chunk_size)
        else:
            g = -torch.exp(self.A_log.float()) * F.softplus(a.float() + self.dt_bias)
            o = gated_delta_rule_chunked(F.normalize(q.float(), dim=-1), F.normalize(k.float(), dim=-1), v, g,
                                         torch.sigmoid(b.float()), chunk_size=self.chunk_size)
        module, function = GATED_NORM_FUSED_ENTRY if self.norm_fused else GATED_NORM_REFERENCE_ENTRY
        gated_norm = getattr(mamba_ssm_module(module), function)
        o = gated_norm(rearrange(o, "b l h d -> b l (h d)"), self.norm_weight.repeat(self.n_v), None,
                       z=z, eps=1e-6, group_size=self.head_dim, norm_before_gate=True)
        return self.out_proj(o.to(x.dtype))
