"""Tensor (and data) parallel language models, on the real distributed code paths.

Which code runs. Mamba-2 layers are mamba-ssm's own `Mamba2(process_group=, sequence_parallel=)`: its
`in_proj` is a `ColumnParallelLinear`, its `out_proj` a `RowParallelLinear` (`mamba_ssm.distributed`), its
`ngroups` and heads split over the TP ranks. mamba-ssm has no tensor-parallel path for Mamba-1 (`Mamba`),
attention (`MHA` takes no process group in 2.3.2) or the MLP, so those are built here from the same
`mamba_ssm.distributed` parallel linears, sharded as Megatron-style TP shards them: heads / d_inner /
hidden split over ranks, column-parallel in, row-parallel out. Mamba-1 needs one more collective: its
`x_proj` contracts the sharded d_inner into dt, B and C, which every rank's scan needs whole, so its
output is all-reduced (forward, and its gradient backward: `AllReduceBothWays`). That all-reduce is what
Mamba-2 removed by producing B, C and dt from the block input (Dao & Gu 2024, section 8).

mamba-ssm's parallel linears and collectives are plain torch.distributed, so the same modules run on the
CPU over gloo; there the layers run the pure-torch references (`layers.mamba2_mixer_ref`, ...), which
read the per-rank sizes (the gated RMSNorm's group size from the local `ngroups`, as mamba-ssm's fused
path does; its unfused `self.norm` would use the global one).

Sequence parallelism (on by default, as in mamba-ssm): between layers each TP rank holds B*L/TP tokens of
the residual stream, flattened to (B*L/TP, d_model); column-parallel layers all-gather it, row-parallel
layers reduce-scatter their output. The embedding, norms and the tied LM head are replicated; with
sequence parallelism each rank sees only its tokens, so their gradients are all-reduced over the TP group
after backward (`finish_gradients`), as Megatron does for its sequence-parallel norms. Data parallelism
splits the batch over DP ranks and all-reduces every gradient over the DP group (one coalesced
all-reduce after backward, no bucketing or overlap: the cheap kind).

Data parallelism alone (TP 1) runs the single-GPU model's own layers (the fused Mamba-1 path included): no
collective inside a layer, only the gradient all-reduce after backward.

Rank layout: rank = dp_rank * tp + tp_rank, so a TP group is adjacent GPUs (one NVLink island).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Protocol, cast

import torch
import torch.distributed as dist
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ssmprof.errors import InvalidConfig
from ssmprof.kernels import KernelPlan, mamba_ssm, mamba_ssm_module
from ssmprof.workloads.layers import MLP, CausalLM, SelfAttention, mamba1_mixer_ref, mamba2_mixer_ref

# Layer kinds as the parallel models name them (run tables, predicted collective counts).
MAMBA2, MAMBA1, ATTENTION, MLP_KIND = "mamba2", "mamba1", "attention", "mlp"
LAYER_RANGE = "ssmprof/layer"  # profiler ranges "ssmprof/layer/<index>/<kind>" around each mixer, fwd and bwd


@dataclasses.dataclass(frozen=True)
class Parallelism:
    """How a run is spread: `tp` tensor-parallel ranks per model replica, `dp` replicas."""

    tp: int = 1
    dp: int = 1
    sequence_parallel: bool = True

    def __post_init__(self):
        # --tp 0 or --dp -1 would otherwise make a world of no ranks, run as one process and be reported as
        # the single-GPU run the user did not ask for
        if self.tp < 1 or self.dp < 1:
            raise InvalidConfig(f"--tp and --dp must be >= 1, got --tp {self.tp} --dp {self.dp}")
        # sequence parallelism splits the tokens over a TP group: data parallelism alone has none to split over
        if self.tp == 1:
            object.__setattr__(self, "sequence_parallel", False)

    @property
    def world_size(self) -> int:
        return self.tp * self.dp

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


@dataclasses.dataclass
class RankGroups:
    """One rank's process groups (built by `make_groups` on every rank, in the same order)."""

    parallelism: Parallelism
    rank: int
    tp_group: dist.ProcessGroup
    dp_group: dist.ProcessGroup

    @property
    def tp_rank(self) -> int:
        return self.rank % self.parallelism.tp

    @property
    def dp_rank(self) -> int:
        return self.rank // self.parallelism.tp


def make_groups(parallelism: Parallelism) -> RankGroups:
    """TP groups of adjacent ranks and DP groups across them; every rank creates every group."""
    rank, tp, dp = dist.get_rank(), parallelism.tp, parallelism.dp
    mine = {}
    for replica in range(dp):
        ranks = list(range(replica * tp, (replica + 1) * tp))
        group = dist.new_group(ranks)
        if rank in ranks:
            mine["tp"] = group
    for position in range(tp):
        ranks = list(range(position, tp * dp, tp))
        group = dist.new_group(ranks)
        if rank in ranks:
            mine["dp"] = group
    return RankGroups(parallelism, rank, mine["tp"], mine["dp"])


class AllReduceBothWays(torch.autograd.Function):
    """Sum of every rank's partial output, forward; the gradient of a sum every rank consumes differently
    (Mamba-1's dt, B, C feed each rank's own scan) is again a sum over ranks, backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _LayerSpan:
    """A profiler range opened by one autograd node and closed by another (a layer's backward)."""

    def __init__(self, name: str):
        self.name, self.handle = name, None

    def open(self):
        self.handle = torch.ops.profiler._record_function_enter_new(self.name, None)

    def close(self):
        if self.handle is not None:
            torch.ops.profiler._record_function_exit(self.handle)
            self.handle = None


class _OnBackward(torch.autograd.Function):
    """Identity whose backward calls `action` first: on a mixer's output it runs first in the layer's backward
    (open the layer's range there), on its input once every gradient of the layer has reached it (close it)."""

    @staticmethod
    def forward(ctx, x, action):
        ctx.action = action
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.action()
        return grad, None


class ShardedMixer(Protocol):
    """A tensor-parallel mixer: which of its single-GPU tensors it holds a part of (dim, part sizes)."""

    def shard_rules(self, cfg) -> dict[str, tuple[int, list[int]]]: ...


class ParallelMamba2(nn.Module):
    """mamba-ssm's `Mamba2` with its process group: fused path on the GPU, `mamba2_mixer_ref` on the CPU."""

    kind = MAMBA2

    def __init__(self, cfg, plan: KernelPlan, groups: RankGroups, layer_idx: int):
        super().__init__()
        self.reference = plan.device == "cpu"
        self.mamba = mamba_ssm().Mamba2(
            cfg.d_model, d_state=cfg.d_state, d_conv=4, expand=cfg.expand, headdim=cfg.headdim,
            ngroups=cfg.ngroups, chunk_size=cfg.chunk_size, layer_idx=layer_idx,
            use_mem_eff_path=plan.impl("conv1d") == "causal-conv1d-cuda",
            process_group=groups.tp_group, sequence_parallel=groups.parallelism.sequence_parallel)

    def forward(self, u, seqlen=None):
        return mamba2_mixer_ref(self.mamba, u, seqlen) if self.reference else self.mamba(u, seqlen=seqlen)

    def shard_rules(self, cfg) -> dict[str, tuple[int, list[int]]]:
        d_inner, bc = cfg.expand * cfg.d_model, cfg.ngroups * cfg.d_state
        heads = [d_inner // cfg.headdim]
        return {"mamba.in_proj.weight": (0, [d_inner, d_inner, bc, bc, heads[0]]),
                "mamba.conv1d.weight": (0, [d_inner, bc, bc]), "mamba.conv1d.bias": (0, [d_inner, bc, bc]),
                "mamba.dt_bias": (0, heads), "mamba.A_log": (0, heads), "mamba.D": (0, heads),
                "mamba.norm.weight": (0, [d_inner]), "mamba.out_proj.weight": (1, [d_inner])}


class ParallelMamba1(nn.Module):
    """Mamba-1 under TP, built here (mamba-ssm has no TP path for `Mamba`): mamba-ssm's `Mamba` at the
    per-rank d_inner with its in_proj / out_proj replaced by mamba-ssm's column- / row-parallel linears, and
    x_proj's output all-reduced. Runs mamba-ssm's unfused composition (conv1d, then the selective scan the
    plan picks: the CUDA kernel on a GPU): the fused `mamba_inner_fn` has no place for that all-reduce."""

    kind = MAMBA1

    def __init__(self, cfg, plan: KernelPlan, groups: RankGroups, layer_idx: int):
        super().__init__()
        distributed = mamba_ssm_module("distributed.tensor_parallel")
        tp, sp = groups.parallelism.tp, groups.parallelism.sequence_parallel
        self.plan, self.group = plan, groups.tp_group
        d_inner = cfg.expand * cfg.d_model
        self.mamba = mamba_ssm().Mamba(cfg.d_model, d_state=cfg.d_state, d_conv=4, expand=cfg.expand / tp,
                                       layer_idx=layer_idx)
        local_in, local_out = self.mamba.in_proj.weight, self.mamba.out_proj.weight
        self.mamba.in_proj = distributed.ColumnParallelLinear(cfg.d_model, 2 * d_inner, self.group, bias=False,
                                                              sequence_parallel=sp)
        self.mamba.out_proj = distributed.RowParallelLinear(d_inner, cfg.d_model, self.group, bias=False,
                                                            sequence_parallel=sp)
        with torch.no_grad():
            self.mamba.in_proj.weight.copy_(local_in)
            self.mamba.out_proj.weight.copy_(local_out)

    def forward(self, u, seqlen=None):
        conv = None
        if self.plan.impl("conv1d") == "causal-conv1d-cuda":
            from causal_conv1d import causal_conv1d_fn

            conv = causal_conv1d_fn
        return mamba1_mixer_ref(self.mamba, u, self.plan, seqlen,
                                reduce_x_dbl=lambda x: AllReduceBothWays.apply(x, self.group), conv=conv)

    def shard_rules(self, cfg) -> dict[str, tuple[int, list[int]]]:
        d_inner = [cfg.expand * cfg.d_model]
        return {"mamba.in_proj.weight": (0, d_inner * 2), "mamba.conv1d.weight": (0, d_inner),
                "mamba.conv1d.bias": (0, d_inner), "mamba.x_proj.weight": (1, d_inner),
                "mamba.dt_proj.weight": (0, d_inner), "mamba.dt_proj.bias": (0, d_inner),
                "mamba.A_log": (0, d_inner), "mamba.D": (0, d_inner), "mamba.out_proj.weight": (1, d_inner)}


class ParallelAttention(SelfAttention):
    """Self-attention with heads and KV heads split over the TP ranks (Megatron-style): qkv column-parallel,
    out_proj row-parallel (mamba-ssm's parallel linears)."""

    kind = ATTENTION

    def __init__(self, cfg, plan: KernelPlan, groups: RankGroups):
        tp, sp = groups.parallelism.tp, groups.parallelism.sequence_parallel
        distributed = mamba_ssm_module("distributed.tensor_parallel")
        super().__init__(cfg.d_model // tp, cfg.n_heads // tp, cfg.n_kv_heads // tp, plan)
        self.head_dim = cfg.d_model // cfg.n_heads
        width = (cfg.n_heads + 2 * cfg.n_kv_heads) * self.head_dim
        self.qkv = distributed.ColumnParallelLinear(cfg.d_model, width, groups.tp_group, bias=False,
                                                    sequence_parallel=sp)
        self.out_proj = distributed.RowParallelLinear(cfg.d_model, cfg.d_model, groups.tp_group, bias=False,
                                                      sequence_parallel=sp)

    def forward(self, x, seqlen=None):
        qkv = self.qkv(x)
        if seqlen is None:
            return self.out_proj(self.attend(qkv))
        out = self.attend(rearrange(qkv, "(b l) d -> b l d", l=seqlen))
        return self.out_proj(rearrange(out, "b l d -> (b l) d"))

    def shard_rules(self, cfg) -> dict[str, tuple[int, list[int]]]:
        q, kv = cfg.d_model, cfg.n_kv_heads * (cfg.d_model // cfg.n_heads)
        return {"qkv.weight": (0, [q, kv, kv]), "out_proj.weight": (1, [q])}


class ParallelMLP(MLP):
    """The MLP with its hidden width split over the TP ranks: fc1 column-parallel, fc2 row-parallel."""

    kind = MLP_KIND

    def __init__(self, cfg, groups: RankGroups):
        super().__init__(cfg.d_model, cfg.mlp_ratio * cfg.d_model // groups.parallelism.tp)
        distributed = mamba_ssm_module("distributed.tensor_parallel")
        sp, hidden = groups.parallelism.sequence_parallel, cfg.mlp_ratio * cfg.d_model
        self.fc1 = distributed.ColumnParallelLinear(cfg.d_model, hidden, groups.tp_group, bias=False,
                                                    sequence_parallel=sp)
        self.fc2 = distributed.RowParallelLinear(hidden, cfg.d_model, groups.tp_group, bias=False,
                                                 sequence_parallel=sp)

    def forward(self, x, seqlen=None):
        return super().forward(x)

    def shard_rules(self, cfg) -> dict[str, tuple[int, list[int]]]:
        hidden = [cfg.mlp_ratio * cfg.d_model]
        return {"fc1.weight": (0, hidden), "fc2.weight": (1, hidden)}


def build_mixer(kind: str, cfg, plan: KernelPlan, groups: RankGroups, layer_idx: int) -> nn.Module:
    if kind == MAMBA2:
        return ParallelMamba2(cfg, plan, groups, layer_idx)
    if kind == MAMBA1:
        return ParallelMamba1(cfg, plan, groups, layer_idx)
    if kind == ATTENTION:
        return ParallelAttention(cfg, plan, groups)
    return ParallelMLP(cfg, groups)


# A test knob: "RANK:MS" makes that global rank sleep MS milliseconds on its host before each layer's forward
# launch, a straggler planted on purpose, whose cost the cross-rank diagnosis (`analysis.step.ranks.late_rank`) must
# find: layers x MS per iteration, on that rank. Unset in every real measurement.
PLANT_DELAY_ENV = "SSMPROF_PLANT_DELAY"


def planted_delay_s(rank: int, setting: str | None = None) -> float:
    """The host delay (s) `PLANT_DELAY_ENV` plants before each layer on `rank` (0 where it names another rank or
    is unset)."""
    setting = os.environ.get(PLANT_DELAY_ENV, "") if setting is None else setting
    if not setting:
        return 0.0
    who, _, ms = setting.partition(":")
    if not (who.strip().isdigit() and ms.strip().replace(".", "", 1).isdigit()):
        raise InvalidConfig(f"{PLANT_DELAY_ENV} must be RANK:MS (e.g. 1:20), got '{setting}'")
    return float(ms) / 1e3 if int(who) == rank else 0.0


class ParallelCausalLM(CausalLM):
    """`CausalLM` with tensor-parallel mixers (same parameter names, so a single-GPU model's weights shard
    onto it: `load_sharded`). Each mixer sits in a `ssmprof/layer/<i>/<kind>` profiler range, forward and
    backward, so every collective is attributed to its layer. `single_mixers`: the single-GPU model's layers,
    which data parallelism alone (TP 1) runs instead of tensor-parallel ones."""

    def __init__(self, cfg, kinds: list[str], plan: KernelPlan, groups: RankGroups,
                 single_mixers: list[nn.Module] | None = None):
        self.groups, self.cfg = groups, cfg
        if groups.parallelism.tp == 1:
            if single_mixers is None:
                raise ValueError("data parallelism alone runs the single-GPU model's mixers: pass them")
            mixers = single_mixers
        else:
            mixers = [build_mixer(kind, cfg, plan, groups, i) for i, kind in enumerate(kinds)]
        super().__init__(cfg.vocab_size, cfg.d_model, mixers, plan)
        self.spans = [_LayerSpan(f"{LAYER_RANGE}/{i}/{kind}") for i, kind in enumerate(kinds)]
        self.planted_delay_s = planted_delay_s(dist.get_rank() if dist.is_initialized() else 0)

    @property
    def sequence_parallel(self) -> bool:
        return self.groups.parallelism.sequence_parallel

    def local_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """This rank's share of (B*L, ...) tokens under sequence parallelism."""
        tp = self.groups.parallelism.tp
        share = tokens.shape[0] // tp
        return tokens[self.groups.tp_rank * share:(self.groups.tp_rank + 1) * share]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seqlen = input_ids.shape[1] if self.sequence_parallel else None
        hidden, residual = self.embedding(input_ids), None
        if seqlen is not None:
            hidden = self.local_tokens(rearrange(hidden, "b l d -> (b l) d"))
        for layer, span in zip(self.blocks(), self.spans, strict=True):
            hidden, residual = layer.norm(hidden, residual, prenorm=True)
            hidden = _OnBackward.apply(hidden, span.close)
            if self.planted_delay_s:
                time.sleep(self.planted_delay_s)
            with torch.profiler.record_function(span.name):
                hidden = layer.mixer(hidden) if seqlen is None else layer.mixer(hidden, seqlen)
            hidden = _OnBackward.apply(hidden, span.open)
        return self.lm_head(self.norm_f(hidden, residual, prenorm=False))

    def local_batch(self, batch: dict) -> dict:
        """This DP replica's rows of the global batch (every rank draws the same global batch)."""
        dp, replica = self.groups.parallelism.dp, self.groups.dp_rank
        return {key: value.chunk(dp)[replica] for key, value in batch.items()}

    def loss(self, batch: dict) -> torch.Tensor:
        """Mean next-token loss over the whole global batch. Its value is the same on every rank; its
        gradient is this rank's own share (the collectives and `finish_gradients` complete the rest)."""
        labels = batch["labels"].flatten()
        if self.sequence_parallel:
            labels = self.local_tokens(labels)
        logits = self(batch["input_ids"]).reshape(labels.shape[0], -1).float()
        total = labels.numel() * (self.groups.parallelism.tp if self.sequence_parallel else 1)
        local = F.cross_entropy(logits, labels, reduction="sum") / total
        summed = local.detach().clone()
        if self.sequence_parallel:
            dist.all_reduce(summed, group=self.groups.tp_group)
        if self.groups.parallelism.dp > 1:
            dist.all_reduce(summed, group=self.groups.dp_group)
            summed /= self.groups.parallelism.dp
            local = local / self.groups.parallelism.dp
        return local + (summed - local.detach())

    def finish_gradients(self) -> None:
        """After backward: with sequence parallelism the replicated parameters (embedding / LM head, norms)
        saw only this rank's tokens, so their gradients are summed over the TP group; with DP every
        gradient is summed over the DP group. One coalesced all-reduce each."""
        if self.sequence_parallel and self.groups.parallelism.tp > 1:
            _all_reduce_coalesced([p.grad for p in self.replicated_parameters() if p.grad is not None],
                                  self.groups.tp_group)
        if self.groups.parallelism.dp > 1:
            _all_reduce_coalesced([p.grad for p in self.parameters() if p.grad is not None], self.groups.dp_group)

    def replicated_parameters(self) -> list[nn.Parameter]:
        sharded = {id(p) for block in self.blocks() for p in block.mixer.parameters()}
        return [p for p in self.parameters() if id(p) not in sharded and p.grad is not None]

    def local_part(self, single: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """This rank's part of a single-GPU `CausalLM`'s tensors (state dict or gradients), by parameter name."""
        tp, rank = self.groups.parallelism.tp, self.groups.tp_rank
        if tp == 1:
            return dict(single)
        rules = {f"layers.{i}.mixer.{name}": rule for i, block in enumerate(self.blocks())
                 for name, rule in cast(ShardedMixer, block.mixer).shard_rules(self.cfg).items()}
        return {name: shard(tensor, *rules[name], rank, tp) if name in rules else tensor
                for name, tensor in single.items()}

    def load_sharded(self, single: dict[str, torch.Tensor]) -> None:
        """Load a single-GPU `CausalLM`'s state dict, each sharded tensor cut to this rank's part."""
        self.load_state_dict(self.local_part(single))


def shard(tensor: torch.Tensor, dim: int, parts: list[int], rank: int, size: int) -> torch.Tensor:
    """This rank's part of a tensor made of consecutive `parts` along `dim` (e.g. Mamba-2's in_proj rows
    z, x, B, C, dt), each part split evenly over `size` ranks: the per-rank layout of mamba-ssm's TP."""
    pieces = torch.split(tensor, parts, dim=dim)
    return torch.cat([piece.chunk(size, dim=dim)[rank] for piece in pieces], dim=dim)


def _all_reduce_coalesced(grads: list[torch.Tensor], group) -> None:
    if not grads:
        return
    flat = torch._utils._flatten_dense_tensors(grads)
    dist.all_reduce(flat, group=group)
    for grad, synced in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads), strict=True):
        grad.copy_(synced)


# Below this the single bf16 model's distance from fp32 is not the scale of a comparison: a parallel model 1e-3
# from exact is right even where the single model happens to be 1e-5 from it (or, in fp32, exactly it). Twice it
# is the 3 % the GPU numerics tests allowed between the two bf16 models before the arbiter.
FP32_ARBITER_FLOOR = 1.5e-2


def numerics(workload, cfg, plan: KernelPlan, groups: RankGroups, device: torch.device) -> dict[str, float | str]:
    """The parallel model against the single-GPU one on a fixed batch, on this rank: both losses, and per parameter
    the gradient's relative error ||g_parallel - g_single|| / ||g_single|| (this rank's shards of the single model's
    gradients), its largest and where; beside it the same error between two backward passes of the single model
    itself (`grad_repeat_rel_err`: its kernels' run-to-run spread, e.g. atomics), the floor any comparison has.
    Both models from the same weights (the single model's, sharded); autocast as the run's dtype. Norms, not the
    largest element: over 10^8 elements the largest difference is an extreme of bf16 rounding, not a property.

    Arbiter: the single model in fp32 (autocast off, the same kernels). Where a parameter's gradient is a sum that
    cancels (a bias over 10^4 tokens), bf16 rounding alone moves it far, and two bf16 models disagree with each
    other without either being wrong. `grad_fp32_excess` is the largest, over parameters, of the parallel model's
    error against fp32 divided by the single bf16 model's own (floored at `FP32_ARBITER_FLOOR`): about 1 where the
    parallel model is as close to exact as the single model is, well above it where the parallel model is wrong;
    `grad_fp32_parameter`, `grad_fp32_rel_err` and `single_fp32_rel_err` say where and how far."""
    torch.manual_seed(0)
    with device:
        single = workload.build(cfg, plan)
        model = workload.build_parallel(cfg, plan, groups)
    model.load_sharded(single.state_dict())
    batch = workload.batch(cfg, device, torch.Generator().manual_seed(0))
    mixed = cfg.dtype != "fp32"

    def single_gradients(autocast: bool) -> tuple[float, dict[str, torch.Tensor]]:
        single.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=cfg.autocast_dtype(), enabled=autocast):
            reference = workload.loss(single, batch)
        reference.backward()
        return float(reference), model.local_part({name: p.grad for name, p in single.named_parameters()})

    single_loss, expected = single_gradients(mixed)
    _, repeated = single_gradients(mixed)
    exact = single_gradients(False)[1] if mixed else expected
    with torch.autocast(device.type, dtype=cfg.autocast_dtype(), enabled=mixed):
        loss = model.loss(model.local_batch(batch))
    loss.backward()
    model.finish_gradients()
    grads = dict(model.named_parameters())
    errors = {name: relative_error(p.grad, expected[name]) for name, p in grads.items()}
    worst = max(errors, key=lambda name: errors[name])
    parallel_exact = {name: relative_error(p.grad, exact[name]) for name, p in grads.items()}
    single_exact = {name: relative_error(expected[name], exact[name]) for name in grads}
    excess = {name: parallel_exact[name] / max(single_exact[name], FP32_ARBITER_FLOOR) for name in grads}
    arbitrated = max(excess, key=lambda name: excess[name])
    return {"single_loss": single_loss, "parallel_loss": float(loss.detach()), "grad_rel_err": errors[worst],
            "grad_worst_parameter": worst,
            "grad_repeat_rel_err": max(relative_error(repeated[name], expected[name]) for name in expected),
            "grad_fp32_excess": excess[arbitrated], "grad_fp32_parameter": arbitrated,
            "grad_fp32_rel_err": parallel_exact[arbitrated], "single_fp32_rel_err": single_exact[arbitrated]}


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    return float((value.float() - reference.float()).norm() / reference.float().norm().clamp_min(1e-30))
