"""Language-model workloads: `mamba2-lm` (homogeneous Mamba-2), `hybrid` (Mamba-2, Mamba-3 or Gated DeltaNet +
attention + MLP), the baselines `transformer` and `mamba1-lm`, and the SSMs trained now: `mamba3-lm`, `gdn-lm`
and the Qwen3-Next-style `gdn-hybrid`.

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
from abc import abstractmethod
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from ssmprof.errors import InvalidConfig
from ssmprof.kernels import (
    GATED_DELTA_CHUNK_SIZES,
    GDN_V_HEADS_PER_QK_HEAD,
    MAMBA3_CHUNK,
    KernelPlan,
    hybrid_chunk,
    mamba3_steps,
)
from ssmprof.workloads.base import CommonConfig, Workload, check
from ssmprof.workloads.data import token_batch
from ssmprof.workloads.gdn import GatedDeltaNetMixer
from ssmprof.workloads.layers import MLP, CausalLM, Mamba1Mixer, Mamba2Mixer, SelfAttention
from ssmprof.workloads.mamba3 import Mamba3Mixer
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


SSM_LAYERS = ("mamba2", "mamba3", "gdn")  # what the hybrid's "M" layers can be


@dataclasses.dataclass(frozen=True)
class HybridConfig(Mamba2Config):
    n_heads: int = 16
    n_kv_heads: int = 4
    mlp_ratio: int = 4
    # The SSM layer: mamba2; mamba3 (same d_state/headdim/expand/ngroups, chunk min(chunk_size, 64)); or gdn
    # (key and value heads of d_state, value width expand*d_model as Mamba's, chunk min(chunk_size, 64)).
    ssm_layer: str = "mamba2"
    mimo: bool = False  # mamba3 only: MIMO (TileLang) instead of SISO (Triton)
    mimo_rank: int = 4


@dataclasses.dataclass(frozen=True)
class Mamba3Config(LMConfig):
    d_state: int = 128
    headdim: int = 64
    expand: int = 2
    ngroups: int = 1  # mamba-ssm's default, the case its SISO kernel is tuned for
    # Rows of a chunk tile: SISO runs chunks of chunk_size steps; MIMO of chunk_size / mimo_rank steps (each
    # step holds mimo_rank rows): mamba-ssm recommends 64 for SISO and 64 / R for MIMO.
    chunk_size: int = MAMBA3_CHUNK
    mimo: bool = False  # MIMO (TileLang kernels) instead of SISO (Triton)
    mimo_rank: int = 4


@dataclasses.dataclass(frozen=True)
class GdnConfig(LMConfig):
    head_dim: int = 128  # key and value head size (Qwen3-Next: 128)
    expand: int = 2  # value width = expand * d_model, as Mamba's inner width
    v_heads_per_qk_head: int = GDN_V_HEADS_PER_QK_HEAD
    chunk_size: int = 64  # fla's chunk (16, 32 or 64)


@dataclasses.dataclass(frozen=True)
class GdnHybridConfig(GdnConfig):
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


def check_mamba3(cfg: Mamba3Config | HybridConfig, chunk_size: int) -> None:
    d_inner = cfg.expand * cfg.d_model
    check(d_inner % cfg.headdim == 0, f"expand*d_model ({d_inner}) must be a multiple of headdim ({cfg.headdim})")
    check(cfg.ngroups >= 1 and (d_inner // cfg.headdim) % cfg.ngroups == 0,
          f"Mamba-3 heads ({d_inner // cfg.headdim}) must be a multiple of ngroups ({cfg.ngroups})")
    check(cfg.d_state >= 4 and cfg.d_state % 4 == 0, f"Mamba-3 d_state must be a multiple of 4 (half of it is "
          f"rotated in pairs), got {cfg.d_state}")
    check(cfg.mimo_rank >= 1, f"mimo_rank must be >= 1, got {cfg.mimo_rank}")
    if cfg.mimo:
        check(chunk_size % cfg.mimo_rank == 0 and chunk_size // cfg.mimo_rank >= 8,
              f"MIMO of rank {cfg.mimo_rank} needs chunk_size a multiple of it with >= 8 steps per chunk, "
              f"got chunk_size {chunk_size}")
        # mamba-ssm 2.3.2.post1's MIMO backward (mamba_mimo_bwd_combined) reduces its q/k gradients to one group
        # or to one group per head only, and its dt gradient (bwd_dadt_fused_triton) asserts whole chunks
        nheads, steps = d_inner // cfg.headdim, mamba3_steps(chunk_size, True, cfg.mimo_rank)
        check(cfg.ngroups in (1, nheads), f"Mamba-3 MIMO's backward takes ngroups 1 or one per head ({nheads}), "
              f"got {cfg.ngroups}")
        check(cfg.seq_len % steps == 0, f"Mamba-3 MIMO's backward needs seq_len a multiple of its chunk "
              f"({steps} steps = chunk_size / mimo_rank), got {cfg.seq_len}")
    else:
        check(chunk_size >= 16 and chunk_size & (chunk_size - 1) == 0,
              f"chunk_size must be a power of two >= 16, got {chunk_size}")
        # the SISO kernel (mamba3_siso_fwd) asserts an even number of rotary angles, d_state / 4
        check(cfg.d_state % 8 == 0, f"Mamba-3 SISO needs d_state a multiple of 8 (an even number, d_state / 4, "
              f"of rotary angles), got {cfg.d_state}")


def mamba3_ops(mimo: bool) -> tuple[str, ...]:
    return ("mamba3_mimo" if mimo else "mamba3", "norm")


def gdn_heads(d_model: int, expand: int, head_dim: int, v_heads_per_qk_head: int) -> tuple[int, int]:
    """(q/k heads, value heads) of a Gated DeltaNet layer whose values are expand*d_model wide."""
    n_v = expand * d_model // head_dim
    return n_v // v_heads_per_qk_head, n_v


def check_gdn(d_model: int, expand: int, head_dim: int, v_heads_per_qk_head: int, chunk_size: int) -> None:
    """A Gated DeltaNet layer's shape, as fla's kernels and causal-conv1d take it."""
    value = expand * d_model
    check(head_dim >= 1 and value % head_dim == 0,
          f"expand*d_model ({value}) must be a multiple of head_dim ({head_dim})")
    # causal-conv1d runs the q/k/v conv channel-last, which takes channel counts that are multiples of 8 only
    check(head_dim % 8 == 0, f"the Gated DeltaNet head size ({head_dim}) must be a multiple of 8 (causal-conv1d)")
    n_qk, n_v = gdn_heads(d_model, expand, head_dim, v_heads_per_qk_head)
    check(v_heads_per_qk_head >= 1 and n_qk >= 1 and n_v % v_heads_per_qk_head == 0,
          f"value heads ({n_v}) must be a multiple of v_heads_per_qk_head ({v_heads_per_qk_head})")
    check(chunk_size in GATED_DELTA_CHUNK_SIZES,
          f"chunk_size must be one of {GATED_DELTA_CHUNK_SIZES} (fla's chunk kernels), got {chunk_size}")


GDN_OPS = ("gated_delta", "conv1d", "norm")


def check_attention(cfg: HybridConfig | TransformerConfig | GdnHybridConfig) -> None:
    check(cfg.n_heads >= 1 and cfg.d_model % cfg.n_heads == 0,
          f"d_model ({cfg.d_model}) must be a multiple of n_heads ({cfg.n_heads})")
    check(cfg.n_kv_heads >= 1 and cfg.n_heads % cfg.n_kv_heads == 0,
          f"n_heads ({cfg.n_heads}) must be a multiple of n_kv_heads ({cfg.n_kv_heads})")
    check(cfg.d_model // cfg.n_heads <= 256, "attention head size must be <= 256 (flash attention)")
    check(cfg.mlp_ratio >= 1, f"mlp_ratio must be >= 1, got {cfg.mlp_ratio}")


LMConfigT = TypeVar("LMConfigT", bound=LMConfig)


class LanguageModelWorkload(Workload[LMConfigT]):
    unit = "tokens"

    @abstractmethod
    def build(self, cfg: LMConfigT, plan: KernelPlan) -> CausalLM: ...

    def validate(self, cfg: LMConfigT) -> None:
        super().validate(cfg)
        check(cfg.d_model >= 1, f"d_model must be >= 1, got {cfg.d_model}")
        check(cfg.vocab_size >= 2, f"vocab_size must be >= 2, got {cfg.vocab_size}")

    def mamba2(self, cfg: Mamba2Config, plan: KernelPlan, layer_idx: int) -> nn.Module:
        return Mamba2Mixer(cfg.d_model, cfg.d_state, cfg.headdim, cfg.expand, cfg.ngroups, cfg.chunk_size,
                           plan, layer_idx)

    def mamba3(self, cfg: Mamba3Config | HybridConfig, plan: KernelPlan, layer_idx: int, chunk_size: int
               ) -> nn.Module:
        return Mamba3Mixer(cfg.d_model, cfg.d_state, cfg.headdim, cfg.expand, cfg.ngroups,
                           mamba3_steps(chunk_size, cfg.mimo, cfg.mimo_rank), cfg.mimo_rank if cfg.mimo else None,
                           plan, layer_idx)

    def gdn(self, d_model: int, expand: int, head_dim: int, v_heads_per_qk_head: int, chunk_size: int,
            plan: KernelPlan) -> nn.Module:
        n_qk, n_v = gdn_heads(d_model, expand, head_dim, v_heads_per_qk_head)
        return GatedDeltaNetMixer(d_model, n_qk, n_v, head_dim, chunk_size, plan)

    def attention_mlp(self, cfg: HybridConfig | TransformerConfig | GdnHybridConfig, plan: KernelPlan, kind: str
                      ) -> nn.Module:
        if kind == "A":
            return SelfAttention(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, plan)
        return MLP(cfg.d_model, cfg.mlp_ratio * cfg.d_model)

    def layer_kinds(self, cfg: LMConfigT) -> list[str]:
        """Each layer's mixer kind (`parallel.MAMBA2`, ...), in order; refused in one line where the model has no
        tensor-parallel form (Mamba-3 and Gated DeltaNet layers: none is built yet)."""
        raise InvalidConfig(f"{self.name} has no tensor-parallel model (--tp/--dp): mamba2-lm, hybrid "
                            "(ssm_layer=mamba2), mamba1-lm and transformer have")

    def build_parallel(self, cfg: LMConfigT, plan: KernelPlan, groups: RankGroups) -> ParallelCausalLM:
        """This rank's part of the model under tensor parallelism (see `workloads.parallel`); with data
        parallelism alone, the single-GPU model's layers."""
        single = [block.mixer for block in self.build(cfg, plan).blocks()] if groups.parallelism.tp == 1 else None
        return ParallelCausalLM(cfg, self.layer_kinds(cfg), plan, groups, single)

    def validate_parallel(self, cfg: LMConfigT, parallelism: Parallelism) -> None:
        """Refuse, in one line, a split the model's shapes do not allow (before anything starts)."""
        tp, dp = parallelism.tp, parallelism.dp
        check(tp >= 1 and dp >= 1, f"--tp and --dp must be >= 1, got {tp} and {dp}")
        check(cfg.batch_size % dp == 0, f"batch size ({cfg.batch_size}) must be divisible by --dp {dp}")
        if parallelism.sequence_parallel:
            tokens = cfg.batch_size // dp * cfg.seq_len
            check(tokens % tp == 0, f"sequence parallelism needs batch x seq_len per replica ({tokens}) divisible "
                  f"by --tp {tp}")
        kinds = set(self.layer_kinds(cfg))
        if MAMBA2 in kinds and isinstance(cfg, Mamba2Config):
            nheads = cfg.expand * cfg.d_model // cfg.headdim
            check(cfg.ngroups % tp == 0 and nheads % tp == 0,
                  f"{self.name}: ngroups ({cfg.ngroups}) and SSM heads ({nheads}) must be divisible by --tp {tp} "
                  f"(each rank holds whole groups; try --set ngroups={tp * max(1, cfg.ngroups // tp)})")
        if MAMBA1 in kinds and isinstance(cfg, Mamba1Config):
            check(cfg.expand * cfg.d_model % tp == 0,
                  f"{self.name}: d_inner ({cfg.expand * cfg.d_model}) must be divisible by --tp {tp}")
        if ATTENTION in kinds and isinstance(cfg, HybridConfig | TransformerConfig):
            check(cfg.n_heads % tp == 0 and cfg.n_kv_heads % tp == 0,
                  f"{self.name}: n_heads ({cfg.n_heads}) and n_kv_heads ({cfg.n_kv_heads}) must be divisible by "
                  f"--tp {tp}")
        if MLP_KIND in kinds and isinstance(cfg, HybridConfig | TransformerConfig):
            check(cfg.mlp_ratio * cfg.d_model % tp == 0, f"{self.name}: MLP width must be divisible by --tp {tp}")

    def batch(self, cfg: LMConfigT, device: torch.device, generator: torch.Generator) -> dict:
        return token_batch(cfg.batch_size, cfg.seq_len, cfg.vocab_size, device, generator, cfg.text_file)

    def loss(self, model: nn.Module, batch: dict) -> torch.Tensor:
        logits = model(batch["input_ids"])
        return F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten())

    def items_per_step(self, cfg: LMConfigT) -> int:
        return cfg.batch_size * cfg.seq_len


class Mamba2LM(LanguageModelWorkload[Mamba2Config]):
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

    def build(self, cfg: Mamba2Config, plan: KernelPlan) -> CausalLM:
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


class HybridLM(LanguageModelWorkload[HybridConfig]):
    name = "hybrid"
    description = ("Mamba-2-Hybrid LM: Mamba-2 / self-attention / MLP layers in a 43/7/50 % mix "
                   "(--set ssm_layer=mamba3|gdn swaps the SSM layer)")
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

    def config(self, preset: str, overrides: dict | None = None) -> HybridConfig:
        """As every workload's, with `chunk_size` the chunk the SSM layer runs (a Mamba-3 or Gated DeltaNet
        layer caps it), so that run.json records what ran."""
        cfg = super().config(preset, overrides)
        return dataclasses.replace(cfg, chunk_size=hybrid_chunk(cfg.ssm_layer, cfg.chunk_size))

    def validate(self, cfg: HybridConfig) -> None:
        super().validate(cfg)
        check(cfg.ssm_layer in SSM_LAYERS, f"ssm_layer must be one of {', '.join(SSM_LAYERS)}, got '{cfg.ssm_layer}'")
        check_mamba2(cfg)
        chunk = hybrid_chunk(cfg.ssm_layer, cfg.chunk_size)
        if cfg.ssm_layer == "mamba3":
            check_mamba3(cfg, chunk)
        if cfg.ssm_layer == "gdn":  # keys and values of d_state per head (see `ssm`)
            check_gdn(cfg.d_model, cfg.expand, cfg.d_state, GDN_V_HEADS_PER_QK_HEAD, chunk)
        check_attention(cfg)
        try:
            hybrid_pattern(cfg.layers)
        except ValueError as exc:
            check(False, str(exc))

    def kernel_ops(self, cfg: HybridConfig) -> tuple[str, ...]:
        ssm = {"mamba2": ("ssd", "conv1d", "norm"), "mamba3": mamba3_ops(cfg.mimo), "gdn": GDN_OPS}[cfg.ssm_layer]
        return (*ssm, "attention")

    def ssm(self, cfg: HybridConfig, plan: KernelPlan, layer_idx: int) -> nn.Module:
        chunk = hybrid_chunk(cfg.ssm_layer, cfg.chunk_size)
        if cfg.ssm_layer == "mamba3":
            return self.mamba3(cfg, plan, layer_idx, chunk)
        if cfg.ssm_layer == "gdn":  # keys and values of d_state per head: the state of a Mamba-2 head per pair
            return self.gdn(cfg.d_model, cfg.expand, cfg.d_state, GDN_V_HEADS_PER_QK_HEAD, chunk, plan)
        return self.mamba2(cfg, plan, layer_idx)

    def layer_kinds(self, cfg: HybridConfig) -> list[str]:
        if cfg.ssm_layer != "mamba2":
            return super().layer_kinds(cfg)
        return [_KINDS[kind] for kind in hybrid_pattern(cfg.layers)]

    def build(self, cfg: HybridConfig, plan: KernelPlan) -> CausalLM:
        mixers = [self.ssm(cfg, plan, i) if kind == "M" else self.attention_mlp(cfg, plan, kind)
                  for i, kind in enumerate(hybrid_pattern(cfg.layers))]
        return CausalLM(cfg.vocab_size, cfg.d_model, mixers, plan)


class TransformerLM(LanguageModelWorkload[TransformerConfig]):
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

    def build(self, cfg: TransformerConfig, plan: KernelPlan) -> CausalLM:
        # Attention and MLP as separate pre-norm blocks: the layout the hybrid uses.
        mixers = [self.attention_mlp(cfg, plan, kind) for _ in range(cfg.layers) for kind in "AF"]
        return CausalLM(cfg.vocab_size, cfg.d_model, mixers, plan)


class Mamba1LM(LanguageModelWorkload[Mamba1Config]):
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

    def build(self, cfg: Mamba1Config, plan: KernelPlan) -> CausalLM:
        mixers = [Mamba1Mixer(cfg.d_model, cfg.d_state, cfg.expand, plan, i) for i in range(cfg.layers)]
        return CausalLM(cfg.vocab_size, cfg.d_model, mixers, plan)


class Mamba3LM(LanguageModelWorkload[Mamba3Config]):
    """Mamba-3 at mamba2-lm's shapes (width, state, head size, depth, batch, sequence): the SSD chain's
    successor, one fused chunked kernel per direction (SISO) where Mamba-2 runs five."""

    name = "mamba3-lm"
    description = "Mamba-3 language model (mamba-ssm Mamba3: SISO Triton kernels; --set mimo=true: TileLang MIMO)"
    ops = mamba3_ops(False)
    presets = {
        "tiny": Mamba3Config(batch_size=2, seq_len=64, layers=2, dtype="fp32", d_model=64, d_state=16, headdim=16,
                             ngroups=2, chunk_size=32, vocab_size=256),
        "small": Mamba3Config(batch_size=4, seq_len=2048, layers=4, dtype="bf16", d_model=1024),
        "paper": Mamba3Config(batch_size=2, seq_len=4096, layers=14, dtype="bf16", d_model=4096),
    }
    preset_notes = {
        "tiny": "CPU smoke test, seconds",
        "small": "one GPU, under a minute; mamba2-lm small's shapes",
        "paper": "mamba2-lm paper's width, state, heads and depth; Mamba-3 blocks (1 B/C group, chunk 64)",
    }

    def validate(self, cfg: Mamba3Config) -> None:
        super().validate(cfg)
        check_mamba3(cfg, cfg.chunk_size)

    def kernel_ops(self, cfg: Mamba3Config) -> tuple[str, ...]:
        return mamba3_ops(cfg.mimo)

    def build(self, cfg: Mamba3Config, plan: KernelPlan) -> CausalLM:
        mixers = [self.mamba3(cfg, plan, i, cfg.chunk_size) for i in range(cfg.layers)]
        return CausalLM(cfg.vocab_size, cfg.d_model, mixers, plan)


class GdnLM(LanguageModelWorkload[GdnConfig]):
    """Gated DeltaNet at mamba2-lm's width: values expand*d_model wide in heads of 128, q/k heads of 128 shared by
    two value heads (Qwen3-Next's layout), so each layer holds as much state as a Mamba-2 layer of the same
    preset (paper: 64 heads x 128 x 128 = 128 heads x 64 x 128). The contrast: chunked linear attention with a
    delta-rule (WY) solve per chunk vs SSD's chunked scan, on the same GPU at the same width."""

    name = "gdn-lm"
    description = "Gated DeltaNet language model (fla-core chunk_gated_delta_rule, Triton; Qwen3-Next layer layout)"
    ops = GDN_OPS
    presets = {
        "tiny": GdnConfig(batch_size=2, seq_len=64, layers=2, dtype="fp32", d_model=64, head_dim=16, chunk_size=16,
                          vocab_size=256),
        "small": GdnConfig(batch_size=4, seq_len=2048, layers=4, dtype="bf16", d_model=1024),
        "paper": GdnConfig(batch_size=2, seq_len=4096, layers=14, dtype="bf16", d_model=4096),
    }
    preset_notes = {
        "tiny": "CPU smoke test, seconds",
        "small": "one GPU, under a minute; mamba2-lm small's width (16 value heads)",
        "paper": "mamba2-lm paper's width and depth: 64 value / 32 q-k heads of 128, Mamba-2's state per layer",
    }

    def validate(self, cfg: GdnConfig) -> None:
        super().validate(cfg)
        check_gdn(cfg.d_model, cfg.expand, cfg.head_dim, cfg.v_heads_per_qk_head, cfg.chunk_size)

    def build(self, cfg: GdnConfig, plan: KernelPlan) -> CausalLM:
        mixers = [self.gdn(cfg.d_model, cfg.expand, cfg.head_dim, cfg.v_heads_per_qk_head, cfg.chunk_size, plan)
                  for _ in range(cfg.layers)]
        return CausalLM(cfg.vocab_size, cfg.d_model, mixers, plan)


# Qwen3-Next's layout: every fourth token mixer is full attention (3 Gated DeltaNet : 1 attention), each mixer
# followed by its MLP (an MoE there; a dense MLP here, so the comparison is about the mixers).
GDN_HYBRID_GROUP = "GFGFGFAF"


def gdn_hybrid_pattern(layers: int) -> str:
    """Block kinds of a Qwen3-Next-style hybrid of `layers` blocks: G = Gated DeltaNet, A = attention, F = MLP."""
    if layers < len(GDN_HYBRID_GROUP) or layers % len(GDN_HYBRID_GROUP):
        raise ValueError(f"a Qwen3-Next-style hybrid is built of whole groups of {len(GDN_HYBRID_GROUP)} blocks "
                         f"({GDN_HYBRID_GROUP}: 3 Gated DeltaNet + 1 attention, each with its MLP), got {layers}")
    return GDN_HYBRID_GROUP * (layers // len(GDN_HYBRID_GROUP))


class GdnHybridLM(LanguageModelWorkload[GdnHybridConfig]):
    """Qwen3-Next-style hybrid: 3 Gated DeltaNet layers to 1 attention layer (the ratio Qwen3-Next and Kimi Linear
    chose: linear layers carry the sequence, every fourth layer recalls exactly), each followed by an MLP."""

    name = "gdn-hybrid"
    description = "Qwen3-Next-style hybrid LM: Gated DeltaNet / attention 3:1, each with an MLP (fla + flash attn)"
    ops = (*GDN_OPS, "attention")
    presets = {
        "tiny": GdnHybridConfig(batch_size=2, seq_len=64, layers=8, dtype="fp32", d_model=64, head_dim=16,
                                chunk_size=16, vocab_size=256, n_heads=4, n_kv_heads=2),
        "small": GdnHybridConfig(batch_size=4, seq_len=2048, layers=16, dtype="bf16", d_model=1024),
        "paper": GdnHybridConfig(batch_size=2, seq_len=4096, layers=16, dtype="bf16", d_model=4096, n_heads=32,
                                 n_kv_heads=8),
    }
    preset_notes = {
        "tiny": "CPU smoke test, seconds",
        "small": "one GPU, under a minute; hybrid small's width",
        "paper": "hybrid paper's width and attention; 16 blocks: 6 Gated DeltaNet, 2 attention, 8 MLP",
    }

    def validate(self, cfg: GdnHybridConfig) -> None:
        super().validate(cfg)
        check_gdn(cfg.d_model, cfg.expand, cfg.head_dim, cfg.v_heads_per_qk_head, cfg.chunk_size)
        check_attention(cfg)
        try:
            gdn_hybrid_pattern(cfg.layers)
        except ValueError as exc:
            check(False, str(exc))

    def build(self, cfg: GdnHybridConfig, plan: KernelPlan) -> CausalLM:
        mixers = [self.gdn(cfg.d_model, cfg.expand, cfg.head_dim, cfg.v_heads_per_qk_head, cfg.chunk_size, plan)
                  if kind == "G" else self.attention_mlp(cfg, plan, kind) for kind in gdn_hybrid_pattern(cfg.layers)]
        return CausalLM(cfg.vocab_size, cfg.d_model, mixers, plan)
