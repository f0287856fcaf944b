"""The SSM and hybrid language models people ship, built by `transformers` from their published configuration sizes
with random weights: `hf:<arch>` workloads (no download, no hub access: the sizes are constants here, each table
naming the config.json it comes from).

Presets. `tiny` runs on the CPU in seconds (a few layers, every layer kind of the model, tiny widths); `small` is a
GPU run of minutes (d_model 1024, four to eight layers); `published` has every width of the published model (d_model,
heads, d_state, groups, head dims, chunk, experts' widths) and the first layers of its published layer pattern, so
that a training iteration fits one 80 GB GPU: the kernels of a layer are those of the published model, only fewer
layers launch them. Where a mixture of experts would not fit even so, `published` keeps the expert width and fewer
experts (each one's GEMMs are unchanged; `preset_notes` says so).

Which kernels ran. transformers picks a mixer's implementation when its modeling module is imported: mamba-ssm's and
causal-conv1d's fused kernels (fla-core's for Gated DeltaNet) where they import, its own PyTorch code otherwise. So
the import is done here, on purpose: on the GPU after the kernel adapter has made mamba-ssm importable (where the plan
has the fused kernels), on the CPU with those packages hidden (their Triton kernels cannot run there). What
transformers then bound is read back from the module and replaces the plan's choices for the mixer's ops, so the
run's provenance says what transformers calls, fused or "PyTorch fallback".
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import re
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ssmprof.errors import InvalidConfig, KernelUnavailable, UnknownWorkload
from ssmprof.kernels import TRANSFORMERS_FALLBACK, KernelChoice, KernelPlan, mamba_ssm
from ssmprof.workloads.base import CommonConfig, Workload, check
from ssmprof.workloads.data import token_batch

PREFIX = "hf:"
TESTED_TRANSFORMERS = "5.24.0"  # the transformers these builds were written and tested against
FALLBACK = TRANSFORMERS_FALLBACK  # how the provenance names transformers' own PyTorch path
# The packages transformers' mixers take fused kernels from: hidden from its import where they cannot run (CPU).
KERNEL_PACKAGES = ("mamba_ssm", "causal_conv1d", "fla")
# The mixtures of experts run each expert's GEMMs in turn: transformers' default `grouped_mm` casts the tokens to the
# weights' dtype, and mixed precision keeps the weights fp32, which torch's grouped GEMM refuses (bf16 only).
EXPERTS_IMPLEMENTATION = "eager"


@dataclass(frozen=True)
class HFConfig(CommonConfig):
    """The sizes of an `hf:` model; 0: a size the architecture does not have (`Arch.settings` lists those it has)."""

    d_model: int = 64
    vocab_size: int = 256
    d_state: int = 16
    ssm_heads: int = 0  # Mamba-2 heads; Gated DeltaNet value heads
    headdim: int = 0  # Mamba-2 head dim; Gated DeltaNet key/value head dim
    ngroups: int = 1  # Mamba-2 B/C groups; Gated DeltaNet query/key heads
    chunk_size: int = 0
    attn_heads: int = 0
    kv_heads: int = 0
    attn_head_dim: int = 0
    ffn: int = 0  # MLP width (per expert in a mixture of experts)
    shared_ffn: int = 0  # the shared expert's width
    experts: int = 0
    top_k: int = 0


COMMON = ("batch_size", "seq_len", "layers", "dtype", "d_model", "vocab_size")


@dataclass(frozen=True)
class Arch:
    """One transformers architecture: its classes, the sizes it takes, its layer pattern and the kernels its
    sequence mixer can call (`family`: mamba2, mamba1 or gdn)."""

    name: str
    description: str
    model_class: str  # in transformers' top-level namespace
    module: str  # transformers.models.<module>.modeling_<module>
    family: str
    settings: tuple[str, ...]
    hybrid: bool  # has attention layers
    kwargs: Callable[[HFConfig], dict]  # the transformers config's arguments
    presets: dict[str, HFConfig]
    notes: dict[str, str]


# The fused entry points transformers' mixers call in training, by family: (op, upstream function names).
# transformers >= 5 wraps each in a decorator that holds the chosen implementation; 4.x binds the name itself.
BOUND = {
    "mamba2": (("ssd", ("mamba_split_conv1d_scan_combined",)), ("conv1d", ("causal_conv1d_fn",))),
    "mamba1": (("selective_scan", ("mamba_inner_fn",)), ("conv1d", ("causal_conv1d_fn",))),
    "gdn": (("gated_delta", ("chunk_gated_delta_rule",)), ("conv1d", ("causal_conv1d_fn",))),
}


def _pattern(published: str, layers: int) -> str:
    """The first `layers` layers of a published layer pattern (repeated past its end); a layer kind the prefix
    misses takes the last layers, so a reduced model launches every kernel of the published one."""
    pattern = list((published * (layers // len(published) + 1))[:layers])
    missing = [kind for kind in dict.fromkeys(published) if kind not in pattern]
    check(len(missing) < layers, f"{layers} layers cannot hold the layer kinds {''.join(dict.fromkeys(published))}")
    for i, kind in enumerate(missing):
        pattern[layers - 1 - i] = kind
    return "".join(pattern)


def _tiny(**sizes) -> HFConfig:
    return HFConfig(batch_size=2, seq_len=64, dtype="fp32", d_model=64, vocab_size=256, **sizes)


def _small(**sizes) -> HFConfig:
    return HFConfig(batch_size=4, seq_len=2048, dtype="bf16", d_model=1024, vocab_size=50280, **sizes)


def _published(**sizes) -> HFConfig:
    return HFConfig(batch_size=2, seq_len=4096, dtype="bf16", **sizes)


NOTES = {"tiny": "CPU smoke test, seconds", "small": "one GPU, minutes"}


def _mamba2_kwargs(cfg: HFConfig) -> dict:
    return dict(hidden_size=cfg.d_model, num_hidden_layers=cfg.layers, vocab_size=cfg.vocab_size,
                state_size=cfg.d_state, num_heads=cfg.ssm_heads, head_dim=cfg.headdim, n_groups=cfg.ngroups,
                chunk_size=cfg.chunk_size, expand=2, conv_kernel=4, tie_word_embeddings=True)


def _mamba_kwargs(cfg: HFConfig) -> dict:
    return dict(hidden_size=cfg.d_model, num_hidden_layers=cfg.layers, vocab_size=cfg.vocab_size,
                state_size=cfg.d_state, expand=2, conv_kernel=4, tie_word_embeddings=True)


# nvidia/Nemotron-H-8B-Base-8K config.json: 52 layers, M = Mamba-2, - = MLP (relu2), * = attention.
NEMOTRON_H_PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"


def _nemotron_h_kwargs(cfg: HFConfig) -> dict:
    return dict(hidden_size=cfg.d_model, num_hidden_layers=cfg.layers, vocab_size=cfg.vocab_size,
                hybrid_override_pattern=_pattern(NEMOTRON_H_PATTERN, cfg.layers),
                num_attention_heads=cfg.attn_heads, num_key_value_heads=cfg.kv_heads, head_dim=cfg.attn_head_dim,
                intermediate_size=cfg.ffn, mlp_hidden_act="relu2", ssm_state_size=cfg.d_state,
                mamba_num_heads=cfg.ssm_heads, mamba_head_dim=cfg.headdim, n_groups=cfg.ngroups,
                chunk_size=cfg.chunk_size, expand=2, conv_kernel=4)


# ibm-ai-platform/Bamba-9B config.json: 32 layers, attention at 9, 18 and 27 ("attn_layer_indices"), Mamba-2 elsewhere.
BAMBA_PATTERN = "".join("A" if i in (9, 18, 27) else "M" for i in range(32))


def _bamba_kwargs(cfg: HFConfig) -> dict:
    pattern = _pattern(BAMBA_PATTERN, cfg.layers)
    return dict(hidden_size=cfg.d_model, num_hidden_layers=cfg.layers, vocab_size=cfg.vocab_size,
                attn_layer_indices=[i for i, kind in enumerate(pattern) if kind == "A"],
                num_attention_heads=cfg.attn_heads, num_key_value_heads=cfg.kv_heads, intermediate_size=cfg.ffn,
                mamba_n_heads=cfg.ssm_heads, mamba_d_head=cfg.headdim, mamba_n_groups=cfg.ngroups,
                mamba_d_state=cfg.d_state, mamba_chunk_size=cfg.chunk_size, mamba_expand=2, mamba_d_conv=4)


# ibm-granite/granite-4.0-h-small config.json: 40 layers, 36 Mamba-2 and 4 attention ("layer_types"), a mixture of
# experts after every mixer. Its attention layers are spread one in ten here.
GRANITE_PATTERN = "MMMMMMMMMA"


def _granite_kwargs(cfg: HFConfig) -> dict:
    pattern = _pattern(GRANITE_PATTERN, cfg.layers)
    return dict(hidden_size=cfg.d_model, num_hidden_layers=cfg.layers, vocab_size=cfg.vocab_size,
                layer_types=["attention" if kind == "A" else "mamba" for kind in pattern],
                num_attention_heads=cfg.attn_heads, num_key_value_heads=cfg.kv_heads, intermediate_size=cfg.ffn,
                shared_intermediate_size=cfg.shared_ffn, num_local_experts=cfg.experts,
                num_experts_per_tok=cfg.top_k, mamba_n_heads=cfg.ssm_heads, mamba_d_head=cfg.headdim,
                mamba_n_groups=cfg.ngroups, mamba_d_state=cfg.d_state, mamba_chunk_size=cfg.chunk_size,
                mamba_expand=2, mamba_d_conv=4, tie_word_embeddings=True)


# ai21labs/Jamba-v0.1 config.json: attention every 8 layers from layer 4, a mixture of experts every 2 from layer 1,
# Mamba-1 mixers elsewhere (d_state 16, expand 2, dt_rank 256 = d_model / 16, transformers' "auto").
JAMBA_ATTENTION = (8, 4)  # period, offset
JAMBA_EXPERTS = (2, 1)


def _jamba_kwargs(cfg: HFConfig) -> dict:
    return dict(hidden_size=cfg.d_model, num_hidden_layers=cfg.layers, vocab_size=cfg.vocab_size,
                num_attention_heads=cfg.attn_heads, num_key_value_heads=cfg.kv_heads, intermediate_size=cfg.ffn,
                num_experts=cfg.experts, num_experts_per_tok=cfg.top_k, attn_layer_period=JAMBA_ATTENTION[0],
                attn_layer_offset=JAMBA_ATTENTION[1], expert_layer_period=JAMBA_EXPERTS[0],
                expert_layer_offset=JAMBA_EXPERTS[1], mamba_d_state=cfg.d_state, mamba_d_conv=4, mamba_expand=2)


# transformers' Jamba normalizes its Mamba mixer's time step, B and C with RMSNorms whose fp32 weight (mixed precision
# keeps parameters fp32) turns their bf16 input into fp32 under autocast; mamba-ssm's selective scan then refuses B in
# another dtype than its input ("Expected B.scalar_type() == ... input_type", hf:jamba small on an H100, 2026-11-27).
# A model trained in bf16 computes those norms in bf16: their outputs are cast to the autocast dtype.
JAMBA_SCAN_NORMS = ("dt_layernorm", "b_layernorm", "c_layernorm")


def _scan_norms_in_compute_dtype(model: nn.Module) -> None:
    """Cast the outputs of Jamba's scan norms (JAMBA_SCAN_NORMS) to the autocast dtype, where autocast is on."""
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in JAMBA_SCAN_NORMS:
            module.register_forward_hook(_to_autocast_dtype)


def _to_autocast_dtype(module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
    device = output.device.type
    return output.to(torch.get_autocast_dtype(device)) if torch.is_autocast_enabled(device) else output


# Qwen/Qwen3-Next-80B-A3B-Instruct config.json: 48 layers, full attention every 4th ("full_attention_interval"),
# Gated DeltaNet elsewhere, a mixture of experts after every mixer.
QWEN3_NEXT_PATTERN = "LLLA"


def _qwen3_next_kwargs(cfg: HFConfig) -> dict:
    pattern = _pattern(QWEN3_NEXT_PATTERN, cfg.layers)
    return dict(hidden_size=cfg.d_model, num_hidden_layers=cfg.layers, vocab_size=cfg.vocab_size,
                layer_types=["full_attention" if kind == "A" else "linear_attention" for kind in pattern],
                num_attention_heads=cfg.attn_heads, num_key_value_heads=cfg.kv_heads, head_dim=cfg.attn_head_dim,
                linear_num_key_heads=cfg.ngroups, linear_num_value_heads=cfg.ssm_heads,
                linear_key_head_dim=cfg.headdim, linear_value_head_dim=cfg.headdim, linear_conv_kernel_dim=4,
                num_experts=cfg.experts, num_experts_per_tok=cfg.top_k, moe_intermediate_size=cfg.ffn,
                shared_expert_intermediate_size=cfg.shared_ffn, decoder_sparse_step=1)


MAMBA2_SIZES = ("d_state", "ssm_heads", "headdim", "ngroups", "chunk_size")
ATTENTION_SIZES = ("attn_heads", "kv_heads")
MOE_SIZES = ("ffn", "shared_ffn", "experts", "top_k")
MOE_FIT = "{n} of the published {m} experts (each expert's GEMMs keep their published shape) to fit 80 GB"

ARCHS = (
    Arch("mamba", "Mamba (state-spaces/mamba-2.8b-hf), transformers MambaForCausalLM", "MambaForCausalLM", "mamba",
         "mamba1", ("d_state",), False, _mamba_kwargs,
         {"tiny": _tiny(layers=2, d_state=8), "small": _small(layers=4, d_state=16),
          "published": _published(layers=16, d_model=2560, vocab_size=50280, d_state=16)},
         {"published": "mamba-2.8b widths, 16 of 64 layers"}),
    Arch("mamba2", "Mamba-2 (state-spaces/mamba2-2.7b), transformers Mamba2ForCausalLM", "Mamba2ForCausalLM",
         "mamba2", "mamba2", MAMBA2_SIZES, False, _mamba2_kwargs,
         {"tiny": _tiny(layers=2, d_state=16, ssm_heads=8, headdim=16, ngroups=2, chunk_size=16),
          "small": _small(layers=4, d_state=128, ssm_heads=32, headdim=64, ngroups=1, chunk_size=256),
          # mamba2-2.7b: d_model 2560, 64 layers, d_state 128, headdim 64 (80 heads), 1 group, chunk 256,
          # vocabulary 50277 padded to a multiple of 16
          "published": _published(layers=16, d_model=2560, vocab_size=50288, d_state=128, ssm_heads=80, headdim=64,
                                  ngroups=1, chunk_size=256)},
         {"published": "mamba2-2.7b widths, 16 of 64 layers"}),
    Arch("bamba", "Bamba (ibm-ai-platform/Bamba-9B), transformers BambaForCausalLM", "BambaForCausalLM", "bamba",
         "mamba2", MAMBA2_SIZES + ATTENTION_SIZES + ("ffn",), True, _bamba_kwargs,
         {"tiny": _tiny(layers=3, d_state=16, ssm_heads=8, headdim=16, ngroups=1, chunk_size=16, attn_heads=4,
                        kv_heads=2, ffn=128),
          "small": _small(layers=10, d_state=128, ssm_heads=32, headdim=64, ngroups=1, chunk_size=256, attn_heads=8,
                          kv_heads=2, ffn=3584),
          # Bamba-9B: d_model 4096, 128 Mamba-2 heads of 64, d_state 128, 1 group, chunk 256; attention 32 heads,
          # 8 KV heads; MLP 14336; vocabulary 128256
          "published": _published(layers=10, d_model=4096, vocab_size=128256, d_state=128, ssm_heads=128,
                                  headdim=64, ngroups=1, chunk_size=256, attn_heads=32, kv_heads=8, ffn=14336)},
         {"published": "Bamba-9B widths, its first 10 of 32 layers (9 Mamba-2, 1 attention)"}),
    Arch("nemotron-h", "Nemotron-H (nvidia/Nemotron-H-8B-Base-8K), transformers NemotronHForCausalLM",
         "NemotronHForCausalLM", "nemotron_h", "mamba2", MAMBA2_SIZES + ATTENTION_SIZES + ("attn_head_dim", "ffn"),
         True, _nemotron_h_kwargs,
         {"tiny": _tiny(layers=4, d_state=16, ssm_heads=8, headdim=16, ngroups=2, chunk_size=16, attn_heads=4,
                        kv_heads=2, attn_head_dim=16, ffn=128),
          "small": _small(layers=9, d_state=128, ssm_heads=32, headdim=64, ngroups=8, chunk_size=128, attn_heads=8,
                          kv_heads=2, attn_head_dim=128, ffn=5376),
          # Nemotron-H-8B: d_model 4096, 128 Mamba-2 heads of 64, d_state 128, 8 groups, chunk 128; attention 32
          # heads of 128, 8 KV heads; MLP 21504 (relu2); vocabulary 131072
          "published": _published(layers=9, d_model=4096, vocab_size=131072, d_state=128, ssm_heads=128, headdim=64,
                                  ngroups=8, chunk_size=128, attn_heads=32, kv_heads=8, attn_head_dim=128,
                                  ffn=21504)},
         {"published": "Nemotron-H-8B widths, its first 9 of 52 layers (M-M-M-M*-)"}),
    Arch("granite-4.0-hybrid", "Granite-4.0-H (ibm-granite/granite-4.0-h-small), transformers "
         "GraniteMoeHybridForCausalLM", "GraniteMoeHybridForCausalLM", "granitemoehybrid", "mamba2",
         MAMBA2_SIZES + ATTENTION_SIZES + MOE_SIZES, True, _granite_kwargs,
         {"tiny": _tiny(layers=3, d_state=16, ssm_heads=8, headdim=16, ngroups=1, chunk_size=16, attn_heads=4,
                        kv_heads=2, ffn=32, shared_ffn=64, experts=4, top_k=2),
          "small": _small(layers=5, d_state=128, ssm_heads=32, headdim=64, ngroups=1, chunk_size=256, attn_heads=8,
                          kv_heads=2, ffn=256, shared_ffn=512, experts=16, top_k=4),
          # granite-4.0-h-small: d_model 4096, d_state 128, 128 Mamba-2 heads of 64, 1 group, chunk 256;
          # attention 32 heads, 8 KV heads; 72 experts of 768, 10 per token, a shared expert of 1536;
          # vocabulary 100352
          "published": _published(layers=5, d_model=4096, vocab_size=100352, d_state=128, ssm_heads=128, headdim=64,
                                  ngroups=1, chunk_size=256, attn_heads=32, kv_heads=8, ffn=768, shared_ffn=1536,
                                  experts=32, top_k=10)},
         {"published": "granite-4.0-h-small widths, 5 of 40 layers (4 Mamba-2, 1 attention), "
                       + MOE_FIT.format(n=32, m=72)}),
    Arch("jamba", "Jamba (ai21labs/Jamba-v0.1), transformers JambaForCausalLM", "JambaForCausalLM", "jamba",
         "mamba1", ("d_state",) + ATTENTION_SIZES + ("ffn", "experts", "top_k"), True, _jamba_kwargs,
         {"tiny": _tiny(layers=5, d_state=8, attn_heads=4, kv_heads=2, ffn=64, experts=4, top_k=2),
          "small": _small(layers=5, d_state=16, attn_heads=8, kv_heads=2, ffn=3584, experts=4, top_k=2),
          # Jamba-v0.1: d_model 4096, d_state 16; attention 32 heads, 8 KV heads; 16 experts of 14336, 2 per
          # token; vocabulary 65536
          "published": _published(layers=5, d_model=4096, vocab_size=65536, d_state=16, attn_heads=32, kv_heads=8,
                                  ffn=14336, experts=4, top_k=2)},
         {"published": "Jamba-v0.1 widths, its first 5 of 32 layers (attention at 4, experts at 1 and 3), "
                       + MOE_FIT.format(n=4, m=16)}),
    Arch("qwen3-next", "Qwen3-Next (Qwen/Qwen3-Next-80B-A3B-Instruct), transformers Qwen3NextForCausalLM: Gated "
         "DeltaNet + attention", "Qwen3NextForCausalLM", "qwen3_next", "gdn",
         ("ssm_heads", "headdim", "ngroups", "attn_heads", "kv_heads", "attn_head_dim") + MOE_SIZES, True,
         _qwen3_next_kwargs,
         {"tiny": _tiny(layers=4, ssm_heads=4, headdim=16, ngroups=2, attn_heads=4, kv_heads=2, attn_head_dim=16,
                        ffn=32, shared_ffn=32, experts=4, top_k=2),
          "small": _small(layers=4, ssm_heads=16, headdim=128, ngroups=8, attn_heads=8, kv_heads=2,
                          attn_head_dim=128, ffn=512, shared_ffn=512, experts=16, top_k=4),
          # Qwen3-Next-80B-A3B: d_model 2048; Gated DeltaNet 16 q/k heads, 32 value heads, head dims 128; attention
          # 16 heads of 256, 2 KV heads; 512 experts of 512, 10 per token, a shared expert of 512; vocabulary 151936
          "published": _published(layers=4, d_model=2048, vocab_size=151936, ssm_heads=32, headdim=128, ngroups=16,
                                  attn_heads=16, kv_heads=2, attn_head_dim=256, ffn=512, shared_ffn=512, experts=64,
                                  top_k=10)},
         {"published": "Qwen3-Next-80B-A3B widths, 4 of 48 layers (3 Gated DeltaNet, 1 attention), "
                       + MOE_FIT.format(n=64, m=512)}),
)


class HFWorkload(Workload):
    """A transformers causal LM of one `Arch`: random weights, random tokens, cross-entropy on its logits."""

    unit = "tokens"

    def __init__(self, arch: Arch):
        self.arch = arch
        self.name = PREFIX + arch.name
        self.description = arch.description
        self.presets = arch.presets
        self.preset_notes = {**NOTES, **arch.notes}
        self.ops = tuple(op for op, _ in BOUND[arch.family]) + (("attention",) if arch.hybrid else ())

    def config(self, preset: str, overrides: dict[str, Any] | None = None) -> HFConfig:
        """The preset with overrides; a size this architecture does not have is refused rather than ignored."""
        foreign = [key for key in overrides or {} if key.replace("-", "_") not in COMMON + self.arch.settings]
        if foreign:
            raise InvalidConfig(f"{self.name} has no setting '{foreign[0]}'; settings: "
                                f"{', '.join(COMMON + self.arch.settings)}")
        return super().config(preset, overrides)

    def validate(self, cfg: HFConfig) -> None:
        super().validate(cfg)
        if self.arch.family == "mamba2":
            check(cfg.ssm_heads * cfg.headdim == 2 * cfg.d_model,
                  f"ssm_heads x headdim must be 2 x d_model (expand 2), got {cfg.ssm_heads} x {cfg.headdim}")
            check(cfg.ssm_heads % cfg.ngroups == 0, f"ngroups {cfg.ngroups} must divide ssm_heads {cfg.ssm_heads}")
        if self.arch.hybrid:
            check(cfg.attn_heads % max(cfg.kv_heads, 1) == 0,
                  f"attn_heads {cfg.attn_heads} must be a multiple of kv_heads {cfg.kv_heads}")
        if self.arch.name == "jamba":
            check(cfg.layers > JAMBA_ATTENTION[1], f"jamba needs > {JAMBA_ATTENTION[1]} layers to reach its "
                  f"first attention layer, got {cfg.layers}")
        self.arch.kwargs(cfg)  # a layer pattern the layer count cannot hold is refused here

    def routes_tokens(self, cfg: HFConfig) -> bool:
        return cfg.experts > 1

    def build(self, cfg: HFConfig, plan: KernelPlan) -> nn.Module:
        fused = plan.device == "cuda" and all(plan.choices[op].fused for op, _ in BOUND[self.arch.family])
        if not fused:  # before record_kernels overwrites the plan's reasons
            FALLBACK_CAUSE.set(plan, [op for op, _ in BOUND[self.arch.family]])
        module = modeling_module(self.arch, plan if fused else None)
        config = self.transformers_config(cfg, module)
        record_kernels(plan, module, self.arch, cfg)
        model = getattr(module, self.arch.model_class)(config)
        if self.arch.name == "jamba":
            _scan_norms_in_compute_dtype(model)
        return model

    def transformers_config(self, cfg: HFConfig, module):
        """The transformers config of these sizes: no generation cache (training), SDPA attention, and each
        expert's GEMMs in turn (EXPERTS_IMPLEMENTATION)."""
        choices = {"attn_implementation": "sdpa"} if self.arch.hybrid else {}
        if "experts" in self.arch.settings:
            choices["experts_implementation"] = EXPERTS_IMPLEMENTATION
        return getattr(module, self.arch.model_class).config_class(**self.arch.kwargs(cfg), use_cache=False, **choices)

    def batch(self, cfg: HFConfig, device: torch.device, generator: torch.Generator) -> dict:
        return token_batch(cfg.batch_size, cfg.seq_len, cfg.vocab_size, device, generator)

    def loss(self, model: nn.Module, batch: dict) -> torch.Tensor:
        """Next-token cross-entropy on the model's logits (the batch's labels are already shifted)."""
        logits = model(input_ids=batch["input_ids"], use_cache=False).logits
        return F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten())

    def items_per_step(self, cfg: HFConfig) -> int:
        return cfg.batch_size * cfg.seq_len

    def step_flops(self, cfg: HFConfig) -> float:
        """6 x parameters x tokens, every expert counted (an upper bound): transformers' forward reads tensor values
        (packed-sequence detection, expert routing), so it cannot be counted on the meta device; the parameters can
        (a build there allocates nothing)."""
        with torch.device("meta"):
            config = self.transformers_config(cfg, modeling_module(self.arch, None))
            model = getattr(modeling_module(self.arch, None), self.arch.model_class)(config)
        return 6.0 * sum(p.numel() for p in model.parameters()) * self.items_per_step(cfg)


def transformers_version() -> str:
    import transformers

    return transformers.__version__


class _FallbackCause(logging.Filter):
    """transformers says a mixer "is falling back to its reference PyTorch implementation because `mamba_ssm` is not
    installed" whenever the package does not import, and on the PyTorch path ssmprof hides it on purpose
    (`_kernel_packages`): the package may well be installed (`ssmprof doctor` lists it). This filter, on
    transformers' kernel logger, puts the real cause in the line: a CPU run, or the plan's reason on the GPU."""

    LINE = re.compile(r"because `(?P<package>[\w.-]+)` is not installed\. This is correct but much slower; "
                      r"install `[\w.-]+` for the optimized kernel\.")

    def __init__(self) -> None:
        super().__init__()
        self.device = "cpu"
        self.reasons: list[str] = []

    def set(self, plan: KernelPlan, ops: list[str]) -> None:
        self.device = plan.device
        chosen = [plan.choices[op] for op in ops if op in plan.choices]
        self.reasons = list(dict.fromkeys(choice.note for choice in chosen if not choice.fused and choice.note))

    def cause(self, package: str) -> str:
        from importlib import metadata

        from ssmprof.kernels import unbuilt_extensions

        try:
            have = f"`{package}` {unbuilt_extensions().get(package) or metadata.version(package) + ' is installed'}"
        except (metadata.PackageNotFoundError, ValueError):
            have = f"`{package}` is not installed"
        if self.device == "cpu":
            return (f"this is a CPU run ({have}; its fused kernels need a CUDA GPU, see `ssmprof doctor`), "
                    f"so ssmprof binds transformers' PyTorch code.")
        why = "; ".join(self.reasons) or "the plan has no fused kernel for this op"
        return f"ssmprof's kernel plan binds transformers' PyTorch code ({have}): {why} (see `ssmprof doctor`)."

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        found = self.LINE.search(message)
        if found:
            record.msg, record.args = message[:found.start()] + "because " + self.cause(found["package"]), ()
        return True


FALLBACK_CAUSE = _FallbackCause()
logging.getLogger("transformers.integrations.hub_kernels").addFilter(FALLBACK_CAUSE)


@contextmanager
def _kernel_packages(visible: bool):
    """Inside: the fused-kernel packages importable (through the kernel adapter, which stands in for mamba-ssm's
    unbuilt selective-scan extension) or, with `visible` False, hidden, so that an import binds PyTorch code."""
    if visible:
        mamba_ssm()
        yield
        return
    hidden = {name: module for name, module in sys.modules.items()
              if name.split(".")[0] in KERNEL_PACKAGES}
    # None in sys.modules makes an import of that name fail (ModuleNotFoundError), as the import system documents;
    # typeshed types sys.modules as modules only.
    blocked: dict[str, Any] = dict.fromkeys((*hidden, *KERNEL_PACKAGES))
    sys.modules.update(blocked)
    try:
        yield
    finally:
        for name in KERNEL_PACKAGES:
            sys.modules.pop(name, None)
        for name in hidden:
            sys.modules.pop(name, None)
        sys.modules.update(hidden)


def modeling_module(arch: Arch, plan: KernelPlan | None):
    """transformers' modeling module of `arch`, its mixers bound to the fused kernels `plan` chose or, with no
    plan, to its PyTorch code. transformers binds them when the module is imported, so a module imported earlier
    with the other binding is imported again. A transformers without the module is one line."""
    name = f"transformers.models.{arch.module}.modeling_{arch.module}"
    fused = plan is not None
    try:
        found = importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise KernelUnavailable(f"transformers {transformers_version()} has no {arch.model_class} (hf:{arch.name}); "
                                f"needs >= {TESTED_TRANSFORMERS} (the version ssmprof builds it with)")
    if plan is not None and arch.family == "gdn":
        from ssmprof.kernels import gated_delta_rule_fused

        gated_delta_rule_fused(plan.impl("gated_delta"))  # fla's backends as the plan chose them
    with _kernel_packages(visible=fused):
        module = importlib.import_module(name)
        if _binds_fused(module, arch.family) != fused:
            module = importlib.reload(module)
    if _binds_fused(module, arch.family) != fused:
        raise KernelUnavailable(f"transformers {transformers_version()} did not take the "
                                f"{'fused' if fused else 'PyTorch'} path for {arch.model_class}")
    return module


def bound_implementation(module, names: tuple[str, ...]) -> str:
    """Where the function transformers' mixer calls for one of `names` comes from ("module.function"), "" where the
    module has none. transformers >= 5 wraps each upstream function in a decorator whose closure holds the chosen
    implementation (`func_name`, `implementation`); 4.x binds the upstream name itself, None where unavailable, and
    also needs its `is_fast_path_available`."""
    if getattr(module, "is_fast_path_available", True) is False:
        return ""
    for value in vars(module).values():
        function = value
        while inspect.isfunction(function):
            cells = inspect.getclosurevars(function).nonlocals
            if cells.get("func_name") in names and "implementation" in cells:
                chosen = cells["implementation"]
                return f"{chosen.__module__}.{chosen.__name__}"
            function = getattr(function, "__wrapped__", None)
    for name in names:
        value = getattr(module, name, None)
        if callable(value):
            return f"{value.__module__}.{value.__name__}"
    return ""


def _is_fused(where: str) -> bool:
    return where.split(".")[0] in KERNEL_PACKAGES


def _binds_fused(module, family: str) -> bool:
    """Whether the mixer's sequence op (the family's first) is bound to a fused-kernel package."""
    op, names = BOUND[family][0]
    return _is_fused(bound_implementation(module, names))


def record_kernels(plan: KernelPlan, module, arch: Arch, cfg: HFConfig) -> None:
    """Put what transformers bound in the plan, whose provenance the run records: per op of the mixer, the fused
    function it calls, or its PyTorch fallback and why; attention is transformers' SDPA."""
    why = "CPU run" if plan.device == "cpu" else "the plan has no fused kernel for this op"
    for op, names in BOUND[arch.family]:
        where = bound_implementation(module, names)
        if _is_fused(where):
            plan.choices[op] = KernelChoice(op, f"{where.split('.')[0]} fused", True,
                                            f"transformers {arch.model_class} calls {where}")
        else:
            plan.choices[op] = KernelChoice(op, FALLBACK, False,
                                            f"transformers' own PyTorch code in place of {names[0]}; {why}")
    if arch.hybrid:
        flash = plan.device == "cuda" and cfg.dtype != "fp32"
        plan.choices["attention"] = KernelChoice(
            "attention", "sdpa-flash" if flash else "sdpa", flash,
            "transformers' sdpa attention" + ("" if plan.device == "cuda" else "; CPU run"))


WORKLOADS: dict[str, HFWorkload] = {PREFIX + arch.name: HFWorkload(arch) for arch in ARCHS}


def get(name: str) -> HFWorkload:
    """The `hf:<arch>` workload; an unknown one is one line listing the choices."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownWorkload(f"unknown transformers workload '{name}'; choose from: {', '.join(WORKLOADS)}") from None
