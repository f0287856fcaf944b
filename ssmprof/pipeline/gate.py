"""baseline and regress: a noise-aware kernel-efficiency baseline from repeated runs, and runs checked
against it. The thresholds are `analysis.regress`'s; the baseline file is `schema.Baseline`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ssmprof.analysis.compare import check_comparable
from ssmprof.analysis.regress import build_baseline, regressions
from ssmprof.errors import InvalidConfig
from ssmprof.pipeline.loading import load_run
from ssmprof.reports.gate import gate_junit, gate_markdown
from ssmprof.schema import Baseline, make_document, read_document, write_document


@dataclass(frozen=True)
class BaselineResult:
    path: Path
    runs: int
    rows: int  # kernel metrics in the baseline


@dataclass(frozen=True)
class GateResult:
    summary: str  # markdown: PASS/FAIL and every regressed kernel metric
    table: pd.DataFrame  # every baseline row with the current value, the allowed band, `regressed`, `missing`

    @property
    def regressed(self) -> bool:
        return bool(self.table["regressed"].any())


def baseline(runs: list[Path], output: Path) -> BaselineResult:
    """`ssmprof baseline`: runs of one workload (refused otherwise) into the baseline file `output`."""
    loaded = [load_run(path) for path in runs]
    for other in loaded[1:]:
        check_comparable(loaded[0].info, other.info)
    table = build_baseline([run.kernels for run in loaded])
    document = make_document(Baseline, workload=loaded[0].info["workload"], gpu=loaded[0].info["gpu"]["name"],
                             rows=table.to_dict("records"))
    return BaselineResult(write_document(document, output), len(loaded), len(table))


def regress(runs: list[Path], baseline_file: Path, junit: Path | None = None, summary: Path | None = None,
            min_effect: float = 0.05, sigmas: float = 3.0, min_time_ns: float = 1000,
            min_impact: float = 0.001) -> GateResult:
    """`ssmprof regress`: every run against the baseline (runs of another workload are refused); the markdown
    summary, and the JUnit XML, also written where asked."""
    document = read_document(Baseline, baseline_file)
    table, results = document.table(), []
    for path in runs:
        run = load_run(path)
        if run.info["workload"]["name"] != document.workload.name:
            raise InvalidConfig(f"{path} is a {run.info['workload']['name']} run, the baseline is of "
                                f"{document.workload.name}")
        results.append(regressions(table, run.kernels, min_effect, sigmas, min_time_ns, min_impact))
    checked = pd.concat(results, ignore_index=True)
    result = GateResult(gate_markdown(checked), checked)
    if summary is not None:
        summary.write_text(result.summary)
    if junit is not None:
        junit.write_text(gate_junit(checked))
    return result
