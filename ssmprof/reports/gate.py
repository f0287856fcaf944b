"""Regression-gate outputs: a markdown summary (CI step summaries) and JUnit XML (CI test panels), from the
checks of `analysis.change.gate` (one frame per gated run)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from xml.etree import ElementTree as ET

import pandas as pd

from ssmprof.analysis.change.gate import Thresholds
from ssmprof.schema import Baseline

SHAPE = ("config changed", "new kernel", "removed kernel")


@dataclass(frozen=True)
class RunVerdict:
    name: str
    checks: pd.DataFrame  # `analysis.change.gate.regressions` of this run
    notes: list[str] = field(default_factory=list)  # provenance: what differs from the baseline's runs

    @property
    def regressed(self) -> bool:
        return bool(self.checks["regressed"].any())


def label(row) -> str:
    """What a check is of: "total", a phase, a category, or a kernel (with its launch configuration)."""
    if row.check == "total":
        return "total kernel time"
    if row.check == "phase":
        return f"phase {row.phase}"
    if row.check == "category":
        return f"category {row.category}"
    if row.check == "step":
        return {"step_ms": "step time", "host_wait_ms": "GPU waiting for the host"}.get(row.metric, row.metric)
    if row.check == "shared GPU":
        return "the run's GPU"
    where = f"{row.kernel_name} [{row.phase}, {row.launch_op or 'op unknown'}"
    if row.check in SHAPE or row.scope == "site":  # a site: all its launch configurations
        return where + "]"
    return (where + f", grid {row.grid_x}x{row.grid_y}x{row.grid_z}, "
            f"block {row.block_x}x{row.block_y}x{row.block_z}]")


def _value(metric: str, value: float) -> str:
    if pd.isna(value):
        return "-"
    if metric in ("time_ns", "time_per_launch_ns"):
        return f"{value / 1000:,.1f} us"
    if metric.endswith("_ms"):
        return f"{value:,.1f} ms"
    if metric == "gpu_sharing":
        return "shared"
    if metric == "flop_per_s":
        return f"{value / 1e12:.3g} TFLOP/s"
    return f"{value:.3g} %"


def _change(row) -> str:
    if row.median:
        return f"{_value(row.metric, row.worse_by)} worse ({100 * row.worse_by / abs(row.median):+.1f} %)"
    return f"{_value(row.metric, row.worse_by)} worse"


def _cost(row) -> str:
    """The share of the run's kernel time a change costs; for a rate, the share its kernel takes; for the step, of
    the step time."""
    if row.check == "step":
        return f"{100 * row.impact:.1f} % of the step"
    if row.check == "shared GPU":
        return "-"
    if pd.isna(row.impact):
        return f"(kernel: {100 * row.kernel_share:.2f} %)"
    return f"{100 * row.impact:.2f} %"


def _table(rows: pd.DataFrame) -> list[str]:
    lines = ["| check | of | metric | baseline | now | change | allowed | cost, of kernel time | |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows.itertuples():
        lines.append(f"| {r.check} | {label(r)} | {r.metric} | {_value(r.metric, r.median)} | "
                     f"{_value(r.metric, r.current)} | {r.note or _change(r)} | {_value(r.metric, r.allowed)} | "
                     f"{_cost(r)} | {'FAIL' if r.regressed else 'ok'} |")
    return lines


def gate_markdown(verdicts: list[RunVerdict], baseline: Baseline | None, thresholds: Thresholds) -> str:
    """The summary: PASS/FAIL, per run its regressions and changes of shape; a run without a baseline yet (a new
    history) passes with the one line saying so (its verdict's note)."""
    failed = [v for v in verdicts if v.regressed]
    t = thresholds
    lines = [f"## ssmprof regress: {'FAIL' if failed else 'PASS'}", ""]
    if baseline is not None:
        source = baseline.source
        lines += [f"Baseline: {len(source.runs)} runs of {baseline.workload.name} ({baseline.workload.preset}) on "
                  f"{source.gpu}. Thresholds: {100 * t.min_effect:g} % per kernel, {100 * t.aggregate_effect:g} % "
                  f"for totals, phases and categories, {t.sigmas:g} spreads, {t.min_time_ns / 1000:g} us per "
                  f"launch, {100 * t.min_impact:g} % of kernel time.", ""]
    for verdict in verdicts:
        checks = verdict.checks
        if checks.empty:
            lines += [f"### {verdict.name}: PASS (not gated)", ""] + [f"- {note}" for note in verdict.notes] + [""]
            continue
        regressed = checks[checks["regressed"]]
        judged = checks[checks["judged"]]
        total = checks[checks["check"] == "total"].iloc[0]
        lines += [f"### {verdict.name}: {'FAIL' if verdict.regressed else 'PASS'}", "",
                  f"{len(regressed)} regressions in {len(judged)} checks; total kernel time "
                  f"{total['median'] / 1e6:.2f} -> {total['current'] / 1e6:.2f} ms "
                  f"({100 * total['worse_by'] / total['median']:+.1f} %).", ""]
        lines += [f"- note: {note}" for note in verdict.notes]
        efficiency = checks[checks["check"] == "efficiency"]
        unjudged = efficiency[~efficiency["judged"]]
        if len(efficiency) == 0:
            lines.append("- efficiency (DRAM %, FLOP/s, hit rates): not judged: the baseline has no counters "
                         "that passed their self-checks")
        elif len(unjudged):
            why = unjudged["note"].value_counts()
            lines.append(f"- efficiency: {len(unjudged)} of {len(efficiency)} checks not judged (" +
                         "; ".join(f"{n} x {reason.removeprefix('not judged: ')}" for reason, n in why.items()) + ")")
        if verdict.notes or len(efficiency) == 0 or len(unjudged):
            lines.append("")
        if len(regressed):
            lines += ["#### Regressions", ""] + _table(regressed) + [""]
        shape = checks[checks["check"].isin(SHAPE) & ~checks["regressed"]]
        if len(shape):
            lines += ["#### Changes of shape below the thresholds", ""] + _table(shape) + [""]
    return "\n".join(lines).rstrip() + "\n"


def gate_junit(verdicts: list[RunVerdict]) -> str:
    """One testsuite per run; a testcase per check; failures for regressions, skipped for checks not judged."""
    suites = ET.Element("testsuites", name="ssmprof.regress")
    for verdict in verdicts:
        checks = verdict.checks
        suite = ET.SubElement(suites, "testsuite", name=f"ssmprof.regress.{verdict.name}", tests=str(len(checks)),
                              failures=str(int(checks["regressed"].sum())),
                              skipped=str(int((~checks["judged"]).sum())))
        if checks.empty:  # no baseline yet: one skipped case says so
            suite.set("tests", "1")
            suite.set("skipped", "1")
            case = ET.SubElement(suite, "testcase", classname="baseline", name="not gated")
            ET.SubElement(case, "skipped", message="; ".join(verdict.notes))
        for row in checks.itertuples():
            where = label(row) if row.check in ("total", "phase", "category") else f"{row.check}: {label(row)}"
            case = ET.SubElement(suite, "testcase", classname=where, name=row.metric)
            if not row.judged:
                ET.SubElement(case, "skipped", message=row.note)
            elif row.regressed:
                failure = ET.SubElement(case, "failure", message=row.note or f"{row.metric} {_change(row)} (allowed "
                                                                             f"{_value(row.metric, row.allowed)})")
                failure.text = f"baseline median {row.median:.6g}, now {row.current:.6g}"
    suites.set("failures", str(sum(int(v.checks["regressed"].sum()) for v in verdicts)))
    return ET.tostring(suites, encoding="unicode")


# Bencher Metric Format: {benchmark: {measure: {value, lower_value, upper_value}}}; the names a tracking service
# keys its series on
BMF_MEASURES = {"step_ms": ("step-time", 1.0), "host_wait_ms": ("host-wait", 1.0),
                "time_ns": ("kernel-time-ms", 1e-6), "time_per_launch_ns": ("time-per-launch-us", 1e-3)}


def bencher_metrics(runs: list[tuple[str, pd.DataFrame]]) -> str:
    """The runs' step time, host wait, total and per-category kernel time, and every kernel's time per launch (with
    their 95 % intervals where known) in Bencher Metric Format; `runs`: (name, `analysis.change.history.run_rows`). The
    benchmark is "<run>/<what>" (one run's benchmarks never collide with another's)."""
    document: dict[str, dict] = {}
    for name, rows in runs:
        picked = rows[(rows["scope"].isin(["step", "total", "category"]) & rows["metric"].isin(
            ["step_ms", "host_wait_ms", "time_ns"])) | ((rows["scope"] == "kernel") &
                                                       (rows["metric"] == "time_per_launch_ns"))]
        for row in picked.itertuples():
            measure, scale = BMF_MEASURES[row.metric]
            what = {"step": "step", "total": "total", "category": f"category/{row.category}"}.get(
                row.scope, f"kernel/{row.kernel_name} [{row.phase}, grid {row.grid_x}x{row.grid_y}x{row.grid_z}, "
                           f"block {row.block_x}x{row.block_y}x{row.block_z}]")
            value = {"value": float(row.value) * scale}
            if not pd.isna(row.low):
                value.update(lower_value=float(row.low) * scale, upper_value=float(row.high) * scale)
            document.setdefault(f"{name}/{what}", {})[measure] = value
    return json.dumps(document, indent=1, sort_keys=True) + "\n"

