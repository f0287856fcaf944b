"""Mamba-3 and Gated DeltaNet on the CPU: our chunked references against the recurrences that define them, and
the tiny presets (and the hybrid's SSM-layer setting) training on them."""

import inspect
import math

import pytest
import torch
import torch.nn.functional as F

from ssmprof.errors import InvalidConfig, KernelUnavailable
from ssmprof.kernels import (
    FLA_BACKENDS,
    GATED_DELTA_IN_KERNEL,
    GDN_TILELANG_DQKWG,
    fla_hopper,
    gated_delta_choice,
    gated_delta_rule_fused,
    plan_kernels,
)
from ssmprof.pipeline.measure import WorkloadOptions, prepare
from ssmprof.profiler.harness import Trainer
from ssmprof.profiler.markers import RecordingMarker
from ssmprof.workloads.gdn import gated_delta_rule_chunked, gated_delta_rule_recurrent
from ssmprof.workloads.lm import gdn_heads, gdn_hybrid_pattern
from ssmprof.workloads.mamba3 import _rotate, mamba3_scan_chunked, mamba3_scan_recurrent
from ssmprof.workloads.registry import get_workload


def max_rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def gdn_inputs(seqlen, qk_heads, v_heads, generator):
    def rand(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    q, k = (F.normalize(rand(2, seqlen, qk_heads, 8), dim=-1).requires_grad_() for _ in range(2))
    v = rand(2, seqlen, v_heads, 6).requires_grad_()
    g = (-torch.rand(2, seqlen, v_heads, generator=generator, dtype=torch.float64)).requires_grad_()
    beta = torch.rand(2, seqlen, v_heads, generator=generator, dtype=torch.float64).requires_grad_()
    return q, k, v, g, beta


@pytest.mark.parametrize(("seqlen", "chunk", "qk_heads", "v_heads"),
                         [(64, 16, 2, 2), (50, 16, 2, 4), (37, 32, 1, 2), (64, 64, 2, 4)])
def test_gated_delta_rule_chunked_equals_recurrent(seqlen, chunk, qk_heads, v_heads):
    inputs = gdn_inputs(seqlen, qk_heads, v_heads, torch.Generator().manual_seed(seqlen))
    recurrent = gated_delta_rule_recurrent(*inputs)
    chunked = gated_delta_rule_chunked(*inputs, chunk_size=chunk)
    assert max_rel(chunked, recurrent) < 1e-10
    grads = torch.autograd.grad(recurrent.square().sum(), inputs)
    grads_chunked = torch.autograd.grad(chunked.square().sum(), inputs)
    for grad, grad_chunked in zip(grads, grads_chunked, strict=True):
        assert max_rel(grad_chunked, grad) < 1e-9


def test_delta_rule_writes_the_value_at_beta_one():
    """With beta = 1 and no decay, a key written once and read back returns exactly its value."""
    k = F.normalize(torch.randn(1, 1, 1, 4, dtype=torch.float64), dim=-1)
    v = torch.randn(1, 1, 1, 3, dtype=torch.float64)
    out = gated_delta_rule_recurrent(k, k, v, torch.zeros(1, 1, 1, dtype=torch.float64),
                                     torch.ones(1, 1, 1, dtype=torch.float64), scale=1.0)
    torch.testing.assert_close(out, v)


def mamba3_inputs(seqlen, rank, generator):
    batch, groups, heads, dstate, headdim, angles = 2, 2, 4, 8, 4, 2

    def rand(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    dt = torch.rand(batch, seqlen, heads, generator=generator, dtype=torch.float64) * 0.5
    adt = -torch.rand(batch, seqlen, heads, generator=generator, dtype=torch.float64) * dt
    mimo = [rand(heads, rank, headdim) for _ in range(3)] if rank > 1 else [None] * 3
    tensors = [rand(batch, seqlen, rank, groups, dstate), rand(batch, seqlen, rank, groups, dstate),
               rand(batch, seqlen, heads, headdim), adt, dt, rand(batch, seqlen, heads), rand(heads, rank, dstate),
               rand(heads, rank, dstate), rand(batch, seqlen, angles), rand(heads), rand(batch, seqlen, heads, headdim)]
    return [t.requires_grad_() for t in tensors], mimo


@pytest.mark.parametrize(("seqlen", "chunk", "rank"), [(64, 16, 1), (45, 16, 1), (40, 8, 2), (33, 32, 4)])
def test_mamba3_scan_chunked_equals_recurrent(seqlen, chunk, rank):
    tensors, mimo = mamba3_inputs(seqlen, rank, torch.Generator().manual_seed(seqlen))
    halves = rank > 1  # mamba-ssm's MIMO kernel pairs i with i + d_state/2
    recurrent = mamba3_scan_recurrent(*tensors, *mimo, halves=halves)
    chunked = mamba3_scan_chunked(*tensors, *mimo, halves=halves, chunk_size=chunk)
    assert max_rel(chunked, recurrent) < 1e-10
    grads = torch.autograd.grad(recurrent.square().sum(), tensors)
    grads_chunked = torch.autograd.grad(chunked.square().sum(), tensors)
    for grad, grad_chunked in zip(grads, grads_chunked, strict=True):
        assert max_rel(grad_chunked, grad) < 1e-9


@pytest.mark.parametrize(("halves", "partner"), [(False, 1), (True, 4)])
def test_rotation_pairs_and_preserves_dot_products(halves, partner):
    x = torch.zeros(8, dtype=torch.float64)
    x[0] = 1.0
    rotated = _rotate(x, torch.tensor([math.pi / 2, 0.3], dtype=torch.float64), halves)
    expected = torch.zeros(8, dtype=torch.float64)
    expected[partner] = 1.0  # a quarter turn moves the first coordinate onto its partner
    torch.testing.assert_close(rotated, expected)
    q, k, phi = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64), torch.randn(2).double()
    torch.testing.assert_close(_rotate(q, phi, halves) @ _rotate(k, phi, halves), q @ k)


SCENARIOS = [
    ("mamba3-lm", {}, ("mamba3", "norm")),
    ("mamba3-lm", {"mimo": "true", "mimo_rank": "2", "ngroups": "8"}, ("mamba3_mimo", "norm")),  # a group per head
    ("gdn-lm", {}, ("gated_delta", "conv1d", "norm")),
    ("gdn-hybrid", {}, ("gated_delta", "conv1d", "norm", "attention")),
    ("hybrid", {"ssm_layer": "mamba3"}, ("mamba3", "norm", "attention")),
    ("hybrid", {"ssm_layer": "mamba3", "mimo": "true", "mimo_rank": "2", "ngroups": "1"},
     ("mamba3_mimo", "norm", "attention")),
    ("hybrid", {"ssm_layer": "gdn"}, ("gated_delta", "conv1d", "norm", "attention")),
]


@pytest.mark.parametrize(("name", "overrides", "ops"), SCENARIOS)
def test_tiny_presets_train_on_the_cpu_references(name, overrides, ops):
    workload = get_workload(name)
    cfg = workload.config("tiny", overrides)
    assert workload.kernel_ops(cfg) == ops
    plan = plan_kernels(workload.kernel_ops(cfg), "cpu", dtype=cfg.dtype)
    trainer = Trainer(workload, cfg, plan, RecordingMarker())
    losses = [trainer.step().item() for _ in range(6)]
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < losses[0]  # AdamW on one fixed batch
    assert all(torch.isfinite(p.grad).all() for p in trainer.model.parameters())


@pytest.mark.parametrize(("name", "overrides"), [(name, overrides) for name, overrides, _ in SCENARIOS])
def test_prepare_plans_the_settings_kernels_and_sizes_the_cpu_run(name, overrides):
    sets = [f"{key}={value}" for key, value in overrides.items()]
    ready = prepare(WorkloadOptions(name, "tiny", sets=sets), "cpu")  # meta-device FLOP count inside
    assert tuple(ready.plan.choices) == get_workload(name).kernel_ops(ready.cfg)


def test_gdn_paper_layer_holds_a_mamba2_layers_state():
    """The comparison at the same width: a Gated DeltaNet layer of gdn-lm paper keeps as much state as a Mamba-2
    layer of mamba2-lm paper (value heads x d_k x d_v = SSM heads x headdim x d_state)."""
    gdn, mamba2 = get_workload("gdn-lm").config("paper"), get_workload("mamba2-lm").config("paper")
    n_qk, n_v = gdn_heads(gdn.d_model, gdn.expand, gdn.head_dim, gdn.v_heads_per_qk_head)
    assert (n_qk, n_v) == (32, 64)
    assert n_v * gdn.head_dim**2 == mamba2.expand * mamba2.d_model * mamba2.d_state
    assert gdn.d_model == mamba2.d_model == get_workload("mamba3-lm").config("paper").d_model


@pytest.mark.parametrize(("layers", "counts"), [(8, {"G": 3, "A": 1, "F": 4}), (16, {"G": 6, "A": 2, "F": 8})])
def test_gdn_hybrid_is_three_to_one(layers, counts):
    pattern = gdn_hybrid_pattern(layers)
    assert {kind: pattern.count(kind) for kind in "GAF"} == counts
    assert pattern[:8] == "GFGFGFAF"


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [
        ("mamba3-lm", {"d_state": "18"}, "multiple of 4"),
        ("mamba3-lm", {"d_state": "12"}, "SISO needs d_state a multiple of 8"),
        ("mamba3-lm", {"mimo": "true", "chunk_size": "16"}, ">= 8 steps per chunk"),
        ("mamba3-lm", {"mimo": "true"}, r"ngroups 1 or one per head \(8\), got 2"),
        ("hybrid", {"ssm_layer": "mamba3", "mimo": "true", "mimo_rank": "2", "ngroups": "1", "seq_len": "60"},
         r"seq_len a multiple of its chunk \(8 steps"),
        ("mamba3-lm", {"chunk_size": "24"}, "power of two"),
        ("gdn-lm", {"chunk_size": "128"}, "fla's chunk kernels"),
        ("gdn-lm", {"head_dim": "48"}, "multiple of head_dim"),
        ("gdn-lm", {"head_dim": "4"}, r"head size \(4\) must be a multiple of 8 \(causal-conv1d\)"),
        ("hybrid", {"ssm_layer": "gdn", "d_state": "4"}, r"head size \(4\) must be a multiple of 8"),
        ("gdn-hybrid", {"layers": "12"}, "whole groups of 8"),
        ("hybrid", {"ssm_layer": "rwkv"}, "ssm_layer must be one of"),
    ],
)
def test_bad_settings_are_refused(name, overrides, message):
    with pytest.raises(InvalidConfig, match=message):
        get_workload(name).config("tiny", overrides)


def gpu_host(**overrides):
    from ssmprof.kernels import Availability

    fields = dict(cuda=True, triton=True, causal_conv1d=True, selective_scan=True, sdpa_flash=True, flash_attn=False,
                  hopper=True, tilelang=True, fla=True)
    return Availability(**{**fields, **overrides})


@pytest.mark.parametrize(
    ("have", "op", "impl", "fused", "note"),
    [
        (gpu_host(), "mamba3", "triton-siso", True, "mamba3_siso_combined"),
        (gpu_host(hopper=False), "mamba3", "torch-reference", False, "sm_90+"),
        (gpu_host(), "mamba3_mimo", "tilelang-mimo", True, "TileLang"),
        (gpu_host(tilelang=False), "mamba3_mimo", "torch-reference", False, "tilelang not installed"),
        (gpu_host(), "gated_delta", "fla-triton-chunk", True, "chunk_gated_delta_rule"),
        (gpu_host(fla=False), "gated_delta", "torch-reference", False, "fla-core not installed"),
    ],
)
def test_gpu_plan_records_which_kernels_run(monkeypatch, have, op, impl, fused, note):
    from ssmprof.kernels import Availability

    monkeypatch.setattr(Availability, "probe", classmethod(lambda cls, ops=None: have))
    plan = plan_kernels((op,), "cuda", allow_fallback=True)
    assert (plan.impl(op), plan.choices[op].fused) == (impl, fused)
    assert note in plan.provenance()[op]


H100, A100, B200 = (9, 0), (8, 0), (10, 0)


@pytest.mark.parametrize(
    ("scenario", "capability", "triton", "tilelang", "nvcc", "impl", "fused", "says"),
    [
        # the stack of our H100 host (torch 2.11): fla refuses its Triton chunk_bwd_dqkwg, nothing takes it
        ("Hopper, Triton 3.6.0, no tilelang: refused", H100, "3.6.0", False, False, "torch-reference", False,
         "is not installed"),
        ("Hopper, Triton 3.6.0, tilelang: dqkwg on TileLang", H100, "3.6.0", True, True,
         "fla-triton-chunk+tilelang-dqkwg", True, "chunk_bwd_dqkwg on fla's TileLang backend (fla #640"),
        ("Hopper, Triton 3.6.0, tilelang without nvcc: refused", H100, "3.6.0", True, False, "torch-reference", False,
         "no nvcc"),
        ("Hopper, Triton 3.4.0 (the first bad one)", H100, "3.4.0", True, True, "fla-triton-chunk+tilelang-dqkwg",
         True, "Triton 3.4.0"),
        ("Hopper, Triton 3.7.0 (the last bad one)", H100, "3.7.0", False, False, "torch-reference", False, "#640"),
        ("Hopper, Triton 3.7.1: fixed", H100, "3.7.1", False, False, "fla-triton-chunk", True,
         "chunk_gated_delta_rule"),
        ("Hopper, Triton 3.3.1: before the bug", H100, "3.3.1", False, False, "fla-triton-chunk", True,
         "chunk_gated_delta_rule"),
        ("Ampere, Triton 3.6.0", A100, "3.6.0", False, False, "fla-triton-chunk", True, "chunk_gated_delta_rule"),
        # fla's IS_NVIDIA_HOPPER is capability 9.x (or "NVIDIA H" in the name): Blackwell is not Hopper
        ("Blackwell 10.0, Triton 3.6.0", B200, "3.6.0", False, False, "fla-triton-chunk", True,
         "chunk_gated_delta_rule"),
    ],
)
def test_gdn_backward_path_follows_fla_640(scenario, capability, triton, tilelang, nvcc, impl, fused, says):
    """fla-core 0.6.0 refuses its Triton chunk_bwd_dqkwg on Hopper with Triton >= 3.4.0, < 3.7.1 (#640): the plan
    puts that kernel on fla's TileLang backend where it can run, refuses the op where it cannot, and leaves fla's
    Triton chain everywhere else."""
    choice = gated_delta_choice(capability, triton, tilelang, nvcc)
    assert (choice.impl, choice.fused) == (impl, fused), scenario
    assert says in choice.describe(), scenario
    assert bool(choice.refusal) == (not fused), scenario
    if choice.refusal:
        assert "\n" not in choice.refusal and f"this is Triton {triton}" in choice.refusal
        assert "upgrade Triton to >= 3.7.1" in choice.refusal
        assert ("tilelang==0.1.8" if not tilelang else "nvcc") in choice.refusal
    else:
        assert impl in FLA_BACKENDS  # what gated_delta_rule_fused() switches fla's backends to


def test_fla_hopper_is_flas_definition():
    assert fla_hopper((9, 0)) and fla_hopper((9, 0), "NVIDIA H100 80GB HBM3")
    assert fla_hopper((0, 0), "NVIDIA H20")  # fla: a name holding "NVIDIA H" is Hopper too
    assert not fla_hopper((8, 0), "NVIDIA A100-SXM4-80GB") and not fla_hopper((10, 0), "NVIDIA B200")
    assert not fla_hopper((12, 0), "NVIDIA GeForce RTX 5090")


def test_gdn_plan_on_a_hopper_fla_refuses_is_one_line_unless_fallbacks_are_allowed(monkeypatch):
    from ssmprof.kernels import Availability

    have = gpu_host(capability=H100, device_name="NVIDIA H100 80GB HBM3", triton_version="3.6.0", tilelang=False)
    monkeypatch.setattr(Availability, "probe", classmethod(lambda cls, ops=None: have))
    with pytest.raises(KernelUnavailable) as error:
        plan_kernels(("gated_delta", "conv1d", "norm"), "cuda")
    assert str(error.value).startswith("Gated DeltaNet cannot train here: fla-core refuses its Triton "
                                       "chunk_bwd_dqkwg (fla #640: Triton >= 3.4.0 and < 3.7.1 miscompiles it on "
                                       "Hopper, and this is Triton 3.6.0), and tilelang")
    assert "make kernels" not in str(error.value)  # the generic refusal's remedy does not apply
    plan = plan_kernels(("gated_delta", "conv1d", "norm"), "cuda", allow_fallback=True)
    assert plan.impl("gated_delta") == "torch-reference" and "#640" in plan.provenance()["gated_delta"]
    tilelang_host = gpu_host(capability=H100, triton_version="3.6.0", tilelang=True, nvcc=True)
    monkeypatch.setattr(Availability, "probe", classmethod(lambda cls, ops=None: tilelang_host))
    plan = plan_kernels(("gated_delta", "conv1d", "norm"), "cuda")
    assert plan.impl("gated_delta") == "fla-triton-chunk+tilelang-dqkwg" and plan.choices["gated_delta"].fused
    assert "chunk_bwd_dqkwg on fla's TileLang backend (fla #640" in plan.provenance()["gated_delta"]


def test_the_probe_reads_what_the_gdn_decision_needs(monkeypatch):
    """On a GPU host the probe records the compute capability, the GPU's name and Triton's version that
    `gated_delta_choice` decides by (here an H100 stood in for, tilelang absent)."""
    import triton

    from ssmprof import kernels

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(kernels, "_importable", lambda name: name != "tilelang")
    have = kernels.Availability.probe()
    assert (have.capability, have.device_name, have.triton_version) == ((9, 0), "NVIDIA H100 80GB HBM3",
                                                                        triton.__version__)
    assert have.hopper and have.fla and not have.tilelang and not have.nvcc


@pytest.mark.parametrize(
    ("ops", "imported"),
    [
        (("ssd", "conv1d", "norm"), ["triton", "causal_conv1d"]),
        (("ssd", "conv1d", "norm", "attention"), ["triton", "causal_conv1d", "flash_attn"]),
        (("gated_delta", "attention"), ["triton", "tilelang", "fla.ops.gated_delta_rule", "flash_attn"]),
        (None, ["triton", "tilelang", "fla.ops.gated_delta_rule", "causal_conv1d", "flash_attn"]),
    ],
)
def test_the_probe_imports_only_what_the_planned_ops_use(monkeypatch, ops, imported):
    """Every Nsight Compute pass's child plans its kernels again: importing fla-core (seconds) for a Mamba-2 run
    would cost each pass for nothing."""
    from ssmprof import kernels

    seen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(kernels, "_extension_built", lambda name: True)
    monkeypatch.setattr(kernels, "_importable", lambda name: seen.append(name) or name != "tilelang")
    kernels.Availability.probe(ops)
    assert seen == imported


@pytest.mark.parametrize(("name", "sets"), [("gdn-lm", []), ("gdn-hybrid", []), ("hybrid", ["ssm_layer=gdn"])])
def test_every_gdn_workload_is_refused_before_any_model_is_built(monkeypatch, name, sets):
    """`ssmprof run gdn-lm --preset small` on our H100's stack (Triton 3.6.0, no tilelang): one line, exit 1, no
    model built (it died with fla's traceback after building and warming up)."""
    from typer.testing import CliRunner

    from ssmprof.cli import app
    from ssmprof.kernels import Availability
    from ssmprof.profiler import harness

    def built(*args, **kwargs):
        raise AssertionError("a model was built")

    have = gpu_host(capability=H100, triton_version="3.6.0", tilelang=False)
    monkeypatch.setattr(Availability, "probe", classmethod(lambda cls, ops=None: have))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(harness.Trainer, "__init__", built)
    args = ["run", name, "--preset", "small", *[arg for pair in sets for arg in ("--set", pair)]]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    line = " ".join(result.output.split())
    assert all(text in line for text in ("Gated DeltaNet cannot train here", "upgrade Triton to >= 3.7.1",
                                         "tilelang==0.1.8"))


def test_our_gated_delta_call_runs_flas_triton_chain(monkeypatch):
    """Where fla-core is installed (it imports on a CPU too): every keyword our layer passes is one fla's autograd
    function takes (`chunk_gated_delta_rule` swallows **kwargs: a misspelt one would be dropped without a word), and
    once `gated_delta_rule_fused()` has run, neither FlashQLA nor fla's TileLang backend, on by default on Hopper,
    takes a part of the chain, even where the environment had switched them on."""
    pytest.importorskip("fla.ops.gated_delta_rule")
    from fla.ops.common.backends.tilelang import CommonTileLangBackend
    from fla.ops.gated_delta_rule.backends.flash_qla import FlashQLABackend
    from fla.ops.gated_delta_rule.chunk import ChunkGatedDeltaRuleFunction

    taken = inspect.signature(ChunkGatedDeltaRuleFunction.forward).parameters
    assert {*GATED_DELTA_IN_KERNEL, "A_log", "dt_bias", "chunk_size"} <= set(taken)
    for backend in (CommonTileLangBackend, FlashQLABackend):
        monkeypatch.setattr(backend, "default_enable", True)  # CommonTileLangBackend's on Hopper with Triton >= 3.4
        monkeypatch.setenv(backend.env_var, "1")
    assert CommonTileLangBackend().is_enabled() and FlashQLABackend().is_enabled()
    gated_delta_rule_fused()
    assert not CommonTileLangBackend().is_enabled() and not FlashQLABackend().is_enabled()
    # where the plan puts chunk_bwd_dqkwg on fla's TileLang backend (fla #640): that backend on, FlashQLA still off;
    # of the Gated DeltaNet chain the `common` TileLang backend implements chunk_bwd_dqkwg only
    gated_delta_rule_fused(GDN_TILELANG_DQKWG)
    assert CommonTileLangBackend().is_enabled() and not FlashQLABackend().is_enabled()
    taken = {name for name in vars(CommonTileLangBackend) if not name.startswith("_") and callable(
        getattr(CommonTileLangBackend, name)) and not name.endswith("_verifier")}
    assert taken == {"chunk_bwd_dqkwg"}
    gated_delta_rule_fused()
    assert not CommonTileLangBackend().is_enabled()


@pytest.mark.parametrize(("layer", "chunk"), [("mamba2", 256), ("mamba3", 64), ("gdn", 64)])
def test_the_hybrid_records_the_chunk_its_ssm_layer_runs(layer, chunk):
    """run.json's config is what ran: the paper hybrid's Mamba-2 chunk of 256 is capped for Mamba-3 and Gated
    DeltaNet layers, and the recorded `chunk_size` says so."""
    from ssmprof.workloads.registry import get_workload

    cfg = get_workload("hybrid").config("paper", {"ssm_layer": layer})
    assert cfg.chunk_size == chunk
