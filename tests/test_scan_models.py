"""The analyses know the Mamba-3 and Gated DeltaNet kernels: categories, recompute marks, analytic models."""

import dataclasses

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from ssmprof.analysis.categories import categorize
from ssmprof.analysis.scan_models import (
    GDN_FORWARD_KERNELS,
    MAMBA3_FORWARD_KERNELS,
    GdnShape,
    Mamba3Shape,
    forward_model,
    gdn_forward_model,
    mamba3_forward_model,
)
from ssmprof.analysis.tensor_vector import classify
from ssmprof.kernels import SSD_FORWARD_KERNELS
from ssmprof.workloads.gdn import gated_delta_rule_chunked
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
        ("prepare_wy_repr_bwd_kernel", "SSM scan"),
        ("solve_tril_16x16_kernel", "SSM scan"),
        ("chunk_local_cumsum_scalar_kernel", "SSM scan"),
        ("l2norm_fwd_kernel", "normalization"),
        ("triton_poi_fused_cumsum_0", "sort/scan"),  # a generic cumsum stays where it was
    ],
)
def test_new_kernels_categories(kernel, category):
    assert categorize(kernel) == category


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
    ("mamba3-lm", {"mimo": True}, None),  # no MIMO model yet
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
