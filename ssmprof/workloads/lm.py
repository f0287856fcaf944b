"""Language-model workloads: `mamba2-lm` (homogeneous Mamba-2) and `hybrid` (Mamba-2 + attention + MLP).

Preset shapes. `paper` uses the block shapes of the 8B models of Waleffe et al. 2024 ("An Empirical
Study of Mamba-based Language Models"), which the characterization study trained: d_model 4096,
d_state 128, headdim 64, expand 2 (128 SSM heads), 8 groups, chunk 256; attention with 32 heads and 8
KV groups; MLP 4x. Those models have 56 layers (Mamba-2-Hybrid: 24 Mamba-2 + 4 attention + 28 MLP);
`paper` keeps a quarter of the depth (14 layers: 6 + 1 + 7 for the hybrid, the same 43/7/50 % mix) so
that a training iteration with AdamW fits one 80 GB GPU; every layer has the full 8B width, so each
kernel sees the shapes it would see in the 8B model. Sequence length 4096 as in that work, batch 2.
The vocabulary is GPT-NeoX's 50280 (the Mamba releases' tokenizer) rather than 256k, so the LM head
does not dwarf the SSM kernels; override with `--set vocab_size=...`.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ssmprof.kernels import KernelPlan
from ssmprof.workloads.base import CommonConfig, Workload, check
from ssmprof.workloads.data import token_batch
from ssmprof.workloads.layers import MLP, CausalLM, Mamba1Mixer, Mamba2Mixer, SelfAttention
from ssmprof.workloads.parallel import ATTENTION, MAMBA1, MAMBA2, MLP_KIND, ParallelCausalLM, Parallelism, RankGroups

_KINDS = {"M": MAMBA2, "A": ATTENTION, "F": MLP_KIND}


@dataclasses.dataclass(frozen=True)
class LMConfig(CommonConfig):
    d_model: int = 1024
    vocab_size: int = 50280
    text_file: str | None = None  # byte-level tokens from a local file instead of random tokens


@dataclasses.dataclass(frozen=True)
class Mamba2Config(LMConfig):
    d_state: int = 128
    headdim: int = 64
    expand: int = 2
    ngroups: int = 1
    chunk_size: int = 256


@dataclasses.dataclass(frozen=True)
class HybridConfig(Mamba2Config):
    n_heads: int = 16
    n_kv_heads: int = 4
    mlp_ratio: int = 4


@dataclasses.dataclass(frozen=True)
class TransformerConfig(LMConfig):
    n_heads: int = 8
    n_kv_heads: int = 8
    mlp_ratio: int = 4


@dataclasses.dataclass(frozen=True)
class Mamba1Config(LMConfig):
    d_state: int = 16
    expand: int = 2


def check_mamba2(cfg: Mamba2Config) -> None:
    d_inner = cfg.expand * cfg.d_model
    check(d_inner % cfg.headdim == 0, f"expand*d_model ({d_inner}) must be a multiple of headdim ({cfg.headdim})")
    nheads = d_inner // cfg.headdim
    check(cfg.ngroups >= 1 and nheads % cfg.ngroups == 0,
          f"SSM heads ({nheads}) must be a multiple of ngroups ({cfg.ngroups})")
    check(cfg.chunk_size >= 16 and cfg.chunk_size & (cfg.chunk_size - 1) == 0,
          f"chunk_size must be a power of two >= 16, got {cfg.chunk_size}")
    check(cfg.d_state >= 1, f"d_state must be >= 1, got {cfg.d_state}")


def check_attention(cfg: HybridConfig | TransformerConfig) -> None:
    check(cfg.n_heads >= 1 and cfg.d_model % cfg.n_heads == 0,
          f"d_model ({cfg.d_model}) must be a multiple of n_heads ({cfg.n_heads})")
    check(cfg.n_kv_heads >= 1 and cfg.n_heads % cfg.n_kv_heads == 0,
          f"n_heads ({cfg.n_heads}) must be a multiple of n_kv_heads ({cfg.n_kv_heads})")
    check(cfg.d_model // cfg.n_heads <= 256, "attention head size must be <= 256 (flash attention)")
    check(cfg.mlp_ratio >= 1, f"mlp_ratio must be >= 1, got {cfg.mlp_ratio}")


class LanguageModelWorkload(Workload):
    unit = "tokens"

    def validate(self, cfg: LMConfig) -> None:
        super().validate(cfg)
        check(cfg.d_model >= 1, f"d_model must be >= 1, got {cfg.d_model}")
        check(cfg.vocab_size >= 2, f"vocab_size must be >= 2, got {cfg.vocab_size}")

    def mamba2(self, cfg: Mamba2Config, plan: KernelPlan, layer_idx: int) -> nn.Module:
        return Mamba2Mixer(cfg.d_model, cfg.d_state, cfg.headdim, cfg.expand, cfg.ngroups, cfg.chunk_size,
                           plan, layer_idx)

    def attention_mlp(self, cfg: HybridConfig | TransformerConfig, plan: KernelPlan, kind: str) -> nn.Module:
        if kind == "A":
            return SelfAttention(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, plan)
        return MLP(cfg.d_model, cfg.mlp_ratio * cfg.d_model)

    def layer_kinds(self, cfg: LMConfig) -> list[str]:
        """Each layer's mixer kind (`parallel.MAMBA2`, ...), in order."""
        raise NotImplementedError

    def build_parallel(self, cfg: LMConfig, plan: KernelPlan, groups: RankGroups) -> ParallelCausalLM:
        """This rank's part of the model under tensor parallelism (see `workloads.parallel`)."""
        return ParallelCausalLM(cfg, self.layer_kinds(cfg), plan, groups)

    def validate_parallel(self, cfg: LMConfig, parallelism: Parallelism) -> None:
        """Refuse, in one line, a split the model's shapes do not allow (before anything starts)."""
        tp, dp = parallelism.tp, parallelism.dp
        check(tp >= 1 and dp >= 1, f"--tp and --dp must be >= 1, got {tp} and {dp}")
        check(cfg.batch_size % dp == 0, f"batch size ({cfg.batch_size}) must be divisible by --dp {dp}")
        if parallelism.sequence_parallel:
            tokens = cfg.batch_size // dp * cfg.seq_len
            check(tokens % tp == 0, f"sequence parallelism needs batch x seq_len per replica ({tokens}) divisible "
                  f"by --tp {tp}")
        kinds = set(self.layer_kinds(cfg))
        if MAMBA2 in kinds:
            nheads = cfg.expand * cfg.d_model // cfg.headdim
            check(cfg.ngroups % tp == 0 and nheads % tp == 0,
                  f"{self.name}: ngroups ({cfg.ngroups}) and SSM heads ({nheads}) must be divisible by --tp {tp} "
                  f"(each rank holds whole groups; try --set ngroups={tp * max(1, cfg.ngroups // tp)})")
        if MAMBA1 in kinds:
            check(cfg.expand * cfg.d_model % tp == 0,
                  f"{self.name}: d_inner ({cfg.expand * cfg.d_model}) must be divisible by --tp {tp}")
        if ATTENTION in kinds:
            check(cfg.n_heads % tp == 0 and cfg.n_kv_heads % tp == 0,
                  f"{self.name}: n_heads ({cfg.n_heads}) and n_kv_heads ({cfg.n_kv_heads}) must be divisible by "
                  f"--tp {tp}")
        if MLP_KIND in kinds:
            check(cfg.mlp_ratio * cfg.d_model % tp == 0, f"{self.name}: MLP width must be divisible by --tp {tp}")

    def batch(self, cfg: LMConfig, device: torch.device, generator: torch.Generator) -> dict:
        return token_batch(cfg.batch_size, cfg.seq_len, cfg.vocab_size, device, generator, cfg.text_file)

    def loss(self, model: nn.Module, batch: dict) -> torch.Tensor:
        logits = model(batch["input_ids"])
        return F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten())

    def items_per_step(self, cfg: LMConfig) -> int:
        return cfg.batch_size * cfg.seq_len


class Mamba2LM(LanguageModelWorkload):
    name = "mamba2-lm"
    description = "Homogeneous Mamba-2 language model (mamba-ssm Mamba2 blocks, fused SSD path)"
    ops = ("ssd", "conv1d", "norm")
    presets = {
        "tiny": Mamba2Config(batch_size=2, seq_len=64, layers=2, dtype="fp32", d_model=64, d_state=16,
                         headdim=16, ngroups=2, chunk_size=16, vocab_size=256),
        "small": Mamba2Config(batch_size=4, seq_len=2048, layers=4, dtype="bf16", d_model=1024),
        "paper": Mamba2Config(batch_size=2, seq_len=4096, layers=14, dtype="bf16", d_model=4096, ngroups=8),
    }
    preset_notes = {
        "tiny": "CPU smoke test, seconds",
        "small": "one GPU, under a minute",
        "paper": "8B Mamba-2 block shapes, 14 of 56 layers (fits 80 GB)",
    }

    def validate(self, cfg: Mamba2Config) -> None:
        super().validate(cfg)
        check_mamba2(cfg)

    def layer_kinds(self, cfg: Mamba2Config) -> list[str]:
        return [MAMBA2] * cfg.layers

    def build(self, cfg: Mamba2Config, plan: KernelPlan) -> nn.Module:
        mixers = [self.mamba2(cfg, plan, i) for i in range(cfg.layers)]
        return CausalLM(cfg.vocab_size, cfg.d_model, mixers, plan)


def hybrid_pattern(layers: int) -> str:
    """Layer kinds for a Mamba-2-Hybrid of `layers` layers in the 43/7/50 % mix: M = Mamba-2,
    A = attention, F = MLP. Attention layers are spread evenly; Mamba-2 and MLP alternate elsewhere."""
    n_attn = max(1, round(0.07 * layers))
    n_mamba = round(0.43 * layers)
    if n_mamba < 1 or layers - n_attn - n_mamba < 1:
        raise ValueError(f"a hybrid needs at least 3 layers to hold Mamba-2, attention and MLP, got {layers}")
    kinds = [""] * layers
    for i in range(n_attn):
        kinds[min(layers - 1, int((i + 0.5) * layers / n_attn))] = "A"
    free = [i for i, k in enumerate(kinds) if not k]
    # Mamba-2 on every other free slot (evenly spread, Bresenham style), MLP on the rest.
    for j, i in enumerate(free):
        kinds[i] = "M" if (j * n_mamba) // len(free) != ((j + 1) * n_mamba) // len(free) else "F"
    return "".join(kinds)


class HybridLM(LanguageModelWorkload):
    name = "hybrid"
    description = "Mamba-2-Hybrid LM: Mamba-2 / self-attention / MLP layers in a 43/7/50 % mix"
    ops = ("ssd", "conv1d", "norm", "attention")
    presets = {
        "tiny": HybridConfig(batch_size=2, seq_len=64, layers=7, dtype="fp32", d_model=64, d_state=16,
                             headdim=16, ngroups=2, chunk_size=16, vocab_size=256, n_heads=4, n_kv_heads=2),
        "small": HybridConfig(batch_size=4, seq_len=2048, layers=14, dtype="bf16", d_model=1024),
        "paper": HybridConfig(batch_size=2, seq_len=4096, layers=14, dtype="bf16", d_model=4096, ngroups=8,
                              n_heads=32, n_kv_heads=8),
    }
    preset_notes = {
        "tiny": "CPU smoke test, seconds",
        "small": "one GPU, under a minute",
        "paper": "8B hybrid block shapes, 14 of 56 layers: 6 Mamba-2, 1 attention, 7 MLP",
    }

    def validate(self, cfg: HybridConfig) -> None:
        super().validate(cfg)
        check_mamba2(cfg)
        check_attention(cfg)
        try:
            hybrid_pattern(cfg.layers)
        except ValueError as exc:
            check(False, str(exc))

    def layer_kinds(self, cfg: HybridConfig) -> list[str]:
        return [_KINDS[kind] for kind in hybrid_pattern(cfg.layers)]

    def build(self, cfg: HybridConfig, plan: KernelPlan) -> nn.Module:
        mixers = [self.mamba2(cfg, plan, i) if kind == "M" else self.attention_mlp(cfg, plan, kind)
                  for i, kind in enumerate(hybrid_pattern(cfg.layers))]
        return CausalLM(cfg.vocab_size, cfg.d_model, mixers, plan)


class TransformerLM(LanguageModelWorkload):
    """Baseline: quadratic attention where mamba2-lm has the linear-time SSD scan."""

    name = "transformer"
    description = "Decoder-only Transformer baseline at mamba2-lm's width (SDPA flash attention + MLP)"
    ops = ("norm", "attention")
    presets = {
        "tiny": TransformerConfig(batch_size=2, seq_len=64, layers=2, dtype="fp32", d_model=64, vocab_size=256,
                                  n_heads=4, n_kv_heads=4),
        "small": TransformerConfig(batch_size=4, seq_len=2048, layers=4, dtype="bf16", d_model=1024),
        "paper": TransformerConfig(batch_size=2, seq_len=4096, layers=8, dtype="bf16", d_model=4096, n_heads=32,
                                   n_kv_heads=32),
    }
    preset_notes = {
        "tiny": "CPU smoke test, seconds",
        "small": "one GPU, under a minute; same shape as mamba2-lm small",
        "paper": "width 4096, 32 heads; 8 layers = the parameters of mamba2-lm paper's 14",
    }

    def validate(self, cfg: TransformerConfig) -> None:
        super().validate(cfg)
        check_attention(cfg)

    def layer_kinds(self, cfg: TransformerConfig) -> list[str]:
        return [ATTENTION, MLP_KIND] * cfg.layers

    def build(self, cfg: TransformerConfig, plan: KernelPlan) -> nn.Module:
        # Attention and MLP as separate pre-norm blocks: the layout the hybrid uses.
        mixers = [self.attention_mlp(cfg, plan, kind) for _ in range(cfg.layers) for kind in "AF"]
        return CausalLM(cfg.vocab_size, cfg.d_model, mixers, plan)


class Mamba1LM(LanguageModelWorkload):
    """Baseline: one fused selective-scan kernel per layer where Mamba-2 runs the SSD chain."""

    name = "mamba1-lm"
    description = "Mamba-1 language model (mamba-ssm Mamba blocks, fused selective-scan path)"
    ops = ("selective_scan", "conv1d", "norm")
    presets = {
        "tiny": Mamba1Config(batch_size=2, seq_len=64, layers=2, dtype="fp32", d_model=64, vocab_size=256),
        "small": Mamba1Config(batch_size=4, seq_len=2048, layers=4, dtype="bf16", d_model=1024),
        "paper": Mamba1Config(batch_size=2, seq_len=4096, layers=14, dtype="bf16", d_model=4096),
    }
    preset_notes = {
        "tiny": "CPU smoke test, seconds",
        "small": "one GPU, under a minute; same shape as mamba2-lm small",
        "paper": "mamba2-lm paper's width and depth, Mamba-1 blocks (d_state 16)",
    }

    def validate(self, cfg: Mamba1Config) -> None:
        super().validate(cfg)
        check(cfg.d_state >= 1 and cfg.expand >= 1, "d_state and expand must be >= 1")

    def layer_kinds(self, cfg: Mamba1Config) -> list[str]:
        return [MAMBA1] * cfg.layers

    def build(self, cfg: Mamba1Config, plan: KernelPlan) -> nn.Module:
        mixers = [Mamba1Mixer(cfg.d_model, cfg.d_state, cfg.expand, plan, i) for i in range(cfg.layers)]
        return CausalLM(cfg.vocab_size, cfg.d_model, mixers, plan)
