"""A hybrid of one's own, profiled as `ssmprof profile examples/custom_hybrid.py:CustomHybrid` (docs/own-model.md):
Mamba-2 layers with one grouped-query attention layer in the middle, no MLPs, a tied LM head."""

import dataclasses

import torch.nn.functional as F

from ssmprof.workloads.base import Workload
from ssmprof.workloads.data import token_batch
from ssmprof.workloads.layers import CausalLM, Mamba2Mixer, SelfAttention
from ssmprof.workloads.lm import Mamba2Config


@dataclasses.dataclass(frozen=True)
class CustomHybridConfig(Mamba2Config):  # + d_model, d_state, headdim, expand, ngroups, chunk_size, vocab_size
    n_heads: int = 16
    n_kv_heads: int = 4


class CustomHybrid(Workload):
    name = "custom-hybrid"
    description = "Mamba-2 layers around one grouped-query attention layer"
    unit = "tokens"
    ops = ("ssd", "conv1d", "norm", "attention")  # the kernels of Mamba2Mixer, SelfAttention and the norms
    presets = {
        "tiny": CustomHybridConfig(batch_size=2, seq_len=64, layers=3, dtype="fp32", d_model=64, d_state=16,
                                   headdim=16, chunk_size=16, n_heads=4, n_kv_heads=2, vocab_size=256),
        "small": CustomHybridConfig(batch_size=4, seq_len=2048, layers=8, dtype="bf16"),
    }

    def build(self, cfg, plan):
        mixers = [SelfAttention(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, plan) if i == cfg.layers // 2 else
                  Mamba2Mixer(cfg.d_model, cfg.d_state, cfg.headdim, cfg.expand, cfg.ngroups, cfg.chunk_size, plan, i)
                  for i in range(cfg.layers)]
        return CausalLM(cfg.vocab_size, cfg.d_model, mixers, plan)

    def batch(self, cfg, device, generator):
        return token_batch(cfg.batch_size, cfg.seq_len, cfg.vocab_size, device, generator)

    def loss(self, model, batch):
        logits = model(batch["input_ids"])
        return F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten())

    def items_per_step(self, cfg):
        return cfg.batch_size * cfg.seq_len
