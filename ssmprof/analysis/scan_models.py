"""Analytic work of the newer sequence mixers' forward kernels, beside `ssd_model`'s SSD chain; and which model a
run's workload config calls for.

Mamba-3 SISO (mamba-ssm 2.3.2.post1, `mamba3_siso_combined`), per layer with batch b, sequence L, heads h, head
dim p, state n, B/C groups g, chunk Q, rotary angles S (c = L / Q chunks); the kernel casts q, k, v, z to bf16:

- angle_dt_fwd: ~3 b L h S other FLOPs (tanh, x pi dt, running sum); angles in (bf16), dt in, angles out (fp32).
- mamba3_siso_fwd: b h L (4 n p + 2 Q n + 2 Q p + 2 n) matmul FLOPs (q.state, q k^T, masked scores.v, the
  state update, and the diagonal q.k through a dot), ~b h L (12 S + 3 n + Q + 6 p) other (rotations, biases,
  key weights, decay mask, D skip, gate). Bytes: q, k (per group), v, z, the step tensors in; out, the pre-gate
  out, per-chunk states (bf16), rotated q and k and the per-step scalars out (what its backward reads).

Gated DeltaNet (fla-core 0.6.0 chunk path), per layer with q/k heads H, value heads V_h, head dim d (keys and
values), chunk C:

- gdn_gate_chunk_cumsum: ~5 b L V_h other; gate input in (compute dtype), log gates out (fp32).
- chunk_gated_delta_rule_fwd_kkt_solve: b V_h L (2 C d + 2/3 C^2) matmul FLOPs (k k^T within a chunk, then the
  unit-triangular inverse, about C^3 / 3 multiply-adds a chunk); k, gates, betas in; A out.
- recompute_w_u_fwd: b V_h L 4 C d (A times the beta-weighted keys and values); A, k, v in; w, u out.
- chunk_gated_delta_rule_fwd_kernel_h: b V_h L 4 d^2 (w.state, then k^T.v_new into the state); k, w, u, gates in;
  per-chunk states and v_new out.
- chunk_fwd_kernel_o: b V_h L (2 d^2 + 4 C d) (q.state, q k^T, scores.v_new); q, k, v_new, states in; o out.

The masked C x C products are counted dense (kernels skip part of the upper triangle: measured/analytic below 1
is expected there). The l2norm and beta-sigmoid kernels fla runs first are left out (normalization, elementwise).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import pandas as pd

from ssmprof.analysis.ssd_model import FP32, SsdShape, ssd_forward_model
from ssmprof.kernels import GDN_V_HEADS_PER_QK_HEAD, MAMBA3_CHUNK, hybrid_gdn_chunk

BF16 = 2
MAMBA3_FORWARD_KERNELS = ("angle_dt_fwd", "mamba3_siso_fwd")
GDN_FORWARD_KERNELS = ("gdn_gate_chunk_cumsum", "chunk_gated_delta_rule_fwd_kkt_solve", "recompute_w_u_fwd",
                       "chunk_gated_delta_rule_fwd_kernel_h", "chunk_fwd_kernel_o")
COLUMNS = ["kernel", "flops_matmul", "flops_other", "min_bytes"]


def _frame(rows) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["flops"] = frame["flops_matmul"] + frame["flops_other"]
    return frame


@dataclass(frozen=True)
class Mamba3Shape(SsdShape):
    """A Mamba-2 layer's shape (Mamba-3 keeps its heads, head dim, state and groups) and Mamba-3's rotary angles."""

    angles: int = field(kw_only=True)  # rotary angle pairs: a quarter of d_state (mamba-ssm's rope_fraction 0.5)

    @classmethod
    def from_config(cls, config: dict, chunk: int) -> Mamba3Shape:
        ssd = replace(SsdShape.from_config(config), chunk=chunk)
        return cls(**asdict(ssd), angles=ssd.dstate // 4)


def mamba3_forward_model(s: Mamba3Shape) -> pd.DataFrame:
    """Per forward Mamba-3 SISO kernel of one layer: flops_matmul, flops_other, flops, min_bytes."""
    b, L, h, p, n, g, Q, S, c = s.batch, s.seqlen, s.nheads, s.headdim, s.dstate, s.ngroups, s.chunk, s.angles, \
        s.chunks
    steps, per_step = b * h * L, b * h * L * FP32
    angle_dt, siso = MAMBA3_FORWARD_KERNELS
    rows = [
        (angle_dt, 0, 3 * steps * S, steps * S * (BF16 + FP32) + per_step),
        (siso, steps * (4 * n * p + 2 * Q * n + 2 * Q * p + 2 * n), steps * (12 * S + 3 * n + Q + 6 * p),
         2 * b * L * g * n * BF16 + 2 * steps * p * BF16 + 2 * per_step + steps * BF16 + steps * S * FP32
         + 2 * steps * p * BF16 + b * h * p * c * n * BF16 + per_step + 2 * steps * n * BF16 + 3 * per_step),
    ]
    return _frame(rows)


@dataclass(frozen=True)
class GdnShape:
    batch: int
    seqlen: int
    qk_heads: int
    v_heads: int
    head_dim: int
    chunk: int
    elem_bytes: int = BF16

    @classmethod
    def from_config(cls, config: dict, head_dim: int, v_heads_per_qk_head: int, chunk: int) -> GdnShape:
        v_heads = config["expand"] * config["d_model"] // head_dim
        return cls(config["batch_size"], config["seq_len"], v_heads // v_heads_per_qk_head, v_heads, head_dim,
                   chunk, BF16 if config.get("dtype", "bf16") != "fp32" else FP32)


def gdn_forward_model(s: GdnShape) -> pd.DataFrame:
    """Per forward Gated DeltaNet kernel of one layer (fla's chunk path): flops_matmul, flops_other, flops,
    min_bytes."""
    b, L, H, Hv, d, C, e = s.batch, s.seqlen, s.qk_heads, s.v_heads, s.head_dim, s.chunk, s.elem_bytes
    c = -(-L // C)
    steps = b * L * Hv
    qk_bytes, v_bytes, gates = b * L * H * d * e, steps * d * e, steps * FP32
    a_bytes, states = steps * C * e, b * Hv * c * d * d * e
    gate, kkt, wu, h, o = GDN_FORWARD_KERNELS
    rows = [
        (gate, 0, 5 * steps, steps * e + gates),
        (kkt, steps * (2 * C * d + 2 * C * C // 3), steps * C, qk_bytes + 2 * gates + a_bytes),
        (wu, steps * 4 * C * d, 0, a_bytes + qk_bytes + v_bytes + 2 * gates + 2 * v_bytes),
        (h, steps * 4 * d * d, steps * d, qk_bytes + 2 * v_bytes + gates + states + v_bytes),
        (o, steps * (2 * d * d + 4 * C * d), steps * C, 2 * qk_bytes + v_bytes + states + gates + v_bytes),
    ]
    return _frame(rows)


def forward_model(config: dict) -> pd.DataFrame | None:
    """The analytic forward model of the run's sequence mixer, chosen by its workload config: Gated DeltaNet
    (gdn-lm, gdn-hybrid, hybrid with ssm_layer=gdn), Mamba-3 SISO (mamba3-lm, hybrid with ssm_layer=mamba3; MIMO
    has no model yet: None), else the SSD chain where the config has its settings (None otherwise)."""
    layer = config.get("ssm_layer")
    if layer == "gdn":
        return gdn_forward_model(GdnShape.from_config(config, config["d_state"], GDN_V_HEADS_PER_QK_HEAD,
                                                      hybrid_gdn_chunk(config["chunk_size"])))
    if "v_heads_per_qk_head" in config:
        return gdn_forward_model(GdnShape.from_config(config, config["head_dim"], config["v_heads_per_qk_head"],
                                                      config["chunk_size"]))
    if layer == "mamba3" or (layer is None and "mimo" in config):
        if config["mimo"]:
            return None
        chunk = config["chunk_size"] if layer is None else min(config["chunk_size"], MAMBA3_CHUNK)
        return mamba3_forward_model(Mamba3Shape.from_config(config, chunk))
    if {"d_state", "chunk_size", "headdim"} <= set(config):
        return ssd_forward_model(SsdShape.from_config(config))
    return None
