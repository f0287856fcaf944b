"""Vision workload: `mamba-vision`, a hybrid Mamba-Transformer image classifier.

The model follows the description in Hatamizadeh & Kautz, "MambaVision: A Hybrid Mamba-Transformer
Vision Backbone" (CVPR 2025), written here from the paper (no code taken from its release):

- Stem: two 3x3 stride-2 convolutions (BatchNorm + ReLU after each) to 1/4 of the image side.
- Stages 1 and 2: residual conv blocks, z = BN(conv3x3(GELU(BN(conv3x3(z))))) + z.
- Stages 3 and 4: token blocks on the flattened feature map, x = x + mixer(LN(x)); x = x + MLP(LN(x)),
  MLP ratio 4. The first half of a stage's blocks (ceil(depth / 2) of them) use the MambaVision mixer,
  the rest non-causal multi-head self-attention.
- After stages 1 to 3: a downsample, 3x3 stride-2 conv + BatchNorm, doubling the channels.
- Head: BatchNorm, global average pool, linear classifier.

The MambaVision mixer (`MambaVisionMixer`) projects d channels to d_inner = expand * d and splits them
into two halves of d_inner / 2. Half one: non-causal depthwise conv1d (kernel 3, 'same' padding), SiLU,
then x_proj to (dt_rank + 2 * d_state) -> dt (dt_proj up to d_inner / 2 channels), B, C, and the
selective scan (no gate: z=None). Half two, the symmetric path: the same conv + SiLU, no SSM. The
halves are concatenated and projected back to d. d_state 8 and dt_rank = ceil(d / 16) as in the paper;
A and D are initialised as in Mamba (A_log = log(1..d_state), D = 1, dt bias = softplus^-1 of a
log-uniform dt in [1e-3, 1e-1]).

Kernels: the scan goes through `selective_scan` (mamba-ssm's CUDA selective scan on the GPU) and the
attention through `SelfAttention(causal=False)` (flash attention in bf16). The mixer's conv1d is
non-causal, which the causal-conv1d kernel cannot compute, so it is torch's depthwise conv (cuDNN);
the conv stages, BatchNorm and LayerNorm are plain torch as well.

Windowing: the paper partitions the stage 3 and 4 maps into windows. At 224 px those maps are 14x14
and 7x7, one window each, so this implementation treats the whole map as one sequence (196 and 49
tokens), which is the paper's computation at 224 px. At other image sizes it still uses the whole map
(sequences grow as (side / 16)^2 and (side / 32)^2), where MambaVision would keep windows of 14x14/7x7.

Config mapping. `seq_len` is the image side in pixels (224 for the paper; a positive multiple of 32,
the total downsampling). `layers` is the number of blocks in stage 3 (8 in MambaVision-T); the other
stages' depths are `depth1`, `depth2` and `depth4`. Channels are `dim`, 2*dim, 4*dim, 8*dim.

Presets. `paper` is MambaVision-T (dim 80, depths 1/3/8/4, heads 8/16 in stages 3/4, 1000 classes)
at 224 px: 31.76M parameters here (the paper reports 31.8M). Batch 128 per GPU: as we read the paper,
it trains with a global batch of 4096 on 32 A100s (not re-checked against the paper text).
Memory: fp32 parameters, gradients and two Adam moments are 16 B per parameter; the activations kept
for backward dominate (the BatchNorm'd conv maps of the early stages, and the mixers' inputs; the CUDA
selective scan keeps only its inputs and one chunk state, the CPU reference every step's state). The peak
memory of the bundled `paper` runs is in the README's Results: batch 128 fits an 80 GB GPU with a wide
margin; it is set by the paper, not by memory.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from ssmprof.kernels import KernelPlan
from ssmprof.workloads.base import CommonConfig, Workload, check
from ssmprof.workloads.layers import MLP, SelfAttention, selective_scan


@dataclasses.dataclass(frozen=True)
class VisionConfig(CommonConfig):
    """`seq_len` = image side in pixels; `layers` = blocks in stage 3. Defaults are MambaVision-T's."""

    dim: int = 80  # channels of the stem output and stage 1; doubled by each downsample
    stem_dim: int = 32  # channels after the first stem conv
    depth1: int = 1  # residual conv blocks in stage 1
    depth2: int = 3  # residual conv blocks in stage 2
    depth4: int = 4  # token blocks in stage 4 (stage 3's count is `layers`)
    heads3: int = 8  # attention heads in stage 3
    heads4: int = 16  # attention heads in stage 4
    d_state: int = 8
    expand: int = 1  # d_inner = expand * stage dim, split into two halves
    d_conv: int = 3  # kernel of the mixer's non-causal depthwise conv1d
    mlp_ratio: int = 4
    num_classes: int = 1000


def split_depth(depth: int) -> tuple[int, int]:
    """(MambaVision mixer blocks, attention blocks) of a stage: the mixers take the first half, rounded up."""
    n_mamba = (depth + 1) // 2
    return n_mamba, depth - n_mamba


class MambaVisionMixer(nn.Module):
    """The MambaVision token mixer: a selective-scan half and a symmetric conv-only half. (b, l, d) -> (b, l, d)."""

    def __init__(self, d_model: int, plan: KernelPlan, d_state: int = 8, expand: int = 1, d_conv: int = 3,
                 dt_min: float = 1e-3, dt_max: float = 1e-1, dt_floor: float = 1e-4):
        super().__init__()
        d_inner = expand * d_model
        if d_inner % 2:
            raise ValueError(f"expand * d_model ({d_inner}) must be even to split into two halves")
        self.plan = plan
        self.half_width = d_inner // 2
        self.d_state = d_state
        self.dt_rank = math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, d_inner, bias=False)
        # Non-causal depthwise convs: each token sees its neighbours on both sides.
        self.conv_ssm = nn.Conv1d(self.half_width, self.half_width, d_conv, padding="same", groups=self.half_width)
        self.conv_sym = nn.Conv1d(self.half_width, self.half_width, d_conv, padding="same", groups=self.half_width)
        self.x_proj = nn.Linear(self.half_width, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, self.half_width, bias=True)  # its bias is the scan's delta_bias
        self.out_proj = nn.Linear(d_inner, d_model, bias=False)
        # S4D-real A (A = -[1..n] per channel), unit skip D, Mamba's dt initialisation.
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1, dtype=torch.float32))
                                  .repeat(self.half_width, 1))
        self.D = nn.Parameter(torch.ones(self.half_width))
        with torch.no_grad():
            bound = self.dt_rank**-0.5
            self.dt_proj.weight.uniform_(-bound, bound)
            dt = torch.exp(torch.rand(self.half_width) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
            dt = dt.clamp(min=dt_floor)
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        x, z = self.in_proj(hidden).transpose(1, 2).chunk(2, dim=1)  # (b, half, l) each
        x = F.silu(self.conv_ssm(x))
        z = F.silu(self.conv_sym(z))
        x_dbl = self.x_proj(x.transpose(1, 2))  # (b, l, dt_rank + 2n)
        dt, B, C = torch.split(x_dbl, [self.dt_rank, self.d_state, self.d_state], dim=-1)
        delta = F.linear(dt, self.dt_proj.weight).transpose(1, 2)  # (b, half, l); bias goes in as delta_bias
        B, C = (t.transpose(1, 2).contiguous() for t in (B, C))  # (b, n, l)
        y = selective_scan(self.plan, x.contiguous(), delta.contiguous(), -torch.exp(self.A_log.float()), B, C,
                           self.D.float(), z=None, delta_bias=self.dt_proj.bias.float(), delta_softplus=True)
        return self.out_proj(torch.cat([y.to(z.dtype), z], dim=1).transpose(1, 2))  # (b, l, d_inner) -> (b, l, d)


class TokenBlock(nn.Module):
    """x = x + mixer(LN(x)); x = x + MLP(LN(x))."""

    def __init__(self, dim: int, mixer: nn.Module, mlp_ratio: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.mixer = mixer
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, mlp_ratio * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.mixer(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TokenStage(nn.Module):
    """A hybrid stage on the whole feature map as one sequence: mixer blocks, then attention blocks."""

    def __init__(self, dim: int, depth: int, heads: int, cfg: VisionConfig, plan: KernelPlan):
        super().__init__()
        n_mamba, n_attn = split_depth(depth)
        mixers: list[nn.Module] = [MambaVisionMixer(dim, plan, cfg.d_state, cfg.expand, cfg.d_conv)
                                   for _ in range(n_mamba)]
        mixers += [SelfAttention(dim, heads, heads, plan, causal=False) for _ in range(n_attn)]
        self.blocks = nn.ModuleList(TokenBlock(dim, mixer, cfg.mlp_ratio) for mixer in mixers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        tokens = x.flatten(2).transpose(1, 2)  # (b, h*w, c), row-major
        for block in self.blocks:
            tokens = block(tokens)
        return tokens.transpose(1, 2).reshape(b, c, h, w)


def conv_bn(c_in: int, c_out: int, stride: int = 1) -> list[nn.Module]:
    # No conv bias: the BatchNorm right after would cancel it (and leave it without gradient).
    return [nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(c_out)]


class ConvBlock(nn.Module):
    """Residual conv block of stages 1 and 2: z + BN(conv(GELU(BN(conv(z)))))."""

    def __init__(self, dim: int):
        super().__init__()
        self.body = nn.Sequential(*conv_bn(dim, dim), nn.GELU(), *conv_bn(dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class MambaVisionNet(nn.Module):
    def __init__(self, cfg: VisionConfig, plan: KernelPlan):
        super().__init__()
        dims = [cfg.dim * 2**i for i in range(4)]
        self.stem = nn.Sequential(*conv_bn(3, cfg.stem_dim, 2), nn.ReLU(),
                                  *conv_bn(cfg.stem_dim, cfg.dim, 2), nn.ReLU())
        self.stages = nn.ModuleList([
            nn.Sequential(*(ConvBlock(dims[0]) for _ in range(cfg.depth1))),
            nn.Sequential(*(ConvBlock(dims[1]) for _ in range(cfg.depth2))),
            TokenStage(dims[2], cfg.layers, cfg.heads3, cfg, plan),
            TokenStage(dims[3], cfg.depth4, cfg.heads4, cfg, plan),
        ])
        self.downsamples = nn.ModuleList(nn.Sequential(*conv_bn(dims[i], dims[i + 1], 2)) for i in range(3))
        self.norm = nn.BatchNorm2d(dims[3])
        self.head = nn.Linear(dims[3], cfg.num_classes)
        # Linear layers: truncated normal, std 0.02, zero bias; the mixers' dt_proj keeps Mamba's init.
        dt_projs = {id(m.dt_proj) for m in self.modules() if isinstance(m, MambaVisionMixer)}
        for module in self.modules():
            if isinstance(module, nn.Linear) and id(module) not in dt_projs:
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def features(self, images: torch.Tensor) -> list[torch.Tensor]:
        """The feature map after each stage, (b, c, h, w): 1/4, 1/8, 1/16 and 1/32 of the image side."""
        x = self.stem(images)
        maps = []
        for i, stage in enumerate(self.stages):
            x = stage(x)
            maps.append(x)
            if i < len(self.downsamples):
                x = self.downsamples[i](x)
        return maps

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.features(images)[-1])
        return self.head(x.mean(dim=(2, 3)))


class MambaVision(Workload[VisionConfig]):
    name = "mamba-vision"
    description = "MambaVision hybrid image classifier: conv stages, then selective-scan mixer + attention stages"
    unit = "samples"
    ops = ("selective_scan", "attention")
    presets = {
        "tiny": VisionConfig(batch_size=2, seq_len=64, layers=2, dtype="fp32", dim=16, stem_dim=8, depth1=1,
                             depth2=1, depth4=2, heads3=2, heads4=4, num_classes=10),
        "small": VisionConfig(batch_size=32, seq_len=224, layers=8, dtype="bf16"),
        "paper": VisionConfig(batch_size=128, seq_len=224, layers=8, dtype="bf16"),
    }
    preset_notes = {
        "tiny": "CPU smoke test, seconds: 64 px, dim 16, depths 1/1/2/2, 10 classes",
        "small": "one GPU, under a minute: MambaVision-T at 224 px, batch 32",
        "paper": "MambaVision-T (31.8M params) at 224 px, batch 128 per GPU as in the paper (~4 GB activations, est.)",
    }

    def validate(self, cfg: VisionConfig) -> None:
        super().validate(cfg)
        check(cfg.seq_len % 32 == 0, f"the image side (seq_len) must be a positive multiple of 32, got {cfg.seq_len}")
        for key in ("dim", "stem_dim", "depth1", "depth2", "depth4", "d_state", "expand", "d_conv", "mlp_ratio"):
            check(getattr(cfg, key) >= 1, f"{key} must be >= 1, got {getattr(cfg, key)}")
        check(cfg.num_classes >= 2, f"num_classes must be >= 2, got {cfg.num_classes}")
        for stage, heads, dim in ((3, cfg.heads3, 4 * cfg.dim), (4, cfg.heads4, 8 * cfg.dim)):
            check(heads >= 1 and dim % heads == 0, f"stage {stage} width ({dim}) must be a multiple of heads{stage} "
                  f"({heads})")
            check(dim // max(heads, 1) <= 256, f"stage {stage} attention head size must be <= 256 (flash attention)")
        # BatchNorm in training needs more than one value per channel; stage 4 maps are (side / 32)^2.
        check(cfg.batch_size * (cfg.seq_len // 32) ** 2 >= 2,
              "BatchNorm needs batch_size * (image side / 32)^2 >= 2; raise batch_size or seq_len")

    def build(self, cfg: VisionConfig, plan: KernelPlan) -> nn.Module:
        return MambaVisionNet(cfg, plan)

    def batch(self, cfg: VisionConfig, device: torch.device, generator: torch.Generator) -> dict:
        images = torch.randn((cfg.batch_size, 3, cfg.seq_len, cfg.seq_len), generator=generator)
        labels = torch.randint(0, cfg.num_classes, (cfg.batch_size,), generator=generator)
        return {"images": images.to(device), "labels": labels.to(device)}

    def loss(self, model: nn.Module, batch: dict) -> torch.Tensor:
        return F.cross_entropy(model(batch["images"]).float(), batch["labels"])

    def items_per_step(self, cfg: VisionConfig) -> int:
        return cfg.batch_size
