"""The `mamba-vision` workload: a real training step on the CPU, the mixer's structure, shapes and presets."""

import math

import pytest
import torch
import torch.nn.functional as F

from ssmprof.errors import InvalidConfig
from ssmprof.kernels import plan_kernels
from ssmprof.profiler.harness import Trainer
from ssmprof.profiler.markers import PHASES, RecordingMarker
from ssmprof.workloads.layers import SelfAttention
from ssmprof.workloads.vision import MambaVision, MambaVisionMixer, split_depth

WORKLOAD = MambaVision()
CPU_PLAN = plan_kernels(WORKLOAD.ops, "cpu", dtype="fp32")


def build(cfg, device="cpu"):
    with torch.device(device):
        return WORKLOAD.build(cfg, plan_kernels(WORKLOAD.ops, "cpu", dtype=cfg.dtype))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_one_step_trains_every_parameter(dtype):
    cfg = WORKLOAD.config("tiny", {"dtype": dtype})
    marker = RecordingMarker()
    trainer = Trainer(WORKLOAD, cfg, plan_kernels(WORKLOAD.ops, "cpu", dtype=cfg.dtype), marker)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    loss = trainer.step().item()
    assert math.isfinite(loss)
    assert abs(loss - math.log(cfg.num_classes)) < 0.5  # untrained on random labels: near a uniform guess
    for name, param in trainer.model.named_parameters():
        assert param.grad is not None, f"{name} got no gradient"
        assert param.grad.abs().sum() > 0, f"{name} got an all-zero gradient"
        assert not torch.equal(param.detach(), before[name]), f"{name} was not updated by AdamW"
    assert marker.phases() == list(PHASES)


def test_batches_are_seeded_images_and_labels():
    cfg = WORKLOAD.config("tiny")
    a, b = (WORKLOAD.batch(cfg, torch.device("cpu"), torch.Generator().manual_seed(3)) for _ in range(2))
    assert a["images"].shape == (cfg.batch_size, 3, cfg.seq_len, cfg.seq_len)
    assert a["images"].dtype == torch.float32 and a["labels"].dtype == torch.int64
    assert a["labels"].shape == (cfg.batch_size,)
    assert a["labels"].min() >= 0 and a["labels"].max() < cfg.num_classes
    assert torch.equal(a["images"], b["images"]) and torch.equal(a["labels"], b["labels"])
    assert WORKLOAD.items_per_step(cfg) == cfg.batch_size and WORKLOAD.unit == "samples"


def reference_mixer(mixer: MambaVisionMixer, u: torch.Tensor) -> torch.Tensor:
    """The mixer written out from the paper's equations, with the scan as an explicit recurrence:
    h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t, y_t = C_t h_t + D x_t."""
    x, z = mixer.in_proj(u).chunk(2, dim=-1)  # (b, l, half)
    pad = mixer.conv_ssm.kernel_size[0] // 2
    x = F.silu(F.conv1d(x.transpose(1, 2), mixer.conv_ssm.weight, mixer.conv_ssm.bias, padding=pad,
                        groups=mixer.half_width)).transpose(1, 2)
    z = F.silu(F.conv1d(z.transpose(1, 2), mixer.conv_sym.weight, mixer.conv_sym.bias, padding=pad,
                        groups=mixer.half_width)).transpose(1, 2)
    dt, B, C = mixer.x_proj(x).split([mixer.dt_rank, mixer.d_state, mixer.d_state], dim=-1)
    dt = F.softplus(mixer.dt_proj(dt))  # (b, l, half)
    A = -torch.exp(mixer.A_log)  # (half, n)
    h = torch.zeros(u.shape[0], mixer.half_width, mixer.d_state)
    ys = []
    for t in range(u.shape[1]):
        h = torch.exp(dt[:, t, :, None] * A) * h + (dt[:, t] * x[:, t])[..., None] * B[:, t, None, :]
        ys.append((h * C[:, t, None, :]).sum(-1) + mixer.D * x[:, t])
    return mixer.out_proj(torch.cat([torch.stack(ys, dim=1), z], dim=-1))


@pytest.fixture
def mixer():
    torch.manual_seed(0)
    return MambaVisionMixer(32, CPU_PLAN, d_state=8)


def test_mixer_matches_the_written_out_recurrence(mixer):
    u = torch.randn(2, 12, 32)
    with torch.no_grad():
        out = mixer(u)
        assert out.shape == u.shape  # (b, l, d) -> (b, l, d)
        torch.testing.assert_close(out, reference_mixer(mixer, u), rtol=1e-4, atol=1e-5)


def test_mixer_is_a_causal_scan_behind_a_non_causal_conv(mixer):
    """Output t sees inputs up to t+1 (the 'same'-padded conv looks one token ahead, the scan only back),
    and the last output still sees the first token: only the scan half carries that far."""
    seqlen, k = 16, 9
    u = torch.randn(1, seqlen, 32)
    bumped = u.clone()
    bumped[:, k] += 1.0
    with torch.no_grad():
        diff = (mixer(bumped) - mixer(u)).abs().amax(dim=-1)[0]
        assert torch.all(diff[: k - 1] == 0)  # before the conv's reach: untouched
        assert torch.all(diff[k - 1 : k + 2] > 1e-3)  # within the conv's reach, one token ahead included
        assert torch.all(diff[k + 2 :] > 0)  # beyond it only through the scan (small: dt is ~0.001-0.1)
        first = u.clone()
        first[:, 0] += 1.0
        assert (mixer(first) - mixer(u))[0, -1].abs().max() > 0


@pytest.mark.parametrize(
    ("depth", "expected"),
    [(1, (1, 0)), (2, (1, 1)), (3, (2, 1)), (4, (2, 2)), (8, (4, 4))],
)
def test_stage_mixers_come_first_attention_second(depth, expected):
    assert split_depth(depth) == expected


def test_paper_stages_order_mixers_then_attention():
    model = build(WORKLOAD.config("paper"), "meta")
    for stage, depth in ((model.stages[2], 8), (model.stages[3], 4)):
        kinds = ["M" if isinstance(b.mixer, MambaVisionMixer) else "A" for b in stage.blocks]
        assert kinds == ["M"] * (depth // 2) + ["A"] * (depth // 2)
        assert all(isinstance(b.mixer, SelfAttention) and not b.mixer.causal for b in stage.blocks[depth // 2 :])


@pytest.mark.parametrize("side", [64, 96])
def test_stem_and_stages_reach_the_expected_resolutions(side):
    cfg = WORKLOAD.config("tiny", {"seq_len": str(side)})
    model = build(cfg)
    images = torch.randn(2, 3, side, side)
    with torch.no_grad():
        assert model.stem(images).shape == (2, cfg.dim, side // 4, side // 4)
        shapes = [tuple(m.shape) for m in model.features(images)]
        assert model(images).shape == (2, cfg.num_classes)
    assert shapes == [(2, cfg.dim * 2**i, side // 2 ** (i + 2), side // 2 ** (i + 2)) for i in range(4)]


def test_paper_is_mambavision_t_sized():
    cfg = WORKLOAD.config("paper")
    assert (cfg.seq_len, cfg.dim, cfg.depth1, cfg.depth2, cfg.layers, cfg.depth4) == (224, 80, 1, 3, 8, 4)
    params = sum(p.numel() for p in build(cfg, "meta").parameters())
    assert 25e6 < params < 40e6
    assert params == pytest.approx(31.8e6, rel=0.02)  # MambaVision-T: 31.8M


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"seq_len": "48"}, "multiple of 32"),
        ({"seq_len": "0"}, "sequence length must be >= 1"),
        ({"heads3": "3"}, "multiple of heads3"),
        ({"dim": "0"}, "dim must be >= 1"),
        ({"num_classes": "1"}, "num_classes must be >= 2"),
        ({"batch_size": "1", "seq_len": "32"}, "BatchNorm needs"),
        ({"d_state": "many"}, "expects int"),
    ],
)
def test_bad_configuration(overrides, message):
    with pytest.raises(InvalidConfig, match=message):
        WORKLOAD.config("tiny", overrides)
