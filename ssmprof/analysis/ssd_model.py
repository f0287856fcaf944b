"""Analytic work of the Mamba-2 SSD forward chain, to set beside what the counters measured.

For one Mamba-2 layer with batch b, sequence L, heads h, head dim p, state n, groups g and chunk Q
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
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ssmprof.kernels import SSD_FORWARD_KERNELS
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
    """Forward scan kernels: analytic FLOPs and minimal bytes per launch (`model_frame`: `ssd_forward_model` or a
    `scan_models` model) beside the measured means per launch (one launch per layer), and their ratios.
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
