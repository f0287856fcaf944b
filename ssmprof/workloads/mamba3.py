"""Mamba-3 (Lahoti et al. 2026, "Mamba-3: Improved Sequence Modeling using State Space Principles"): the layer
through the kernel plan, and our own pure-torch references of its scan.

The scan, per head, with state h (d_state x headdim), written from the paper's exponential-trapezoidal rule:

    h_t = a_t h_{t-1} + b_t k_{t-1} u_{t-1}^T + g_t k_t u_t^T,   y_t = h_t^T q_t + D u_t
    a_t = exp(dt_t A_t),  b_t = (1 - lam_t) dt_t a_t,  g_t = lam_t dt_t,  lam_t = sigmoid(trap_t)

q (C) and k (B) carry a learned bias and are rotated by a data-dependent angle, the running sum of
pi tanh(theta_t) dt_t (the "complex-valued" state as a rotary embedding); SISO rotates adjacent pairs
(2i, 2i+1), mamba-ssm's MIMO kernel pairs i with i + d_state/2. MIMO (rank R) feeds R projections of x
into the state (u_{t,r} = x_t * psi_r), reads R outputs and sums them after their gates
(y_t = sum_r phi_r * silu(z_t * zeta_r) * o_{t,r}); SISO is R = 1 with psi = phi = zeta = 1.

`mamba3_scan_recurrent` steps that recurrence; `mamba3_scan_chunked`, what CPU runs train on, computes the
same outputs in chunks (the SSD way: a masked quadratic form within a chunk, a state between chunks),
after rewriting the trapezoid as one key weight per step, s_t = g_t + (1 - lam_{t+1}) dt_{t+1}, with the
diagonal weighted g_t alone. Tests check the two agree, and on a GPU that mamba-ssm's kernels agree with them.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from torch import nn

from ssmprof.kernels import KernelPlan, mamba3_module


def _rotate(x: torch.Tensor, phi: torch.Tensor, halves: bool) -> torch.Tensor:
    """Rotate the first phi.shape[-1] pairs of x's last dim by angles phi (broadcast over x's other dims).
    Pairs are (2i, 2i+1), or (i, i + n/2) with `halves` (the MIMO kernel's layout)."""
    n, s = x.shape[-1], phi.shape[-1]
    if halves:
        first, second = x[..., :s], x[..., n // 2 : n // 2 + s]
    else:
        first, second = x[..., 0 : 2 * s : 2], x[..., 1 : 2 * s : 2]
    cos, sin = torch.cos(phi), torch.sin(phi)
    r_first, r_second = first * cos - second * sin, first * sin + second * cos
    out = x.clone()
    if halves:
        out[..., :s], out[..., n // 2 : n // 2 + s] = r_first, r_second
    else:
        out[..., 0 : 2 * s : 2], out[..., 1 : 2 * s : 2] = r_first, r_second
    return out


def _prepare(q, k, v, adt, dt, trap, q_bias, k_bias, angles, mimo_x, halves):
    """Shared by both forms: heads expanded from groups, biases, rotation, step weights, projected inputs.
    Returns q, k (b, l, r, h, n) rotated; u (b, l, r, h, p); gamma, shifted (b, l, h)."""
    nheads = v.shape[2]
    q, k = (repeat(t, "b l r g n -> b l r (g e) n", e=nheads // t.shape[3]) for t in (q, k))
    q = q + rearrange(q_bias, "h r n -> r h n")
    k = k + rearrange(k_bias, "h r n -> r h n")
    phi = torch.cumsum(math.pi * torch.tanh(angles).unsqueeze(2) * dt.unsqueeze(-1), dim=1)  # (b, l, h, s)
    q, k = (_rotate(t, phi.unsqueeze(2), halves) for t in (q, k))
    lam = torch.sigmoid(trap)
    gamma = lam * dt
    shifted = F.pad(((1 - lam) * dt)[:, 1:], (0, 0, 0, 1))  # (1 - lam_{t+1}) dt_{t+1}; none after the last step
    u = v.unsqueeze(2) if mimo_x is None else v.unsqueeze(2) * rearrange(mimo_x, "h r p -> r h p")
    return q, k, u, gamma, shifted


def _finish(o, u, z, D, mimo_z, mimo_o):
    """o (b, l, r, h, p) of the state read-out: D skip, gate, MIMO down-projection; returns (b, l, h, p)."""
    o = o + D[:, None] * u
    if z is not None:
        gate = z.unsqueeze(2) if mimo_z is None else z.unsqueeze(2) * rearrange(mimo_z, "h r p -> r h p")
        o = o * F.silu(gate)
    if mimo_o is not None:
        o = o * rearrange(mimo_o, "h r p -> r h p")
    return o.sum(2)


def mamba3_scan_recurrent(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z=None, mimo_x=None, mimo_z=None,
                          mimo_o=None, halves=False):
    """The Mamba-3 scan, one step at a time (the definition; slow). Shapes: q, k (b, l, r, g, n); v, z
    (b, l, h, p); adt (= A dt), dt, trap (pre-sigmoid) (b, l, h); q_bias, k_bias (h, r, n); angles
    (pre-tanh, shared by the heads) (b, l, s); D (h,); mimo_* (h, r, p) or None (SISO). Returns (b, l, h, p)."""
    compute = torch.promote_types(v.dtype, torch.float32)
    q, k, v, adt, dt, trap, angles = (t.to(compute) for t in (q, k, v, adt, dt, trap, angles))
    q, k, u, gamma, _ = _prepare(q, k, v, adt, dt, trap, q_bias, k_bias, angles, mimo_x, halves)
    lam = torch.sigmoid(trap)
    beta = (1 - lam) * dt * torch.exp(adt)
    batch, seqlen, _, nheads, dstate = q.shape
    h = q.new_zeros(batch, nheads, dstate, v.shape[-1])
    ku_prev = torch.zeros_like(h)
    outputs = []
    for t in range(seqlen):
        ku = torch.einsum("brhn,brhp->bhnp", k[:, t], u[:, t])
        h = (torch.exp(adt[:, t])[..., None, None] * h + beta[:, t][..., None, None] * ku_prev
             + gamma[:, t][..., None, None] * ku)
        outputs.append(torch.einsum("brhn,bhnp->brhp", q[:, t], h))
        ku_prev = ku
    return _finish(torch.stack(outputs, 1), u, z, D, mimo_z, mimo_o).to(v.dtype)


def mamba3_scan_chunked(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z=None, mimo_x=None, mimo_z=None,
                        mimo_o=None, halves=False, chunk_size=64):
    """The Mamba-3 scan in chunks of `chunk_size` steps; same arguments and result as `mamba3_scan_recurrent`."""
    compute = torch.promote_types(v.dtype, torch.float32)
    v_in = v
    q, k, v, adt, dt, trap, angles = (t.to(compute) for t in (q, k, v, adt, dt, trap, angles))
    q, k, u, gamma, shifted = _prepare(q, k, v, adt, dt, trap, q_bias, k_bias, angles, mimo_x, halves)
    seqlen, Q = q.shape[1], chunk_size
    # Pad to whole chunks: zero decay, and zero key weight (dt = 0), so padding never reaches real outputs.
    pad = -seqlen % Q
    q, k, u = (F.pad(t, (0, 0, 0, 0, 0, 0, 0, pad)) for t in (q, k, u))
    adt, gamma, shifted = (F.pad(t, (0, 0, 0, pad)) for t in (adt, gamma, shifted))
    q, k, u = (rearrange(t, "b (c l) r h n -> b c l r h n", l=Q) for t in (q, k, u))
    adt, gamma, weight = (rearrange(t, "b (c l) h -> b h c l", l=Q) for t in (adt, gamma, gamma + shifted))
    cs = torch.cumsum(adt, -1)  # (b, h, c, l): log decay from the chunk start
    # within a chunk: step s reaches t > s with exp(cs_t - cs_s) * weight_s; itself (s = t) with gamma_t
    later = torch.tril(torch.ones(Q, Q, dtype=torch.bool, device=q.device), -1)
    decay = torch.exp((cs[..., :, None] - cs[..., None, :]).masked_fill(~later, -math.inf))
    mix = decay * weight[..., None, :] + torch.diag_embed(gamma)  # (b, h, c, t, s)
    scores = torch.einsum("bctihn,bcsjhn->bhctsij", q, k)
    o = torch.einsum("bhctsij,bhcts,bcsjhp->bctihp", scores, mix, u)
    # between chunks: the state entering each chunk, decayed to each step
    chunk_states = torch.einsum("bcsjhn,bhcs,bcsjhp->bchnp", k, torch.exp(cs[..., -1:] - cs) * weight, u)
    state = torch.zeros_like(chunk_states[:, 0])
    states = []
    for c in range(chunk_states.shape[1]):
        states.append(state)
        state = torch.exp(cs[:, :, c, -1])[..., None, None] * state + chunk_states[:, c]
    entering = torch.stack(states, 1)  # (b, c, h, n, p)
    o = o + torch.einsum("bctihn,bchnp,bhct->bctihp", q, entering, torch.exp(cs))
    o = rearrange(o, "b c t r h p -> b (c t) r h p")[:, :seqlen]
    u = rearrange(u, "b c t r h p -> b (c t) r h p")[:, :seqlen]
    return _finish(o, u, z, D, mimo_z, mimo_o).to(v_in.dtype)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + eps) * weight).to(x.dtype)


def mamba3_mixer_ref(mixer: Any, u: torch.Tensor) -> torch.Tensor:
    """Forward of a mamba_ssm `Mamba3` module (default settings: no out-projection norm) on our chunked scan."""
    rank = mixer.mimo_rank
    bc = mixer.d_state * mixer.num_bc_heads * rank
    z, x, B, C, dd_dt, dd_A, trap, angles = torch.split(
        mixer.in_proj(u), [mixer.d_inner, mixer.d_inner, bc, bc, mixer.nheads, mixer.nheads, mixer.nheads,
                           mixer.num_rope_angles], dim=-1)
    A = torch.clamp(-F.softplus(dd_A.float()), max=-mixer.A_floor)
    dt = F.softplus(dd_dt + mixer.dt_bias)
    B, C = (rearrange(t, "b l (r g n) -> b l r g n", r=rank, g=mixer.num_bc_heads) for t in (B, C))
    B, C = _rms_norm(B, mixer.B_norm.weight, mixer.B_norm.eps), _rms_norm(C, mixer.C_norm.weight, mixer.C_norm.eps)
    headed = "b l (h p) -> b l h p"
    mimo_x, mimo_z, mimo_o = (mixer.mimo_x, mixer.mimo_z, mixer.mimo_o) if mixer.is_mimo else (None, None, None)
    y = mamba3_scan_chunked(C, B, rearrange(x, headed, p=mixer.headdim), A * dt, dt, trap, mixer.C_bias,
                            mixer.B_bias, angles, mixer.D, rearrange(z, headed, p=mixer.headdim), mimo_x,
                            mimo_z, mimo_o, halves=mixer.is_mimo, chunk_size=mixer.chunk_size)
    return mixer.out_proj(rearrange(y, "b l h p -> b l (h p)").to(x.dtype))


class Mamba3Mixer(nn.Module):
    """mamba-ssm's `Mamba3`: on the GPU its fused kernels (SISO: Triton `mamba3_siso_combined`; MIMO: TileLang
    `mamba3_mimo`), elsewhere `mamba3_mixer_ref` on the same parameters. Mamba-3 has no short convolution."""

    def __init__(self, d_model: int, d_state: int, headdim: int, expand: int, ngroups: int, chunk_size: int,
                 mimo_rank: int | None, plan: KernelPlan, layer_idx: int):
        super().__init__()
        op = "mamba3" if mimo_rank is None else "mamba3_mimo"
        self.reference = not plan.choices[op].fused
        self.mamba = mamba3_module().Mamba3(
            d_model, d_state=d_state, expand=expand, headdim=headdim, ngroups=ngroups, is_mimo=mimo_rank is not None,
            mimo_rank=mimo_rank or 1, chunk_size=chunk_size, layer_idx=layer_idx)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return mamba3_mixer_ref(self.mamba, u) if self.reference else self.mamba(u)
