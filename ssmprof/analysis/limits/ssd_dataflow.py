"""Data movement of the Mamba-2 SSD chain, and what fusing the chain into one kernel could buy.

The SSD chain of one layer (mamba-ssm 2.3.2.post1, `ssd_combined._mamba_chunk_scan_combined_fwd` and `_bwd`) is
a sequence of Triton kernels that hand intermediates to each other through global memory: dt and dA_cumsum, CB,
the chunk states, and in the backward also dstates, dCB, the partial gradients of dt, dA, B and C. From the
launch shapes (the run's workload config) each kernel's reads split into bytes an earlier kernel of the same chain
wrote (`chain_read_bytes`) and bytes from outside the chain (`external_read_bytes`: x, B, C, dt, dout, written by
the in-projection and the convolution). The counters say where a kernel's reads came from: its DRAM reads beyond
its external inputs are attributed to its chain reads (`chain_from_dram_bytes`, at most its chain bytes; it
assumes the external inputs, written a whole layer earlier and larger than L2, all came from DRAM), the rest was
served by L2.

A fused chain reads each external input once and writes each output once: that is its minimum DRAM traffic. Its
time is bounded:
- below (`lower_ms`): the larger of that minimum at the measured DRAM ceiling, the chain's measured tensor FLOPs at
  the tensor ceiling and its vector FLOPs at the fp32 ceiling (no kernel beats its roofs);
- above (`upper_ms`, an estimate, not a bound): the fused kernel L2-bound, as the reported fused forward kernel
  is, at the L2 throughput the unfused chain reached, moving all of the chain's L2 traffic but its
  intermediates' (each written once and read by every consumer, kept on chip once fused).
The backward chain recomputes the forward chain first (the kernels `FORWARD_RECOMPUTE_KERNELS` names): a fused
backward still does that work, so it stays in the backward's FLOPs and is no intermediate traffic saved.
Modelled sizes leave out the per-split copies some backward kernels write and torch sums (dB, dC, dCB over head
splits) and the torch additions between kernels (ddA + ddA_next + ddA_prev, counted as `_chunk_cumsum_bwd`'s
reads, as is ddA_chunk); A, D and dt_bias (a few KB) are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ssmprof.analysis.limits.analytic_work import FP32, SSD_SETTINGS, SsdShape
from ssmprof.analysis.limits.roofline import Ceilings
from ssmprof.schema import BACKWARD, FORWARD


@dataclass(frozen=True)
class Step:
    """One kernel of the chain: its name prefix, the tensors it reads and those it writes."""

    kernel: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]


# The forward chain (`_mamba_chunk_scan_combined_fwd`, launch order) and the backward chain
# (`_mamba_chunk_scan_combined_bwd`: the forward recomputed, then the gradients; z is None in mamba2-lm's path).
FORWARD_CHAIN = (
    Step("_chunk_cumsum_fwd", ("dt_in",), ("dt", "dA_cumsum")),
    Step("_chunk_state_fwd", ("x", "B", "dt", "dA_cumsum"), ("states_fp32",)),
    Step("_state_passing_fwd", ("states_fp32", "dA_last"), ("states",)),
    Step("_bmm_chunk_fwd", ("C", "B"), ("CB",)),
    Step("_chunk_scan_fwd", ("CB", "x", "dt", "dA_cumsum", "C", "states"), ("y",)),
)
BACKWARD_CHAIN = (
    Step("_chunk_cumsum_fwd", ("dt_in",), ("dt", "dA_cumsum")),
    Step("_bmm_chunk_fwd", ("C", "B"), ("CB",)),
    Step("_chunk_state_fwd", ("x", "B", "dt", "dA_cumsum"), ("states_fp32",)),
    Step("_state_passing_fwd", ("states_fp32", "dA_last"), ("states_passed_fp32",)),
    Step("_chunk_scan_bwd_dstates", ("C", "dA_cumsum", "dout"), ("dstates_fp32",)),
    Step("_state_passing_bwd", ("states_passed_fp32", "dA_last", "dstates_fp32"), ("dstates", "states", "ddA_chunk")),
    Step("_chunk_scan_chunk_state_bwd_dx", ("x", "dt", "dA_cumsum", "B", "CB", "dout", "dstates"), ("dx", "ddt")),
    Step("_chunk_state_bwd_db", ("x", "dt", "dA_cumsum", "dstates", "B"), ("dB_partial", "ddA_next")),
    Step("_chunk_scan_bwd_dc", ("states", "dA_cumsum", "dout", "C"), ("dC_partial", "ddA_prev")),
    Step("_chunk_scan_bwd_dcb", ("x", "dt", "dA_cumsum", "dout"), ("dCB",)),
    Step("_bmm_chunk_bwd", ("C", "B", "dCB", "dB_partial", "dC_partial"), ("dB", "dC")),
    Step("_chunk_scan_bwd_ddAcs_stable", ("x", "dt", "dA_cumsum", "dout", "CB"), ("ddA",)),
    Step("_chunk_cumsum_bwd", ("ddA", "ddA_next", "ddA_prev", "ddA_chunk", "ddt", "dt_in"), ("ddt_in",)),
)
CHAINS = {FORWARD: FORWARD_CHAIN, BACKWARD: BACKWARD_CHAIN}
SLICES = {"dA_last": "dA_cumsum"}  # tensors a kernel reads as a slice of another (dA_cumsum[:, :, :, -1])


def _produced(steps) -> set[str]:
    """What the kernels `steps` write, with the slices of it."""
    written = {t for step in steps for t in step.writes}
    return written | {piece for piece, whole in SLICES.items() if whole in written}


def tensor_bytes(s: SsdShape) -> dict[str, int]:
    """Bytes of every tensor the chains pass, for one layer: activations in the compute dtype, fp32 where
    mamba-ssm allocates fp32 (dt, dA_cumsum, CB, chunk states, the backward's partial gradients)."""
    b, L, h, p, n, g, Q, c, e = (s.batch, s.seqlen, s.nheads, s.headdim, s.dstate, s.ngroups, s.chunk, s.chunks,
                                 s.elem_bytes)
    x, bc, per_step = b * L * h * p * e, b * L * g * n * e, b * h * c * Q * FP32
    state = b * c * h * p * n
    cb = b * c * g * Q * Q * FP32
    return {"x": x, "y": x, "dout": x, "dx": x, "B": bc, "C": bc, "dB": bc, "dC": bc,
            "dt_in": b * L * h * e, "ddt_in": b * L * h * e, "dt": per_step, "dA_cumsum": per_step, "ddt": per_step,
            "ddA": per_step, "ddA_next": per_step, "ddA_prev": per_step, "dA_last": b * h * c * FP32,
            "ddA_chunk": b * h * c * FP32, "CB": cb, "dCB": cb, "states_fp32": state * FP32,
            "states_passed_fp32": state * FP32, "dstates_fp32": state * FP32, "states": state * e,
            "dstates": state * e, "dB_partial": b * L * g * n * FP32, "dC_partial": b * L * g * n * FP32}


def chain_bytes(shape: SsdShape, phase: str) -> pd.DataFrame:
    """Per kernel of the `phase` chain: bytes read that an earlier kernel of the chain wrote, bytes read from
    outside it, bytes written; and `intermediate_bytes` (what it writes for a later kernel plus what it reads
    from an earlier one: the traffic a fused chain keeps on chip)."""
    sizes, rows = tensor_bytes(shape), []
    chain = CHAINS[phase]
    consumed = {name for step in chain for name in step.reads}
    for index, step in enumerate(chain):
        written = _produced(chain[:index])
        internal = [t for t in step.reads if t in written]
        rows.append({"kernel": step.kernel, "chain_read_bytes": sum(sizes[t] for t in internal),
                     "external_read_bytes": sum(sizes[t] for t in step.reads if t not in written),
                     "write_bytes": sum(sizes[t] for t in step.writes),
                     "intermediate_bytes": sum(sizes[t] for t in internal)
                     + sum(sizes[t] for t in step.writes if t in consumed),
                     "chain_reads": ", ".join(internal)})
    return pd.DataFrame(rows)


def fused_min_dram_bytes(shape: SsdShape, phase: str) -> int:
    """DRAM bytes a fused chain cannot avoid: each tensor it reads from outside once, each it writes and no
    kernel of the chain reads once."""
    sizes, chain = tensor_bytes(shape), CHAINS[phase]
    written = _produced(chain)
    read = {t for step in chain for t in step.reads}
    return sum(sizes[t] for t in read - written) + sum(sizes[t] for t in written - read)


# What a page shows of `ssd_dataflow` (the FLOPs stay for `fusion_estimate`).
FLOW_COLUMNS = ["phase", "kernel", "launches", "duration_ns", "chain_reads", "chain_read_bytes", "external_read_bytes",
                "write_bytes", "dram_read_bytes", "l2_hit_rate_pct", "chain_from_dram_bytes", "chain_reads_from"]
MEASURED = ["duration_ns", "dram_read_bytes", "dram_write_bytes", "l2_bytes", "flops_tensor", "flops_vector"]


def measured_chain(kernels: pd.DataFrame, phase: str, layers: int) -> pd.DataFrame:
    """Per kernel of the `phase` chain, per layer: its measured time, DRAM and L2 bytes and FLOPs (sums over its
    launches of that phase divided by `layers`), and its time-weighted L2 hit rate."""
    launches = kernels[kernels["phase"] == phase]
    rows = []
    for step in CHAINS[phase]:
        mine = launches[launches["kernel_name"].str.startswith(step.kernel + "_kernel")]
        sums = mine[MEASURED].sum(min_count=1) / layers
        hit = (mine["l2_hit_rate_pct"] * mine["duration_ns"]).sum() / mine["duration_ns"].sum() if len(mine) else None
        rows.append({"kernel": step.kernel, "launches": len(mine), **sums.to_dict(), "l2_hit_rate_pct": hit})
    return pd.DataFrame(rows)


def ssd_layers(kernels: pd.DataFrame) -> int:
    """Layers of the SSD chain in the iteration: the forward's `_chunk_scan_fwd` launches (one a layer)."""
    return int(((kernels["phase"] == FORWARD) & kernels["kernel_name"].str.startswith("_chunk_scan_fwd")).sum())


def ssd_dataflow(kernels: pd.DataFrame, config: dict) -> pd.DataFrame | None:
    """Per phase and chain kernel (per layer): the modelled chain and external bytes beside the measured time,
    DRAM bytes, L2 hit rate, and the chain bytes attributed to DRAM (`chain_from_dram_bytes`) and the verdict
    where they came from. None where the run has no SSD chain (`kernels`: an analysis frame)."""
    layers = ssd_layers(kernels)
    if not layers or not set(config) >= SSD_SETTINGS:
        return None
    shape = SsdShape.from_config(config)
    frames = []
    for phase in CHAINS:
        frame = chain_bytes(shape, phase).merge(measured_chain(kernels, phase, layers), on="kernel")
        beyond = (frame["dram_read_bytes"] - frame["external_read_bytes"]).clip(lower=0)
        frame["chain_from_dram_bytes"] = beyond.clip(upper=frame["chain_read_bytes"])
        share = frame["chain_from_dram_bytes"] / frame["chain_read_bytes"].where(frame["chain_read_bytes"] > 0)
        frame["chain_reads_from"] = share.map(lambda s: "" if pd.isna(s) else "DRAM" if s >= 0.5 else "L2")
        frames.append(frame.assign(phase=phase))
    return pd.concat(frames, ignore_index=True)


def fusion_estimate(flow: pd.DataFrame, config: dict, ceilings: Ceilings, layers: int,
                    l2_peak_gb_s: float) -> pd.DataFrame:
    """Per phase (per layer): the unfused chain's measured time, DRAM and L2 bytes; the fused chain's minimum DRAM
    bytes; its time bounded below by the roofs and estimated above as L2-bound (the module's docstring); the
    speed-up range those give, the step time it would save over the `layers`, and whether the fused chain's
    minimum L2 time (at the run's L2 peak, `roofline.l2_peak_gb_s`, the roofline's) exceeds its DRAM time
    (L2-bound). A phase whose L2 bytes were not counted gets no row: the
    upper estimate scales its time by the L2 bytes fusion removes, which needs them measured."""
    shape = SsdShape.from_config(config)
    rows = []
    for phase, chain in flow.groupby("phase", sort=False):
        time_ms = chain["duration_ns"].sum() / 1e6
        l2 = chain["l2_bytes"].sum()
        if not l2 > 0:
            continue
        min_dram = fused_min_dram_bytes(shape, phase)
        remaining_l2 = l2 - chain["intermediate_bytes"].sum()
        roofs_ms = {"DRAM": min_dram / (ceilings.dram_gb_s * 1e9) * 1e3,
                    "tensor": chain["flops_tensor"].sum() / (ceilings.bf16_tensor_tflops * 1e12) * 1e3,
                    "fp32": chain["flops_vector"].sum() / (ceilings.fp32_tflops * 1e12) * 1e3}
        lower_roof = max(roofs_ms, key=lambda roof: roofs_ms[roof])
        upper_ms = time_ms * remaining_l2 / l2
        l2_floor_ms = remaining_l2 / (l2_peak_gb_s * 1e9) * 1e3
        rows.append({"phase": phase, "layers": layers, "chain_time_ms": time_ms,
                     "chain_dram_bytes": (chain["dram_read_bytes"] + chain["dram_write_bytes"]).sum(),
                     "chain_l2_bytes": l2, "intermediate_bytes": chain["intermediate_bytes"].sum(),
                     "fused_min_dram_bytes": min_dram, "lower_ms": roofs_ms[lower_roof], "lower_roof": lower_roof,
                     "upper_ms": upper_ms, "speedup_low": time_ms / upper_ms,
                     "speedup_high": time_ms / roofs_ms[lower_roof],
                     "saved_per_step_ms_low": layers * (time_ms - upper_ms),
                     "saved_per_step_ms_high": layers * (time_ms - roofs_ms[lower_roof]),
                     "fused_l2_bound": bool(l2_floor_ms > roofs_ms["DRAM"])})
    return pd.DataFrame(rows)


# The counters' cache modes (`profiler.ncu_argv.CACHE_CONTROL`; run.json `collectors.counters.cache`, None: flushed)
FLUSHED, KEPT = "flush", "keep"
BY_CACHE = ["dram_read_bytes", "l2_hit_rate_pct", "chain_from_dram_bytes", "chain_reads_from"]


def dataflow_by_cache(flushed: pd.DataFrame, kept: pd.DataFrame) -> pd.DataFrame:
    """Two `ssd_dataflow`s of one workload, its counters taken with the caches flushed before each replay pass and
    kept, side by side per phase and kernel: the modelled chain reads, and per mode the DRAM reads, L2 hit rate,
    chain bytes attributed to DRAM and where they came from; `l2_kept_bytes`: the chain bytes the flushed counters
    put in DRAM that the kept ones do not (what the inter-kernel L2 reuse serves, which a flush erases; negative:
    the kept run read more, within the two runs' noise or a sign they ran different tiles)."""
    key = ["phase", "kernel"]
    joined = flushed[[*key, "chain_reads", "chain_read_bytes", *BY_CACHE]].merge(
        kept[[*key, *BY_CACHE]], on=key, suffixes=(f"_{FLUSHED}", f"_{KEPT}"))
    joined["l2_kept_bytes"] = joined[f"chain_from_dram_bytes_{FLUSHED}"] - joined[f"chain_from_dram_bytes_{KEPT}"]
    return joined
