"""`ssmprof doctor`: the environment a run here would record (`profiler.environment`: software versions and the
GPU), and which fused kernels can run (`kernels.Availability`), so that what doctor shows is what run.json says."""

from __future__ import annotations

from dataclasses import dataclass

from ssmprof.kernels import Availability
from ssmprof.profiler.environment import gpu_properties, stack_report


@dataclass(frozen=True)
class Checkup:
    """What doctor shows: the stack's versions (`stack_report`: a package whose CUDA extension is not built says
    so), the GPU as run.json records it ({} without one) and the kernels' availability."""

    versions: dict[str, str | None]
    gpu: dict
    kernels: Availability


def doctor() -> Checkup:
    """The software stack, the GPU and the fused kernels of this machine."""
    return Checkup(versions=stack_report(), gpu=gpu_properties(), kernels=Availability.probe())
