"""The suite: every workload by name."""

from __future__ import annotations

from typing import Any

from ssmprof.errors import UnknownWorkload
from ssmprof.workloads.base import Workload
from ssmprof.workloads.graph import GraphMamba
from ssmprof.workloads.lm import GdnHybridLM, GdnLM, HybridLM, Mamba1LM, Mamba2LM, Mamba3LM, TransformerLM
from ssmprof.workloads.vision import MambaVision

SUITE = (Mamba2LM(), HybridLM(), MambaVision(), GraphMamba(), TransformerLM(), Mamba1LM())
# The SSMs trained after the paper: outside the paper suite (whose profiling cost has a goal of its own), named with
# `ssmprof suite --workloads`; bundled reference runs where a GPU session profiled them (mamba3-lm, gdn-lm: H200).
NEXT = (Mamba3LM(), GdnLM(), GdnHybridLM())
WORKLOADS: dict[str, Workload[Any]] = {w.name: w for w in SUITE + NEXT}

DEFAULT_WORKLOAD = "mamba2-lm"


def get_workload(name: str) -> Workload[Any]:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownWorkload(f"unknown workload '{name}'; choose from: {', '.join(WORKLOADS)}") from None
