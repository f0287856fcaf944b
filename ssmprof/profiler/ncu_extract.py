"""Read an Nsight Compute report into a frame: the only module that imports `ncu_report`."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ssmprof.errors import SsmprofError
from ssmprof.profiler.markers import NVTX_DOMAIN, PHASES
from ssmprof.profiler.ncu import LAUNCH_METRICS
from ssmprof.profiler.timeline import short_kernel_name
from ssmprof.schema import COUNTER_METRICS


def read_report(path: Path) -> pd.DataFrame:
    """One row per profiled kernel, in profiling order: name, phase, grid/block size, counter columns."""
    try:
        import ncu_report
    except ImportError as exc:
        raise SsmprofError(f"the ncu-report package is missing ({exc}): run `make install`") from None
    try:
        context = ncu_report.load_report(str(path))
    except Exception as exc:  # the SWIG binding raises plain Exceptions for unreadable files
        raise SsmprofError(f"cannot read Nsight Compute report {path}: {exc}") from None
    rows = []
    for r in range(context.num_ranges()):
        profiled_range = context.range_by_idx(r)
        for a in range(profiled_range.num_actions()):
            action = profiled_range.action_by_idx(a)
            full = action.name(ncu_report.IAction.NameBase_DEMANGLED)
            row = {
                "kernel_name": short_kernel_name(full),
                "kernel_name_full": full,
                "phase": _phase(action.nvtx_state()),
                "grid_size": _value(action, LAUNCH_METRICS[0]),
                "block_size": _value(action, LAUNCH_METRICS[1]),
            }
            row.update({column: _value(action, metric) for column, (metric, _, _) in COUNTER_METRICS.items()})
            rows.append(row)
    return pd.DataFrame(rows)


def _value(action, metric: str) -> float:
    found = action.metric_by_name(metric)
    if found is None:
        return math.nan
    return float(found.as_double())


def _phase(state) -> str:
    """The harness phase from the NVTX start/end ranges open at launch (our domain only)."""
    if state is None:
        return "other"
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        if domain.name() == NVTX_DOMAIN:
            for name in domain.start_end_ranges():
                if name in PHASES:
                    return name
    return "other"
