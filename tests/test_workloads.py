"""One real training step of every workload at `tiny` on the CPU reference kernels."""

import math

import pytest
import torch

from ssmprof.errors import InvalidConfig, UnknownPreset, UnknownWorkload
from ssmprof.kernels import KernelChoice, KernelPlan, plan_kernels
from ssmprof.profiler.harness import Trainer, run_training
from ssmprof.profiler.markers import PHASES, RecordingMarker
from ssmprof.workloads.layers import SelfAttention
from ssmprof.workloads.lm import hybrid_pattern
from ssmprof.workloads.registry import WORKLOADS, get_workload


@pytest.fixture(params=sorted(WORKLOADS))
def workload(request):
    return WORKLOADS[request.param]


def tiny_trainer(workload, marker, **overrides):
    cfg = workload.config("tiny", overrides)
    return Trainer(workload, cfg, plan_kernels(workload.ops, "cpu", dtype=cfg.dtype), marker)


def test_one_step_trains_every_parameter(workload):
    marker = RecordingMarker()
    trainer = tiny_trainer(workload, marker)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    loss = trainer.step()
    assert math.isfinite(loss.item())
    for name, param in trainer.model.named_parameters():
        assert param.grad is not None, f"{name} got no gradient"
        assert param.grad.abs().sum() > 0, f"{name} got an all-zero gradient"
        assert not torch.equal(param.detach(), before[name]), f"{name} was not updated by AdamW"
    assert marker.phases() == list(PHASES)
    # each phase closes before the next opens
    assert [(event, name) for event, name, _ in marker.events] == [
        (event, name) for name in PHASES for event in ("start", "end")
    ]


@pytest.mark.parametrize("name", [name for name, w in WORKLOADS.items() if w.unit == "tokens"])
def test_first_loss_is_near_uniform_guess(name):
    """Untrained language model on random tokens: cross-entropy close to ln(vocab)."""
    trainer = tiny_trainer(WORKLOADS[name], RecordingMarker())
    loss = trainer.step().item()
    assert abs(loss - math.log(trainer.cfg.vocab_size)) < 0.5


def test_bf16_autocast_step_on_cpu(workload):
    trainer = tiny_trainer(workload, RecordingMarker(), dtype="bf16")
    assert math.isfinite(trainer.step().item())


def test_run_training_marks_every_iteration(workload):
    cfg = workload.config("tiny")
    marker = RecordingMarker()
    result = run_training(workload, "tiny", cfg, plan_kernels(workload.ops, "cpu"), steps=2, warmup=1, marker=marker)
    assert marker.phases() == list(PHASES) * 4  # warm-up, 2 timed, the profiled iteration
    assert len(result.step_times_ms) == 2 and result.step_ms > 0
    assert result.throughput == pytest.approx(workload.items_per_step(cfg) / (result.step_ms / 1e3))
    assert result.provenance and all(impl.startswith("torch-reference") for impl in result.provenance.values())
    assert result.peak_memory_bytes is None


def test_the_first_loss_is_the_first_steps_before_any_update():
    """The counter passes compare their first losses (`counters.check_same_work`): the loss of the first step,
    taken before AdamW has moved a weight, is what another process with the same seed computes first."""
    workload = get_workload("mamba1-lm")
    cfg = workload.config("tiny")
    plan = plan_kernels(workload.ops, "cpu")
    first = tiny_trainer(workload, RecordingMarker()).step().item()
    results = [run_training(workload, "tiny", cfg, plan, steps=2, warmup=warmup) for warmup in (1, 0)]
    assert [result.first_loss for result in results] == [pytest.approx(first, rel=1e-6)] * 2


def test_text_file_batches(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_bytes(b"state space models scan in linear time. " * 20)
    workload = get_workload("mamba2-lm")
    cfg = workload.config("tiny", {"text_file": str(text)})
    batch = workload.batch(cfg, torch.device("cpu"), torch.Generator().manual_seed(0))
    assert batch["input_ids"].shape == (cfg.batch_size, cfg.seq_len)
    assert torch.equal(batch["input_ids"][:, 1:], batch["labels"][:, :-1])
    assert set(batch["input_ids"].unique().tolist()) <= set(text.read_bytes())


@pytest.mark.parametrize(
    ("layers", "expected"),
    [
        (14, {"M": 6, "A": 1, "F": 7}),  # the `paper` hybrid: a quarter of the 8B model's 24/4/28
        (56, {"M": 24, "A": 4, "F": 28}),  # the 8B Mamba-2-Hybrid itself
        (7, {"M": 3, "A": 1, "F": 3}),
        (3, {"M": 1, "A": 1, "F": 1}),
    ],
)
def test_hybrid_pattern_mix(layers, expected):
    pattern = hybrid_pattern(layers)
    assert len(pattern) == layers
    assert {kind: pattern.count(kind) for kind in "MAF"} == expected


@pytest.mark.parametrize(
    ("name", "preset", "overrides", "error", "message"),
    [
        ("nope", "tiny", {}, UnknownWorkload, "unknown workload 'nope'"),
        ("mamba2-lm", "huge", {}, UnknownPreset, "unknown preset 'huge'"),
        ("mamba2-lm", "tiny", {"seq_len": "0"}, InvalidConfig, "sequence length must be >= 1"),
        ("mamba2-lm", "tiny", {"seq_len": "long"}, InvalidConfig, "expects int"),
        ("mamba2-lm", "tiny", {"headdim": "48"}, InvalidConfig, "multiple of headdim"),
        ("mamba2-lm", "tiny", {"chunk_size": "24"}, InvalidConfig, "power of two"),
        ("mamba2-lm", "tiny", {"dtype": "fp8"}, InvalidConfig, "dtype must be one of"),
        ("mamba2-lm", "tiny", {"warp_size": "3"}, InvalidConfig, "no setting 'warp_size'"),
        ("hybrid", "tiny", {"layers": "2"}, InvalidConfig, "at least 3 layers"),
        ("hybrid", "tiny", {"n_kv_heads": "3"}, InvalidConfig, "multiple of n_kv_heads"),
    ],
)
def test_bad_configuration(name, preset, overrides, error, message):
    with pytest.raises(error, match=message):
        get_workload(name).config(preset, overrides)


@pytest.mark.parametrize("args", [["mamba3-lm"], ["gdn-lm"], ["hybrid", "--set", "ssm_layer=gdn"]])
def test_models_without_a_tensor_parallel_form_refuse_tp_in_one_line(args):
    from typer.testing import CliRunner

    from ssmprof.cli import app

    result = CliRunner().invoke(app, ["run", *args, "--preset", "tiny", "--tp", "2", "--device", "cpu"])
    assert result.exit_code != 0 and "has no tensor-parallel model" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("impl", ["flash-attn", "sdpa-flash"])
def test_flash_planned_attention_takes_sdpa_in_fp32(impl):
    """The TP numerics' fp32 arbiter runs the bf16-planned model with autocast off; flash kernels have no fp32 path
    (the hybrid's arbiter on 2 H200s: "No available kernel"), so fp32 attention takes SDPA's default."""
    torch.manual_seed(0)
    attention = SelfAttention(64, 4, 2, KernelPlan("cuda", {"attention": KernelChoice("attention", impl, True)}))
    x = torch.randn(2, 16, 64)
    out = attention(x)
    attention.impl = "sdpa"
    assert torch.equal(out, attention(x))
