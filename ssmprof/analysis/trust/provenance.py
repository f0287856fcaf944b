"""Provenance against the timeline: whether the fused kernels a run's provenance names are the kernels it launched.

The provenance is decided before the run (the kernel plan; for `hf:` workloads, what transformers bound at import),
the timeline records what ran. They disagree where a library takes another path at run time than the one it was
bound to (transformers' mixers take the fused path only in training without a cache), so a GPU run's report says
so rather than characterizing kernels its provenance does not name.
"""

from __future__ import annotations

import pandas as pd

from ssmprof.kernels import FALLBACK_IMPLS, FUSED_KERNEL_NAMES, FUSED_KERNELS


def _launches_of(op: str, kernel_names: pd.Series) -> int:
    stems = FUSED_KERNELS[op]
    whole = FUSED_KERNEL_NAMES.get(op, ())
    return int(kernel_names.map(lambda name: name in whole or any(stem in name for stem in stems)).sum())


def provenance_mismatches(provenance: dict[str, str], kernel_names: pd.Series, on_gpu: bool) -> list[str]:
    """One sentence per op whose provenance the GPU timeline contradicts: a fallback with launches of the op's fused
    kernels, or a fused implementation with none. CPU runs launch no GPU kernels and are not checked."""
    if not on_gpu:
        return []
    notes = []
    for op, described in provenance.items():
        if op not in FUSED_KERNELS:
            continue
        launches = _launches_of(op, kernel_names)
        fallback = str(described).startswith(FALLBACK_IMPLS)
        if fallback and launches:
            notes.append(f"kernel provenance says {op} ran '{described}', but the timeline has {launches} launches "
                         f"of its fused kernels ({', '.join(FUSED_KERNELS[op])})")
        elif not fallback and not launches:
            notes.append(f"kernel provenance says {op} ran '{described}', but the timeline has no launch of its "
                         f"fused kernels ({', '.join(FUSED_KERNELS[op])}): a fallback path ran")
    return notes
