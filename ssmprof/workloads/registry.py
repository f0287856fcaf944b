"""The suite: every workload by name."""

from __future__ import annotations

from ssmprof.errors import UnknownWorkload
from ssmprof.workloads.base import Workload
from ssmprof.workloads.graph import GraphMamba
from ssmprof.workloads.lm import HybridLM, Mamba1LM, Mamba2LM, TransformerLM
from ssmprof.workloads.vision import MambaVision

SUITE = (Mamba2LM(), HybridLM(), MambaVision(), GraphMamba(), TransformerLM(), Mamba1LM())
WORKLOADS: dict[str, Workload] = {w.name: w for w in SUITE}

DEFAULT_WORKLOAD = "mamba2-lm"


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownWorkload(f"unknown workload '{name}'; choose from: {', '.join(WORKLOADS)}") from None
