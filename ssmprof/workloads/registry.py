"""The suite: every workload by name."""

from __future__ import annotations

from ssmprof.errors import UnknownWorkload
from ssmprof.workloads.base import Workload
from ssmprof.workloads.graph import GraphMamba
from ssmprof.workloads.lm import GdnHybridLM, GdnLM, HybridLM, Mamba1LM, Mamba2LM, Mamba3LM, TransformerLM
from ssmprof.workloads.vision import MambaVision

SUITE = (Mamba2LM(), HybridLM(), MambaVision(), GraphMamba(), TransformerLM(), Mamba1LM())
# Workloads not (yet) in the default suite: no bundled reference runs; `ssmprof suite --workloads` names them.
# Once a GPU session has profiled them (scripts/gpu_check.sh next), they move into SUITE.
NEXT = (Mamba3LM(), GdnLM(), GdnHybridLM())
WORKLOADS: dict[str, Workload] = {w.name: w for w in SUITE + NEXT}

DEFAULT_WORKLOAD = "mamba2-lm"


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownWorkload(f"unknown workload '{name}'; choose from: {', '.join(WORKLOADS)}") from None
