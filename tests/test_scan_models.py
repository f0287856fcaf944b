"""The analyses know the Mamba-3 and Gated DeltaNet kernels: categories, recompute marks, analytic models."""

import dataclasses
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from ssmprof.analysis.launches.categories import categorize
from ssmprof.analysis.limits.analytic_work import (
    GDN_FORWARD_KERNELS,
    MAMBA3_FORWARD_KERNELS,
    MAMBA3_MIMO_FORWARD_KERNELS,
    GdnShape,
    Mamba3MimoShape,
    Mamba3Shape,
    analytic_vs_measured,
    forward_model,
    gdn_forward_model,
    mamba3_forward_model,
    mamba3_mimo_forward_model,
)
from ssmprof.analysis.limits.tensor_vector import classify
from ssmprof.kernels import SSD_FORWARD_KERNELS, is_fused_kernel
from ssmprof.schema import BACKWARD, FORWARD
from ssmprof.workloads.gdn import gated_delta_rule_chunked
from ssmprof.workloads.mamba3 import mamba3_scan_chunked, mamba3_scan_recurrent
from ssmprof.workloads.registry import get_workload


# Kernel names as mamba-ssm 2.3.2.post1 (`@triton.jit def ...`, TileLang `<prim_func>_kernel`) and fla-core 0.6.0
# name them.
@pytest.mark.parametrize(
    ("kernel", "category"),
    [
        ("mamba3_siso_fwd_kernel", "SSM scan"),
        ("mamba3_siso_bwd_kernel_dqkv", "SSM scan"),
        ("mamba3_siso_bwd_kernel_rotary_bias_angles", "SSM scan"),
        ("angle_dt_fwd_kernel", "SSM scan"),
        ("mamba_mimo_fwd_kernel_kernel", "SSM scan"),
        ("mamba_mimo_bwd_bwd_kernel_kernel", "SSM scan"),
        ("dacs_segsum_kernel", "SSM scan"),
        ("bwd_dtrap_ddt_kernel", "SSM scan"),
        ("gdn_gate_chunk_cumsum_scalar_kernel", "SSM scan"),
        ("chunk_gated_delta_rule_fwd_kkt_solve_kernel", "SSM scan"),
        ("recompute_w_u_fwd_kernel", "SSM scan"),
        ("chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "SSM scan"),
        ("chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64", "SSM scan"),
        ("chunk_fwd_kernel_o", "SSM scan"),
        ("chunk_bwd_kernel_dqkwg", "SSM scan"),
        ("kernel_kernel", "SSM scan"),  # fla's TileLang chunk_bwd_dqkwg (prim_func `kernel`), by whole name only
        ("main_kernel", "other"),  # another TileLang kernel (TileLang's default prim_func name `main`)
        ("fused_kernel_kernel_1", "other"),
        ("prepare_wy_repr_bwd_kernel", "SSM scan"),
        ("solve_tril_16x16_kernel", "SSM scan"),
        ("chunk_local_cumsum_scalar_kernel", "SSM scan"),
        ("l2norm_fwd_kernel", "normalization"),
        ("triton_poi_fused_cumsum_0", "sort/scan"),  # a generic cumsum stays where it was
    ],
)
def test_new_kernels_categories(kernel, category):
    assert categorize(kernel) == category


def test_flas_tilelang_dqkwg_is_fused_by_its_whole_name_only():
    assert is_fused_kernel("kernel_kernel") and is_fused_kernel("mamba_mimo_fwd_kernel_kernel")
    assert not is_fused_kernel("main_kernel") and not is_fused_kernel("other_kernel_kernel")


def test_backward_launches_that_redo_forward_work_are_marked():
    names = ["recompute_w_u_fwd_kernel", "chunk_gated_delta_rule_fwd_kernel_h_blockdim64",
             "mamba_mimo_bwd_fwd_kernel_kernel", "mamba_mimo_bwd_bwd_kernel_kernel", "mamba3_siso_bwd_kernel_dqkv"]
    frame = pd.DataFrame({"launch_idx": range(len(names)), "kernel_name": names, "phase": "backward",
                          "category": "SSM scan", "duration_ns": 1000.0, "flops": 10.0, "flops_tensor": 9.0,
                          "flops_vector": 1.0})
    assert classify(frame)["recomputed"].tolist() == [True, True, True, False, False]


@pytest.mark.parametrize(("seqlen", "chunk", "qk_heads", "v_heads", "head_dim"),
                         [(128, 64, 2, 4, 16), (96, 32, 1, 1, 8)])
def test_gdn_matmul_flops_match_flop_counter_over_our_reference(seqlen, chunk, qk_heads, v_heads, head_dim):
    """Our chunked reference runs the same products as fla's chunk kernels, less the triangular solve (no matmul
    for torch's counter) and the w/u products (a triangular solve there too)."""
    q, k = (F.normalize(torch.randn(2, seqlen, qk_heads, head_dim), dim=-1) for _ in range(2))
    v, g, beta = torch.randn(2, seqlen, v_heads, head_dim), -torch.rand(2, seqlen, v_heads), torch.rand(2, seqlen,
                                                                                                        v_heads)
    with FlopCounterMode(display=False) as counter:
        gated_delta_rule_chunked(q, k, v, g, beta, chunk_size=chunk)
    model = gdn_forward_model(GdnShape(2, seqlen, qk_heads, v_heads, head_dim, chunk, 4)).set_index("kernel")
    steps = 2 * seqlen * v_heads
    solve, w_u = steps * (2 * chunk * chunk // 3), model.loc["recompute_w_u_fwd", "flops_matmul"]
    assert model["flops_matmul"].sum() - solve - w_u == counter.get_total_flops()


@pytest.mark.parametrize(("model", "shape", "kernels"), [
    (mamba3_forward_model, lambda L: Mamba3Shape(2, L, 128, 64, 128, 1, 64, angles=32), MAMBA3_FORWARD_KERNELS),
    (gdn_forward_model, lambda L: GdnShape(2, L, 32, 64, 128, 64), GDN_FORWARD_KERNELS),
    (mamba3_mimo_forward_model, lambda L: Mamba3MimoShape(2, L, 128, 64, 128, 1, 16, angles=32, rank=4),
     MAMBA3_MIMO_FORWARD_KERNELS),
])
def test_models_scale_linearly_in_sequence_length(model, shape, kernels):
    short, long = model(shape(4096)).set_index("kernel"), model(shape(8192)).set_index("kernel")
    assert tuple(short.index) == kernels
    assert (long["flops"] / short["flops"]).tolist() == pytest.approx([2.0] * len(kernels))
    assert ((long["min_bytes"] / short["min_bytes"]).between(1.9, 2.0)).all()


def config_of(name, **overrides):
    return dataclasses.asdict(get_workload(name).config("paper", overrides))


@pytest.mark.parametrize(("name", "overrides", "kernels"), [
    ("mamba2-lm", {}, SSD_FORWARD_KERNELS),
    ("hybrid", {}, SSD_FORWARD_KERNELS),
    ("mamba3-lm", {}, MAMBA3_FORWARD_KERNELS),
    ("hybrid", {"ssm_layer": "mamba3"}, MAMBA3_FORWARD_KERNELS),
    ("gdn-lm", {}, GDN_FORWARD_KERNELS),
    ("gdn-hybrid", {}, GDN_FORWARD_KERNELS),
    ("hybrid", {"ssm_layer": "gdn"}, GDN_FORWARD_KERNELS),
    ("mamba3-lm", {"mimo": True}, MAMBA3_MIMO_FORWARD_KERNELS),
    ("hybrid", {"ssm_layer": "mamba3", "mimo": True, "ngroups": 1}, MAMBA3_MIMO_FORWARD_KERNELS),
    ("transformer", {}, None),
])
def test_forward_model_follows_the_runs_sequence_mixer(name, overrides, kernels):
    model = forward_model(config_of(name, **overrides))
    assert (model is None) if kernels is None else tuple(model["kernel"]) == kernels


def test_same_width_models_agree_on_the_shared_work():
    """mamba3-lm paper and mamba2-lm paper: the same heads, head dim and state, so the state read-out and update
    (4 n p per step and head) match the SSD chain's chunk_state + chunk_scan state terms."""
    mamba3 = mamba3_forward_model(Mamba3Shape.from_config(config_of("mamba3-lm"), 64)).set_index("kernel")
    ssd = forward_model(config_of("mamba2-lm")).set_index("kernel")
    b, L, h, p, n = 2, 4096, 128, 64, 128
    assert mamba3.loc["mamba3_siso_fwd", "flops_matmul"] >= 4 * b * L * h * n * p
    state_terms = ssd.loc["_chunk_state_fwd", "flops_matmul"] + 2 * b * L * h * n * p  # chunk_scan's C.states
    assert state_terms == 4 * b * L * h * n * p


def mamba3_mimo_inputs(batch, seqlen, rank, groups, heads, dstate, headdim):
    generator = torch.Generator().manual_seed(seqlen)

    def rand(*shape):
        return torch.randn(*shape, generator=generator)

    dt = torch.rand(batch, seqlen, heads, generator=generator) * 0.5
    q, k = rand(batch, seqlen, rank, groups, dstate), rand(batch, seqlen, rank, groups, dstate)
    return ([q, k, rand(batch, seqlen, heads, headdim), -torch.rand(batch, seqlen, heads, generator=generator) * dt,
             dt, rand(batch, seqlen, heads), rand(heads, rank, dstate), rand(heads, rank, dstate),
             rand(batch, seqlen, dstate // 4), rand(heads), rand(batch, seqlen, heads, headdim)],
            [rand(heads, rank, headdim) for _ in range(3)])


# (batch, seqlen, rank, groups, heads, dstate, headdim, steps per chunk): ranks 1, 2, 4 and 8, one group and a
# group per two heads, the chunks of chunk_size 64 / rank
MIMO_SHAPES = [(2, 64, 4, 1, 4, 16, 8, 16), (2, 64, 2, 2, 4, 16, 8, 32), (1, 48, 1, 1, 2, 8, 4, 16),
               (1, 32, 8, 1, 2, 32, 16, 8)]


@pytest.mark.parametrize(("batch", "seqlen", "rank", "groups", "heads", "dstate", "headdim", "chunk"), MIMO_SHAPES)
def test_mimo_matmul_flops_match_flop_counter_over_our_chunked_reference(batch, seqlen, rank, groups, heads, dstate,
                                                                         headdim, chunk):
    """Our chunked reference runs mamba_mimo_fwd's products on the same (steps x rank)-row tiles: q.state, q k^T,
    scores.(psi v) and k^T (psi v) into the state, with the same counts. The kernel runs one more GEMM: the full
    QR x QR q k^T of the unrotated q and k, of which it keeps the same-step R x R blocks for the diagonal term
    (our reference takes them from its one scores product). So model - reference = 2 Q R^2 n per step and head,
    and model / reference = (4 n p + 4 Q R n + 2 Q R p) / (4 n p + 2 Q R n + 2 Q R p)."""
    tensors, mimo = mamba3_mimo_inputs(batch, seqlen, rank, groups, heads, dstate, headdim)
    with FlopCounterMode(display=False) as counter:
        mamba3_scan_chunked(*tensors, *mimo, halves=True, chunk_size=chunk)
    shape = Mamba3MimoShape(batch, seqlen, heads, headdim, dstate, groups, chunk, 4, angles=dstate // 4, rank=rank)
    model = mamba3_mimo_forward_model(shape).set_index("kernel")
    assert model["flops_matmul"].sum() == model.loc["mamba_mimo_fwd", "flops_matmul"]  # the helpers run no GEMM
    n, p, Q, R, steps = dstate, headdim, chunk, rank, batch * heads * seqlen
    reference = counter.get_total_flops()
    assert model["flops_matmul"].sum() - reference == steps * 2 * Q * R * R * n
    assert model["flops_matmul"].sum() / reference == pytest.approx(
        (4 * n * p + 4 * Q * R * n + 2 * Q * R * p) / (4 * n * p + 2 * Q * R * n + 2 * Q * R * p))


@pytest.mark.parametrize(("batch", "seqlen", "rank", "groups", "heads", "dstate", "headdim", "chunk"), MIMO_SHAPES)
def test_mimo_state_work_matches_flop_counter_over_our_recurrence(batch, seqlen, rank, groups, heads, dstate,
                                                                  headdim, chunk):
    """The recurrence (one step at a time) runs only the state work: R rank-1 updates k u^T and R read-outs q.h,
    4 R n p per step and head. The chunked kernel does that too (q.state and k^T (psi v) over each tile) and
    adds the chunk-quadratic 4 Q R^2 n + 2 Q R^2 p, the price of running on tensor cores: model / recurrence
    = 1 + Q R (2 n + p) / (2 n p). At rank 1 torch's einsum forms the update k u^T by broadcasting (an outer
    product, no bmm), which FlopCounterMode does not see: it counts the read-outs alone there, 2 n p."""
    tensors, mimo = mamba3_mimo_inputs(batch, seqlen, rank, groups, heads, dstate, headdim)
    with FlopCounterMode(display=False) as counter:
        mamba3_scan_recurrent(*tensors, *mimo, halves=True)
    shape = Mamba3MimoShape(batch, seqlen, heads, headdim, dstate, groups, chunk, 4, angles=dstate // 4, rank=rank)
    n, p, Q, R, steps = dstate, headdim, chunk, rank, batch * heads * seqlen
    state_work = steps * 4 * R * n * p
    assert counter.get_total_flops() == (state_work if R > 1 else state_work // 2)
    matmul = mamba3_mimo_forward_model(shape)["flops_matmul"].sum()
    assert matmul / state_work == pytest.approx(1 + Q * R * (2 * n + p) / (2 * n * p))


@pytest.mark.parametrize(("name", "overrides", "steps"), [
    ("mamba3-lm", {"mimo": True}, 16),  # chunk_size 64 / rank 4
    ("mamba3-lm", {"mimo": True, "mimo_rank": 2}, 32),
    ("hybrid", {"ssm_layer": "mamba3", "mimo": True, "ngroups": 1}, 16),  # min(256, 64) / 4
    ("hybrid", {"ssm_layer": "mamba3", "mimo": True, "ngroups": 1, "chunk_size": 32, "mimo_rank": 2}, 16),
])
def test_mimo_model_runs_at_the_layers_chunk(name, overrides, steps):
    config = config_of(name, **overrides)
    shape = Mamba3MimoShape(2, 4096, 128, 64, 128, 1, steps, angles=32, rank=config["mimo_rank"])
    pd.testing.assert_frame_equal(forward_model(config), mamba3_mimo_forward_model(shape))


def test_mimo_closed_forms_at_the_paper_shape():
    """mamba3-lm paper with mimo=true (b 2, L 4096, h 128, p 64, n 128, g 1, R 4, Q 16, S 32), by hand."""
    model = forward_model(config_of("mamba3-lm", mimo=True)).set_index("kernel")
    b, L, h, p, n, g, R, Q, S = 2, 4096, 128, 64, 128, 1, 4, 16, 32
    steps, c = b * h * L, L // Q
    assert model.loc["mamba_mimo_fwd", "flops_matmul"] == steps * (4 * R * n * p + 4 * Q * R * R * n
                                                                   + 2 * Q * R * R * p)
    assert model.loc["mamba_mimo_fwd", "flops_matmul"] == 309_237_645_312  # 294 912 per step and head
    assert model.loc["dacs_segsum", "min_bytes"] == steps * 4 * 3 + b * h * c * Q * Q * 4
    y = b * L * h * p * 2
    assert model.loc["mamba_mimo_fwd", "min_bytes"] == (2 * b * L * R * g * n * 2 + 3 * y + steps * S * 4
                                                        + steps * (3 * 4 + 2) + b * h * c * Q * Q * 4
                                                        + (2 * h * R * n + 3 * h * R * p + h) * 4)
    assert model.loc["angle_dt_fwd", "min_bytes"] == steps * S * 8 + steps * 4 + b * h * S * 4


def test_mimo_rows_join_the_forward_kernels_a_trace_names():
    """analytic_vs_measured takes the forward launches whose name starts with a model row's kernel: the names
    mamba-ssm's MIMO forward launches under (Triton function names; TileLang's `<prim_func>_kernel`), all fused
    kernels by kernels.py's stems, and none of the backward's reruns of them."""
    names = ["angle_dt_fwd_kernel", "dacs_segsum_kernel", "mamba_mimo_fwd_kernel_kernel",
             "dacs_segsum_kernel", "mamba_mimo_bwd_fwd_kernel_kernel", "angle_dt_bwd_kernel"]
    phases = [FORWARD] * 3 + [BACKWARD] * 3
    assert all(is_fused_kernel(name) for name in names)
    model = mamba3_mimo_forward_model(Mamba3MimoShape(2, 4096, 128, 64, 128, 1, 16, angles=32, rank=4))
    kernels = pd.DataFrame({"kernel_name": names, "phase": phases, "flops": model["flops"].tolist() * 2,
                            "dram_bytes": model["min_bytes"].tolist() * 2})
    joined = analytic_vs_measured(kernels, model)
    assert joined["kernel"].tolist() == list(MAMBA3_MIMO_FORWARD_KERNELS)
    assert joined["launches"].tolist() == [1, 1, 1]
    assert joined["flops_ratio"].tolist() == [1.0] * 3 and joined["bytes_ratio"].tolist() == [1.0] * 3


def test_hybrids_mamba3_layers_measure_as_mamba3_lm_at_the_chunk_they_ran():
    """A hybrid with Mamba-3 layers (H100, small preset) against the bundled mamba3-lm paper runs: the SISO forward
    kernel measures the same share of its analytic FLOPs in both models, at the chunk `kernels.hybrid_chunk` gives
    the hybrid's layers; sized at the preset's own chunk the model would not."""
    from ssmprof import bundled
    from ssmprof.kernels import hybrid_chunk
    from ssmprof.pipeline.loading import load_run
    hybrid = load_run(Path(__file__).parent / "data" / "hybrid-mamba3-small-h100")
    config = hybrid.info.workload.config
    assert (config["ssm_layer"], config["chunk_size"]) == ("mamba3", hybrid_chunk("mamba3", 256))
    ratios = {}
    for name, run in [("hybrid", hybrid), *((gpu, load_run(bundled.REFERENCE / gpu / "mamba3-lm"))
                                             for gpu in bundled.GPUS)]:
        table = analytic_vs_measured(run.kernels, forward_model(run.info.workload.config)).set_index("kernel")
        assert set(table.index) == set(MAMBA3_FORWARD_KERNELS)
        ratios[name] = round(table.loc["mamba3_siso_fwd", "flops_ratio"], 3)
    assert set(ratios.values()) == {1.055}
    at_preset_chunk = mamba3_forward_model(Mamba3Shape.from_config(config, 256))  # 0.468 of it measured
    assert analytic_vs_measured(hybrid.kernels, at_preset_chunk).set_index("kernel").loc[
        "mamba3_siso_fwd", "flops_ratio"] < 0.5
