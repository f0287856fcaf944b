"""What a workload is: a config dataclass, named presets, a model builder, a batch maker and a loss."""

from __future__ import annotations

import dataclasses
import typing
from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

import torch
from torch import nn

from ssmprof.errors import InvalidConfig, UnknownPreset
from ssmprof.kernels import KernelPlan

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


@dataclasses.dataclass(frozen=True)
class CommonConfig:
    """Fields every workload has; `ssmprof run` exposes them as named options."""

    batch_size: int
    seq_len: int
    layers: int
    dtype: str  # autocast dtype; parameters and optimizer state stay fp32 (mixed precision)

    def autocast_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


def check(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidConfig(message)


ConfigT = TypeVar("ConfigT", bound=CommonConfig)


class Workload(ABC, Generic[ConfigT]):
    """A workload over its own config dataclass `ConfigT`: its methods take the config its presets hold."""

    # The contract's attributes: a suite workload sets them on its class; a workload built at run time (a user's,
    # `workloads.user`; a transformers architecture, `workloads.hf`) on its instance, so none is a ClassVar.
    name: str
    description: str
    unit: str  # what throughput counts: "tokens" or "samples"
    ops: tuple[str, ...]  # kernel ops the model needs (see ssmprof.kernels.OPS)
    presets: dict[str, ConfigT]
    preset_notes: dict[str, str] = {}
    # why a training step cannot be captured as a CUDA graph (`harness.capture_refusal`); None: it can be tried
    capture_blocker: str | None = None

    # ---- configuration -------------------------------------------------------------------------
    def config(self, preset: str, overrides: dict[str, Any] | None = None) -> ConfigT:
        """The preset with overrides applied (values may be strings, as typed on the command line)."""
        if preset not in self.presets:
            raise UnknownPreset(f"unknown preset '{preset}' for {self.name}; choose from: {', '.join(self.presets)}")
        base = self.presets[preset]
        fields = {f.name: f for f in dataclasses.fields(base)}
        changes = {}
        for key, value in (overrides or {}).items():
            key = key.replace("-", "_")
            if key not in fields:
                raise InvalidConfig(f"{self.name} has no setting '{key}'; settings: {', '.join(fields)}")
            changes[key] = _coerce(key, value, fields[key], type(base))
        cfg = dataclasses.replace(base, **changes)
        self.validate(cfg)
        return cfg

    def validate(self, cfg: ConfigT) -> None:
        check(cfg.batch_size >= 1, f"batch size must be >= 1, got {cfg.batch_size}")
        check(cfg.seq_len >= 1, f"sequence length must be >= 1, got {cfg.seq_len}")
        check(cfg.layers >= 1, f"layers must be >= 1, got {cfg.layers}")
        check(cfg.dtype in DTYPES, f"dtype must be one of {', '.join(DTYPES)}, got '{cfg.dtype}'")

    @property
    def spec(self) -> str:
        """What `registry.get_workload` finds this workload by in any process and folder (a counter pass's child,
        a rank): the suite's name; a user's workload, the absolute `file.py:Name` or `module:Name` it came from."""
        return self.name

    @property
    def source(self) -> dict[str, str] | None:
        """Where a workload outside the suite was loaded from (run.json `workload.source`); None: the suite's."""
        return None

    def kernel_ops(self, cfg: ConfigT) -> tuple[str, ...]:
        """The kernel ops a run with these settings needs (`ops`: those of the default settings); a setting
        that swaps a layer's kernels (the hybrid's SSM layer, Mamba-3 MIMO) overrides this."""
        return self.ops

    def routes_tokens(self, cfg: ConfigT) -> bool:
        """Whether the model's launch configurations follow its weights: a mixture of experts sizes each expert's
        kernels by the tokens its router sends there, so a counter pass must run the traced iteration's weights,
        not those its own fewer steps reach (`harness.run_training`'s `save_state`)."""
        return False

    # ---- the training iteration ----------------------------------------------------------------
    @abstractmethod
    def build(self, cfg: ConfigT, plan: KernelPlan) -> nn.Module: ...

    @abstractmethod
    def batch(self, cfg: ConfigT, device: torch.device, generator: torch.Generator) -> dict: ...

    @abstractmethod
    def loss(self, model: nn.Module, batch: dict) -> torch.Tensor: ...

    @abstractmethod
    def items_per_step(self, cfg: ConfigT) -> int: ...


def _coerce(key: str, value: Any, field: dataclasses.Field, owner: type) -> Any:
    hint = typing.get_type_hints(owner)[field.name]
    if not isinstance(value, str):
        return value
    try:
        if hint is int:
            return int(value)
        if hint is float:
            return float(value)
        if hint is bool:
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(value)
            return value.lower() in ("true", "1")
    except ValueError:
        raise InvalidConfig(f"setting '{key}' expects {getattr(hint, '__name__', hint)}, got '{value}'") from None
    if value.lower() == "none" and type(None) in typing.get_args(hint):
        return None
    return value


def training_step_flops(workload: Workload[ConfigT], cfg: ConfigT, plan: KernelPlan) -> float:
    """About the FLOPs of one training step (3x the forward's matmul and convolution FLOPs, as torch's
    FlopCounterMode counts them), from a build on the meta device: no memory, no compute, about a second. A workload
    whose forward reads tensor values (a mixture of experts routing tokens) cannot run there and gives its own
    `step_flops(cfg)`."""
    if hasattr(workload, "step_flops"):
        return workload.step_flops(cfg)
    from torch.utils.flop_counter import FlopCounterMode

    meta = torch.device("meta")
    with meta:
        model = workload.build(cfg, plan)
    batch = workload.batch(cfg, meta, torch.Generator())
    with FlopCounterMode(display=False) as counter:
        workload.loss(model, batch)
    return 3.0 * counter.get_total_flops()
