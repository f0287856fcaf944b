"""Analytic work of the sequence mixers' forward kernels, to set beside what the counters measured (the Mamba-2
SSD chain, Mamba-3 SISO and MIMO, Gated DeltaNet), and which model a run's workload config calls for
(`forward_model`).

Mamba-2 SSD: for one layer with batch b, sequence L, heads h, head dim p, state n, groups g and chunk Q
(c = L / Q chunks), the fused forward runs five kernels (mamba-ssm 2.3.2.post1, `_mamba_chunk_scan_combined_fwd`):

- chunk_cumsum: no matmul; ~3 b L h other FLOPs (softplus, scale, cumsum); dt in, dt and dA_cumsum
  out (fp32).
- bmm_chunk: 2 b L g Q n matmul FLOPs (C B^T per chunk and group); B, C in, CB out (fp32).
- chunk_state: 2 b L h p n matmul FLOPs (chunk-local states) + b L h (p + 1) scaling; x, B, dt, dA in,
  states out (fp32).
- state_passing: 2 b c h p n other FLOPs (the inter-chunk recurrence); states in, states and final
  states out.
- chunk_scan: 2 b L h Q p (masked CB x, counted dense) + 2 b L h n p (C states) matmul FLOPs, b L h Q
  for the decay mask; CB, x, dt, dA, C, states, D in, y out.

The dense Q x Q product counts both triangles; the kernel skips the masked upper one but for its diagonal tiles,
so chunk_scan's measured/analytic ratio below 1 is expected, not an error (0.721 on the paper preset on both the
H100 and the H200, and at every point of the H200 sweep over sequence length). Bytes assume each input
read once and each output written once, activations in the compute dtype (`elem_bytes`), fp32 where
mamba-ssm keeps fp32 (dt, dA_cumsum, CB, chunk states).

run's workload config calls for.

Mamba-3 SISO (mamba-ssm 2.3.2.post1, `mamba3_siso_combined`), per layer with batch b, sequence L, heads h, head
dim p, state n, B/C groups g, chunk Q, rotary angles S (c = L / Q chunks); the kernel casts q, k, v, z to bf16:

- angle_dt_fwd: ~3 b L h S other FLOPs (tanh, x pi dt, running sum); angles in (bf16: the SISO wrapper
  casts them), dt in (fp32); cumulative angles and the final angle state out, in the angles' dtype (bf16).
- mamba3_siso_fwd: b h L (4 n p + 2 Q n + 2 Q p + 2 n) matmul FLOPs (q.state, q k^T, masked scores.v, the
  state update, and the diagonal q.k through a dot), ~b h L (12 S + 3 n + Q + 6 p) other (rotations, biases,
  key weights, decay mask, D skip, gate). Bytes: q, k (per group), v, z, the step tensors in; out, the pre-gate
  out, per-chunk states (bf16), rotated q and k and the per-step scalars out (what its backward reads).

Mamba-3 MIMO (the same release's TileLang path, `mamba3_mimo`), rank R: each step feeds R projections of x into
the state (psi v) and reads R outputs, so a chunk of Q steps is a tile of Q R rows (the layer's chunk is
chunk_size / R steps: `kernels.mamba3_steps`). Three forward launches, activations in the compute dtype e
(q, k, v, z, trap; the kernel runs in x's dtype, no casts), the rest fp32. Other FLOPs count each add,
multiply, clamp and special function (exp, sigmoid, tanh, sin, cos) as one, as the code writes them:

- angle_dt_fwd: as SISO's, ~3 b L h S other; angles in and cumulative angles out are fp32 here (Mamba3 casts
  them to fp32, and only SISO's wrapper casts them back to bf16), dt in, the final angle state out.
- dacs_segsum: ~b L h (3 Q + 4) other (forward and reverse cumsums of A dt, the reverse one rolled a step by a
  masked Q-wide row sum, the Q x Q segment cumsums, their clamps at 0); A dt in; da_cs, da_cs_rev and the
  Q x Q segment sums of every chunk out (fp32: b h c Q^2, as large as an activation of width Q).
- mamba_mimo_fwd: b h L (4 R n p + 4 Q R^2 n + 2 Q R^2 p) matmul FLOPs: per chunk five tensor-core GEMMs on the
  Q R-row tile, run per head (a group's q and k are re-read by each of its heads, counted once in the bytes):
  q k^T (biased, unrotated: one rotation angle per step keeps the same-step dots), whose same-step R x R
  blocks give the diagonal term, 2 (QR)^2 n; rotated q.state, 2 QR n p; rotated q times the trap-weighted
  rotated k^T, 2 (QR)^2 n; the step-masked scores times psi v, 2 (QR)^2 p; the state update k^T (psi v),
  2 QR n p. Other ~b h L (5 R n + 16 R S + 14 R p + 2 R^2 p + 2 Q R^2 + 6) + b h c n p: biases,
  trap weights and decays of k (5 R n); both rotations with their sin and cos (16 R S); psi v, the output
  decay, the same-step R x R blocks times psi v in a scalar loop (2 R^2 p, not a GEMM), D skip, SiLU gate
  through mimo_z, mimo_o and the sum over the R ranks (14 R p); the decay mask, an exp and a multiply per
  score (2 Q R^2); six per-step scalars; the state decay, n p per chunk. Bytes: q, k (per group), v, z, trap,
  the cumulative angles, da_cs, da_cs_rev, dt, the segment sums and the parameters (q/k biases, mimo_x, mimo_z,
  mimo_o, D) in; y out. It writes nothing for its backward, which reruns it (mamba_mimo_bwd_fwd), and the final
  state and k only when decoding state is asked for (never in training).

MIMO's three QR x QR GEMMs are counted dense, as the kernel runs them (the step mask zeroes scores after their
product, and the masked GEMM multiplies those zeros), so measured/analytic near 1 is expected there, unlike the
SSD chain's chunk_scan.
Assumed: L a multiple of Q (the MIMO backward asserts whole chunks; `lm.check_mamba3` enforces it). Left out:
the torch copies the autograd function's `.contiguous()` makes of the split z, x and the transposed dt, A dt and
trap (elementwise kernels, not this chain's).

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

from ssmprof.kernels import GDN_V_HEADS_PER_QK_HEAD, SSD_FORWARD_KERNELS, hybrid_chunk, mamba3_steps
from ssmprof.schema import FORWARD

FP32 = 4


# The settings `SsdShape.from_config` reads: a config of one's own lacking any (`workloads.user`) has no SSD model
# rather than a KeyError in its report.
SSD_SETTINGS = frozenset({"batch_size", "seq_len", "d_model", "expand", "headdim", "d_state", "ngroups", "chunk_size"})


@dataclass(frozen=True)
class SsdShape:
    batch: int
    seqlen: int
    nheads: int
    headdim: int
    dstate: int
    ngroups: int
    chunk: int
    elem_bytes: int = 2  # bf16 activations

    @classmethod
    def from_config(cls, config: dict) -> SsdShape:
        """From a run's workload config (mamba2-lm / hybrid settings)."""
        d_inner = config["expand"] * config["d_model"]
        return cls(config["batch_size"], config["seq_len"], d_inner // config["headdim"], config["headdim"],
                   config["d_state"], config["ngroups"], config["chunk_size"],
                   2 if config.get("dtype", "bf16") != "fp32" else 4)

    @property
    def chunks(self) -> int:
        return -(-self.seqlen // self.chunk)


def ssd_forward_model(s: SsdShape) -> pd.DataFrame:
    """Per forward SSD kernel of one layer: flops_matmul, flops_other, flops, min_bytes."""
    b, L, h, p, n, g, Q, c, e = s.batch, s.seqlen, s.nheads, s.headdim, s.dstate, s.ngroups, s.chunk, s.chunks, \
        s.elem_bytes
    x_bytes, bc_bytes, dt_bytes = b * L * h * p * e, b * L * g * n * e, b * L * h * FP32
    states_fp32 = b * c * h * p * n * FP32
    cumsum, bmm, state, passing, scan = SSD_FORWARD_KERNELS
    rows = [
        (cumsum, 0, 3 * b * L * h, b * L * h * e + 2 * dt_bytes),
        (bmm, 2 * b * L * g * Q * n, 0, 2 * bc_bytes + b * c * g * Q * Q * FP32),
        (state, 2 * b * L * h * p * n, b * L * h * (p + 1),
         x_bytes + bc_bytes + 2 * dt_bytes + states_fp32),
        (passing, 0, 2 * b * c * h * p * n,
         states_fp32 + b * c * h * p * n * e + b * h * p * n * FP32 + b * h * c * FP32),
        (scan, 2 * b * L * h * Q * p + 2 * b * L * h * n * p, b * L * h * Q,
         b * c * g * Q * Q * FP32 + 2 * x_bytes + 2 * dt_bytes + bc_bytes + b * c * h * p * n * e + h * FP32),
    ]
    frame = pd.DataFrame(rows, columns=["kernel", "flops_matmul", "flops_other", "min_bytes"])
    frame["flops"] = frame["flops_matmul"] + frame["flops_other"]
    return frame


def analytic_vs_measured(kernels: pd.DataFrame, model_frame: pd.DataFrame) -> pd.DataFrame:
    """Forward scan kernels: analytic FLOPs and minimal bytes per launch (`model_frame`: one of `forward_model`'s,
    e.g. `ssd_forward_model`) beside the measured means per launch (one launch per layer), and their ratios.
    `kernels`: a run's `analysis_frame`."""
    measured = kernels[kernels["phase"] == FORWARD]
    rows = []
    for model in model_frame.itertuples():
        launches = measured[measured["kernel_name"].str.startswith(model.kernel)]
        flops = launches["flops"].mean() if len(launches) else float("nan")
        dram = launches["dram_bytes"].mean() if len(launches) else float("nan")
        rows.append({"kernel": model.kernel, "launches": len(launches), "analytic_flops": float(model.flops),
                     "measured_flops": flops, "flops_ratio": flops / model.flops if model.flops else float("nan"),
                     "min_bytes": float(model.min_bytes), "measured_dram_bytes": dram,
                     "bytes_ratio": dram / model.min_bytes})
    return pd.DataFrame(rows)


BF16 = 2
MAMBA3_FORWARD_KERNELS = ("angle_dt_fwd", "mamba3_siso_fwd")
# MIMO's forward in launch order, as its traces name them by prefix: angle_dt_fwd_kernel and dacs_segsum_kernel
# (Triton), mamba_mimo_fwd_kernel_kernel (TileLang's `<prim_func>_kernel`)
MAMBA3_MIMO_FORWARD_KERNELS = (MAMBA3_FORWARD_KERNELS[0], "dacs_segsum", "mamba_mimo_fwd")
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
    def from_config(cls, config: dict, chunk: int) -> Mamba3Shape:  # type: ignore[override]  # needs its chunk
        ssd = replace(SsdShape.from_config(config), chunk=chunk)
        return cls(**asdict(ssd), angles=ssd.dstate // 4)


def _angle_dt_row(steps: int, S: int, angles_in: int, angles_out: int, final_state: int = 0) -> tuple:
    """angle_dt_fwd, shared by SISO and MIMO: `steps` = b h L; angles in and out in the given bytes, dt in (fp32),
    and `final_state` bytes of the last running angles."""
    return (MAMBA3_FORWARD_KERNELS[0], 0, 3 * steps * S, steps * S * (angles_in + angles_out) + steps * FP32
            + final_state)


def mamba3_forward_model(s: Mamba3Shape) -> pd.DataFrame:
    """Per forward Mamba-3 SISO kernel of one layer: flops_matmul, flops_other, flops, min_bytes."""
    b, L, h, p, n, g, Q, S, c = s.batch, s.seqlen, s.nheads, s.headdim, s.dstate, s.ngroups, s.chunk, s.angles, \
        s.chunks
    steps, per_step = b * h * L, b * h * L * FP32
    siso = MAMBA3_FORWARD_KERNELS[1]
    rows = [
        _angle_dt_row(steps, S, BF16, BF16, b * h * S * BF16),
        (siso, steps * (4 * n * p + 2 * Q * n + 2 * Q * p + 2 * n), steps * (12 * S + 3 * n + Q + 6 * p),
         2 * b * L * g * n * BF16 + 2 * steps * p * BF16 + 2 * per_step + steps * BF16 + steps * S * BF16
         + 2 * steps * p * BF16 + b * h * p * c * n * BF16 + per_step + 2 * steps * n * BF16 + 3 * per_step),
    ]
    return _frame(rows)


@dataclass(frozen=True)
class Mamba3MimoShape(Mamba3Shape):
    """A Mamba-3 MIMO layer: Mamba3Shape with `chunk` in steps (the tile's rows over the rank) and the rank."""

    rank: int = field(kw_only=True)  # mimo_rank R

    @classmethod
    def from_config(cls, config: dict, chunk: int) -> Mamba3MimoShape:  # type: ignore[override]  # needs its chunk
        """`chunk`: steps per chunk, `mamba3_steps` of the layer's chunk_size."""
        return cls(**asdict(Mamba3Shape.from_config(config, chunk)), rank=config["mimo_rank"])


def mamba3_mimo_forward_model(s: Mamba3MimoShape) -> pd.DataFrame:
    """Per forward Mamba-3 MIMO kernel of one layer: flops_matmul, flops_other, flops, min_bytes."""
    b, L, h, p, n, g, Q, S, c, R, e = s.batch, s.seqlen, s.nheads, s.headdim, s.dstate, s.ngroups, s.chunk, \
        s.angles, s.chunks, s.rank, s.elem_bytes
    steps, per_step = b * h * L, b * h * L * FP32
    segsum = b * h * c * Q * Q * FP32
    params = (2 * h * R * n + 3 * h * R * p + h) * FP32  # q/k biases, mimo_x, mimo_z, mimo_o, D
    _, dacs, mimo = MAMBA3_MIMO_FORWARD_KERNELS
    rows = [
        _angle_dt_row(steps, S, FP32, FP32, b * h * S * FP32),
        (dacs, 0, steps * (3 * Q + 4), per_step + 2 * per_step + segsum),  # A dt in; da_cs, da_cs_rev, segsum out
        (mimo, steps * (4 * R * n * p + 4 * Q * R * R * n + 2 * Q * R * R * p),
         steps * (5 * R * n + 16 * R * S + 14 * R * p + 2 * R * R * p + 2 * Q * R * R + 6) + b * h * c * n * p,
         2 * b * L * R * g * n * e + 2 * b * L * h * p * e + steps * S * FP32 + 3 * per_step + steps * e + segsum
         + params + b * L * h * p * e),
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
    (gdn-lm, gdn-hybrid, hybrid with ssm_layer=gdn), Mamba-3 SISO or MIMO (mamba3-lm, hybrid with
    ssm_layer=mamba3; `mimo` picks, at the chunk the layer runs), else the SSD chain where the config has its
    settings (None otherwise)."""
    layer = config.get("ssm_layer")
    if layer == "gdn":
        return gdn_forward_model(GdnShape.from_config(config, config["d_state"], GDN_V_HEADS_PER_QK_HEAD,
                                                      hybrid_chunk(layer, config["chunk_size"])))
    if "v_heads_per_qk_head" in config:
        return gdn_forward_model(GdnShape.from_config(config, config["head_dim"], config["v_heads_per_qk_head"],
                                                      config["chunk_size"]))
    if layer == "mamba3" or (layer is None and "mimo" in config):
        tile = hybrid_chunk(layer, config["chunk_size"])
        if not config["mimo"]:
            return mamba3_forward_model(Mamba3Shape.from_config(config, tile))
        steps = mamba3_steps(tile, True, config["mimo_rank"])
        return mamba3_mimo_forward_model(Mamba3MimoShape.from_config(config, steps))
    if set(config) >= SSD_SETTINGS:
        return ssd_forward_model(SsdShape.from_config(config))
    return None
