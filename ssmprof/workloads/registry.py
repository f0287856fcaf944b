"""The suite: every workload by name."""

from __future__ import annotations

from typing import Any

from ssmprof.errors import UnknownWorkload
from ssmprof.workloads import hf
from ssmprof.workloads.base import Workload
from ssmprof.workloads.graph import GraphMamba
from ssmprof.workloads.lm import GdnHybridLM, GdnLM, HybridLM, Mamba1LM, Mamba2LM, Mamba3LM, TransformerLM
from ssmprof.workloads.user import is_user_spec, load_user_workload
from ssmprof.workloads.vision import MambaVision

SUITE = (Mamba2LM(), HybridLM(), MambaVision(), GraphMamba(), TransformerLM(), Mamba1LM())
# The SSMs trained after the paper: outside the paper suite (whose profiling cost has a goal of its own), named with
# `ssmprof suite --workloads`; bundled reference runs where a GPU session profiled them (mamba3-lm, gdn-lm: H200).
NEXT = (Mamba3LM(), GdnLM(), GdnHybridLM())
WORKLOADS: dict[str, Workload[Any]] = {w.name: w for w in SUITE + NEXT}

DEFAULT_WORKLOAD = "mamba2-lm"
# `ssmprof workloads` lists these too: the suite's and the transformers models (`hf:<arch>`, workloads/hf.py)
LISTED: dict[str, Workload] = {**WORKLOADS, **hf.WORKLOADS}


def get_workload(name: str) -> Workload[Any]:
    """The suite's workload of this name, a transformers model (`hf:<arch>`, `workloads.hf`), or a user's named
    `file.py:Name` / `module:Name` (`workloads.user`); `hf:` first, since it has the shape of a module spec."""
    if name.startswith(hf.PREFIX):
        return hf.get(name)
    if name in WORKLOADS:
        return WORKLOADS[name]
    if is_user_spec(name):
        return load_user_workload(name, reserved=WORKLOADS)
    raise UnknownWorkload(f"unknown workload '{name}'; choose from: {', '.join(WORKLOADS)}, or your own as "
                          "path/to/file.py:Name or package.module:Name")
