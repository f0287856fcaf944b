"""Read an Nsight Compute report into a frame: the only module that imports `ncu_report`."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from ssmprof.errors import SsmprofError
from ssmprof.profiler.markers import NVTX_DOMAIN, PHASES
from ssmprof.profiler.ncu_argv import column_metrics
from ssmprof.profiler.timeline import short_kernel_name


def read_report(path: Path, chip: str = "gh100", group: str = "counters",
                columns: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per profiled kernel, in profiling order: names, phase, 3-D grid and block, shared memory per
    block, and the columns of the metric group the pass collected (`ncu_argv.column_metrics(chip, group)`; NaN
    only for columns the chip has no counter for). A metric the report lacks is an error, not NaN: it means
    the report was collected with another metric set. `columns` reads only those of the group (a report
    recorded with an earlier, smaller set; the others stay NaN)."""
    ncu_report, context = _load(path)
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


def _load(path: Path):
    """(the ncu_report module, the loaded report); a missing package or an unreadable file is one line."""
    try:
        import ncu_report
    except ImportError as exc:
        raise SsmprofError(f"the ncu-report package is missing ({exc}): run `make install`") from None
    try:
        return ncu_report, ncu_report.load_report(str(path))
    except Exception as exc:  # the SWIG binding raises plain Exceptions for unreadable files
        raise SsmprofError(f"cannot read Nsight Compute report {path}: {exc}") from None


# Nsight Compute's rule message types as its details page prints them; the two SpeedOfLight throughputs
# `analysis.limits.limiters.ncu_verdicts` weighs a "high throughput" bottleneck by.
RULE_TYPES = {0: "", 1: "INF", 2: "OPT", 3: "WRN", 4: "ERR"}
SOL_THROUGHPUTS = {"Memory Throughput": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
                   "Compute (SM) Throughput": "sm__throughput.avg.pct_of_peak_sustained_elapsed"}


def read_rule_results(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(section throughputs, rule results) of a report collected with `--apply-rules yes`, in the frames
    `parse_details` gives for the details page, launch_id being the launch's place in the report."""
    ncu_report, context = _load(path)
    metrics, rules = [], []
    launch = 0
    for r in range(context.num_ranges()):
        profiled_range = context.range_by_idx(r)
        for a in range(profiled_range.num_actions()):
            action = profiled_range.action_by_idx(a)
            kernel = short_kernel_name(action.name(ncu_report.IAction.NameBase_DEMANGLED))
            for name, metric in SOL_THROUGHPUTS.items():
                found = action.metric_by_name(metric)
                metrics.append({"launch_id": launch, "kernel_name": kernel, "section": "SpeedOfLight",
                                "metric": name, "unit": "%",
                                "value": float(found.as_double()) if found is not None else float("nan")})
            for result in action.rule_results_as_dicts():
                message, speedup = result["rule_message"], result.get("speedup_estimation") or {}
                rules.append({"launch_id": launch, "kernel_name": kernel, "section": result["section_identifier"],
                              "rule": result["rule_identifier"], "rule_type": RULE_TYPES.get(message["type"], ""),
                              "description": f"{message['title']} {message['message']}".strip(),
                              "speedup_type": str(speedup.get("type", "")),
                              "speedup_pct": float(speedup.get("speedup", float("nan")))})
            launch += 1
    return pd.DataFrame(metrics), pd.DataFrame(rules)


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


# The details page as CSV (`ncu_argv.details_argv`): its columns, by what they hold. A row is a section metric where
# "Metric Name" is set and a rule result where "Rule Name" is; a layout that repeats the rule on its section's
# metric rows gives the same results once duplicates are dropped. The estimated speedup came in later versions.
DETAILS_COLUMNS = {"ID": "launch_id", "Kernel Name": "kernel_name_full", "Section Name": "section",
                   "Metric Name": "metric", "Metric Unit": "unit", "Metric Value": "value", "Rule Name": "rule",
                   "Rule Type": "rule_type", "Rule Description": "description",
                   "Estimated Speedup Type": "speedup_type", "Estimated Speedup": "speedup_pct"}
_REQUIRED = ("ID", "Kernel Name", "Section Name", "Metric Name", "Metric Value", "Rule Name", "Rule Type",
             "Rule Description")


def parse_details(text: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(section metrics, rule results) of a details-page CSV. Metrics: launch_id, kernel_name, section, metric,
    unit, value (a number, NaN where the value is text). Rules: launch_id, kernel_name, section, rule, rule_type
    (OPT, WRN, INF, ERR), description, speedup_type, speedup_pct (NaN where not estimated)."""
    lines = [line for line in text.splitlines() if not line.startswith("==")]  # ncu's own ==PROF== / ==WARNING==
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    missing = [c for c in _REQUIRED if not rows or c not in rows[0]]
    if missing:
        found = ", ".join(rows[0]) if rows else "no rows"
        raise SsmprofError(f"the details page has no {', '.join(missing)} column (columns: {found}): this Nsight "
                           "Compute prints rule results another way")
    frame = pd.DataFrame(rows).rename(columns=DETAILS_COLUMNS).reindex(columns=list(DETAILS_COLUMNS.values()))
    frame["launch_id"] = frame["launch_id"].astype(int)
    frame["kernel_name"] = frame["kernel_name_full"].map(short_kernel_name)
    keys = ["launch_id", "kernel_name", "section"]
    metrics = frame[frame["metric"].fillna("") != ""][[*keys, "metric", "unit", "value"]].drop_duplicates()
    metrics["value"] = pd.to_numeric(metrics["value"].str.replace(",", ""), errors="coerce")
    rules = frame[frame["rule"].fillna("") != ""][[*keys, "rule", "rule_type", "description", "speedup_type",
                                                   "speedup_pct"]].drop_duplicates()
    rules["speedup_pct"] = pd.to_numeric(rules["speedup_pct"].str.replace(",", ""), errors="coerce")
    return metrics.reset_index(drop=True), rules.reset_index(drop=True)


def read_verdict_inputs(path: Path, chip: str = "gh100") -> pd.DataFrame:
    """What `analysis.limits.limiters` needs, one row per launch of a report that holds both the counter and the stall
    metric groups (`ncu_argv.rules_argv`), in profiling order with its `launch_id` (the details page's ID); the
    launch's own ncu duration stands for its time (no timeline)."""
    counters = read_report(path, chip, "counters")
    stalls = read_report(path, chip, "stalls")
    frame = counters.join(stalls[[c for c in stalls.columns if c not in counters.columns]])
    frame.insert(0, "launch_id", range(len(frame)))
    frame["duration_ns"] = frame["ncu_duration_ns"]
    return frame
