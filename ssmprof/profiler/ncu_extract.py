"""Read an Nsight Compute report into a frame: the only module that imports `ncu_report`."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from ssmprof.errors import SsmprofError
from ssmprof.profiler.markers import NVTX_DOMAIN, PHASES
from ssmprof.profiler.ncu import column_metrics
from ssmprof.profiler.timeline import short_kernel_name


def read_report(path: Path, chip: str = "gh100", group: str = "counters",
                columns: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per profiled kernel, in profiling order: names, phase, 3-D grid and block, shared memory per
    block, and the columns of the metric group the pass collected (`ncu.column_metrics(chip, group)`; NaN
    only for columns the chip has no counter for). A metric the report lacks is an error, not NaN: it means
    the report was collected with another metric set. `columns` reads only those of the group (a report
    recorded with an earlier, smaller set; the others stay NaN)."""
    try:
        import ncu_report
    except ImportError as exc:
        raise SsmprofError(f"the ncu-report package is missing ({exc}): run `make install`") from None
    try:
        context = ncu_report.load_report(str(path))
    except Exception as exc:  # the SWIG binding raises plain Exceptions for unreadable files
        raise SsmprofError(f"cannot read Nsight Compute report {path}: {exc}") from None
    expressions = column_metrics(chip, group)
    if columns is not None:
        expressions = {c: e if c in set(columns) else None for c, e in expressions.items()}
    rows = []
    for r in range(context.num_ranges()):
        profiled_range = context.range_by_idx(r)
        for a in range(profiled_range.num_actions()):
            action = profiled_range.action_by_idx(a)
            value = _reader(action, path)
            full = action.name(ncu_report.IAction.NameBase_DEMANGLED)
            row = {
                "kernel_name": short_kernel_name(full),
                "kernel_name_full": full,
                "phase": _phase(action.nvtx_state()),
                **{f"grid_{d}": int(value(f"launch__grid_dim_{d}")) for d in "xyz"},
                **{f"block_{d}": int(value(f"launch__block_dim_{d}")) for d in "xyz"},
                "shared_mem_bytes": int(value("launch__shared_mem_per_block_static")
                                        + value("launch__shared_mem_per_block_dynamic")),
            }
            row.update({column: sum(value(m) for m in expression.split("+")) if expression else float("nan")
                        for column, expression in expressions.items()})
            row.update({column: _bookkeeping(action, metric) for column, metric in REPLAY_METRICS.items()})
            rows.append(row)
    return pd.DataFrame(rows)


# What the replay of a launch cost, from Nsight Compute's own bookkeeping (in every report, whatever was asked
# for; not counters, so absent ones stay NaN): its passes, and the device memory it saved and restored per
# pass. In the H100 join fixture every launch took 14 passes, each restoring all 6.17 GiB the process had
# allocated (the caching allocator's pool), not the kernel's working set: the cost of a profiled launch grows
# with the workload's memory and the metric set's passes.
REPLAY_METRICS = {"replay_passes": "profiler__replayer_passes",
                  "replay_bytes_per_pass": "profiler__replayer_bytes_mem_backed_up.avg"}


def _bookkeeping(action, metric: str) -> float:
    found = action.metric_by_name(metric)
    return float(found.as_double()) if found is not None else float("nan")


def _reader(action, path: Path):
    def value(metric: str) -> float:
        found = action.metric_by_name(metric)
        if found is None:
            raise SsmprofError(f"{path}: metric {metric} is not in the report (collected with another metric set)")
        return float(found.as_double())

    return value


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
