"""baseline and regress: a baseline from repeated runs of one configuration, and runs gated against it.
The checks and thresholds are `analysis.change.gate`'s; the baseline file is `schema.Baseline`; the markdown and
JUnit are `reports.gate`'s."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ssmprof.analysis.change.compare import changed_entries
from ssmprof.analysis.change.gate import (
    Thresholds,
    build_baseline,
    build_step_baseline,
    compare,
    judge,
    step_checks,
)
from ssmprof.analysis.change.history import run_rows, step_rows
from ssmprof.errors import InvalidConfig, SsmprofError
from ssmprof.history_store import Snapshot, snapshot
from ssmprof.pipeline.history import check_history, recent_runs, refuse_repeated, rolling_baseline
from ssmprof.pipeline.loading import load_run
from ssmprof.pipeline.outputs import check_file, write_text
from ssmprof.reports.gate import RunVerdict, bencher_metrics, gate_junit, gate_markdown
from ssmprof.schema import Baseline, BaselineSource, Run, RunInfo, make_document, read_document, write_document


class IncomparableBaseline(SsmprofError):
    pass


@dataclass(frozen=True)
class BaselineResult:
    path: Path
    runs: int
    rows: int  # measurements in the baseline


@dataclass(frozen=True)
class GateResult:
    summary: str  # markdown: PASS/FAIL, every regression, every change of shape
    table: pd.DataFrame  # every check of every run (`run`), with `regressed` and `judged`

    @property
    def regressed(self) -> bool:
        return bool(self.table["regressed"].any())


def thresholds(**given: float | None) -> Thresholds:
    """The default thresholds, with those given (not None) instead. A negative one is refused: every threshold is
    a smallest change that counts, and below zero the gate would pass or fail on noise with no warning."""
    chosen = {name: value for name, value in given.items() if value is not None}
    negative = [f"--{name.replace('_', '-')} {value:g}" for name, value in chosen.items() if value < 0]
    if negative:
        raise InvalidConfig(f"thresholds must be >= 0, got {', '.join(negative)}")
    return Thresholds(**chosen)


def source_of(info: RunInfo, runs: list[str]) -> BaselineSource:
    """Where a run was measured, as a baseline records it."""
    return BaselineSource(gpu=info.gpu.name, driver=info.gpu.clocks.driver,
                          host=info.host.model_dump(exclude_unset=True) or None, versions=info.versions, runs=runs)


def baseline(runs: list[Path], output: Path) -> BaselineResult:
    """`ssmprof baseline`: repeated runs of one workload, config, GPU and software into the baseline file."""
    check_file(output, "--output")
    refuse_repeated(runs)  # one run twice would be a baseline with zero noise
    loaded = [load_run(path) for path in runs]
    first = loaded[0]
    for path, other in zip(runs[1:], loaded[1:], strict=True):
        differences = {"workload": (first.info.workload.name, other.info.workload.name),
                       "GPU": (first.info.gpu.name, other.info.gpu.name),
                       "library versions": (first.info.versions, other.info.versions)}
        for what, (a, b) in differences.items():
            if a != b:
                raise IncomparableBaseline(f"{path} differs from {runs[0]} in {what} ({a} vs {b}): a baseline is "
                                           "made of reruns of one configuration")
        configs = first.info.workload.config, other.info.workload.config
        if configs[0] != configs[1]:
            raise IncomparableBaseline(f"{path} differs from {runs[0]} in its config ({changed_entries(*configs)}): "
                                       "a baseline is made of reruns of one configuration")
    table = pd.concat([build_baseline([run.kernels for run in loaded]),
                       build_step_baseline([step_rows(run.info, run.kernels) for run in loaded])], ignore_index=True)
    document = make_document(Baseline, workload=first.info.workload,
                             source=source_of(first.info, [Path(p).name for p in runs]),
                             rows=table.to_dict("records"))
    return BaselineResult(write_document(document, output), len(loaded), len(table))


def provenance_notes(document: Baseline, info: RunInfo, path: Path, allow_different_gpu: bool = False,
                     allow_different_config: bool = False) -> list[str]:
    """Refuse a run the baseline cannot judge (another workload; another GPU or config unless allowed);
    the notes on every other difference (allowed ones, driver, host, library versions)."""
    base, now = document.source, source_of(info, [])
    workload = info.workload
    if workload.name != document.workload.name:
        raise IncomparableBaseline(f"{path} is a {workload.name} run, the baseline is of {document.workload.name}")
    notes = []
    if now.gpu != base.gpu:
        if not allow_different_gpu:
            raise IncomparableBaseline(f"{path} ran on {now.gpu}, the baseline on {base.gpu}: gate it against a "
                                       "baseline of its own GPU, or pass --allow-different-gpu")
        notes.append(f"gated across GPUs ({base.gpu} -> {now.gpu}), explicitly allowed by --allow-different-gpu")
    if workload.config != document.workload.config:
        changes = changed_entries(document.workload.config, workload.config)
        if not allow_different_config:
            raise IncomparableBaseline(f"{path} has another config than the baseline ({changes}): gate it against "
                                       "a baseline of its config, or pass --allow-different-config")
        notes.append(f"gated across configs ({changes}), explicitly allowed by --allow-different-config")
    if now.driver != base.driver:
        notes.append(f"driver {base.driver or 'not recorded'} -> {now.driver or 'not recorded'}")
    if now.host != base.host:
        cpu = [(h or {}).get("cpu", "not recorded") for h in (base.host, now.host)]
        notes.append(f"another host (CPU {cpu[0]} -> {cpu[1]})" if cpu[0] != cpu[1] else "host details differ")
    versions = changed_entries(base.versions, now.versions)
    if versions:
        notes.append(f"library versions differ: {versions}")
    return notes


def shared_gpu_note(info: RunInfo) -> str | None:
    """Why a run on a shared GPU cannot be judged on its times (None where its GPU was its own, or unknown)."""
    sharing = info.gpu_sharing
    if sharing is None or not sharing.shared:
        return None
    return (f"run on a shared GPU: {sharing.max_other_processes} other process(es) used it during "
            f"{100 * (sharing.shared_sample_fraction or 0):.0f} % of the timed steps (median SM utilization "
            f"{sharing.sm_utilization_pct} %); its kernel and step times measure the other process too, "
            "so they are not judged: profile again on a GPU of its own")


def gate_run(baseline: pd.DataFrame, run, thresholds: Thresholds, name: str) -> pd.DataFrame:
    """Every check of one run (`compare` and `step_checks`, judged); on a shared GPU, one failed "shared GPU"
    check names the cause (`shared_gpu_check`) and every other check is not judged."""
    checks = compare(baseline, run.kernels)
    steps = step_checks(baseline, step_rows(run.info, run.kernels))
    judged = judge(pd.concat([checks, steps], ignore_index=True) if len(steps) else checks, thresholds)
    shared = shared_gpu_note(run.info)
    if shared:
        unjudged = judged.assign(regressed=False, judged=False, note="not judged: shared GPU")
        judged = pd.concat([shared_gpu_check(judged, shared), unjudged], ignore_index=True)
    return judged.assign(run=name)


def shared_gpu_check(judged: pd.DataFrame, note: str) -> pd.DataFrame:
    """The one failed check of a run on a shared GPU, in the columns of its other checks (`judged`), `note`
    saying why its times are not judged."""
    nan = float("nan")
    return judged.iloc[[0]].assign(check="shared GPU", scope="run", metric="gpu_sharing", regressed=True,
                                   judged=True, note=note, impact=nan, median=nan, current=nan, allowed=nan,
                                   worse_by=nan)


BOOTSTRAP = 3  # runs of a configuration the history must hold before the gate judges the next one


def history_document(view: Snapshot, run: Run, last: int, bootstrap: int = BOOTSTRAP) -> tuple[Baseline | None, str]:
    """A baseline of the last `last` runs of `run`'s configuration in the history (`Baseline`), and the note
    saying which runs. Where the history holds fewer than `bootstrap` such runs (a new history, a new
    configuration) there is no baseline yet (None) and the note says from which run the gate judges: the first
    jobs of a CI history pass and fill it, rather than fail until someone seeds it by hand. `view`: the history as
    the command read it once (`history_store.snapshot`), so that every run it gates stands on the same runs."""
    info, folder = run.info, view.folder
    recent = recent_runs(view, run, last)
    if len(recent) < bootstrap:
        return None, (f"no baseline yet: history {folder} holds {len(recent)} earlier runs of {info.workload.name} "
                      f"with this config on {info.gpu.name} (GPU not shared); the gate judges from the "
                      f"{_ordinal(bootstrap + 1)} run on (--bootstrap {bootstrap})")
    table = rolling_baseline(view, recent["run_id"].tolist())
    document = make_document(Baseline, workload=info.workload.model_dump(exclude_unset=True),
                             source=source_of(info, recent["run_id"].tolist()),
                             rows=table.to_dict("records"))
    commits = recent["commit"].str[:10]
    return document, (f"baseline: the last {len(recent)} runs of its configuration in history {folder} (commits "
                      f"{commits.iloc[-1]} to {commits.iloc[0]})")


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _verdict(document: Baseline | None, note: str, path: Path, run: Run, thresholds: Thresholds,
             allow_different_gpu: bool, allow_different_config: bool) -> RunVerdict:
    """One run's verdict: every check against `document`; without one (no baseline yet), no checks and the
    note saying why (and, for a run on a shared GPU, that its times measure another process too: it is
    appended, but no rolling baseline will take it)."""
    if document is None:
        shared = shared_gpu_note(run.info)
        return RunVerdict(path.name, pd.DataFrame(columns=["run", "check", "regressed", "judged"]).astype(
            {"regressed": bool, "judged": bool}), [note] + ([shared] if shared else []))
    notes = ([note] if note else []) + provenance_notes(document, run.info, path, allow_different_gpu,
                                                        allow_different_config)
    return RunVerdict(path.name, gate_run(document.table(), run, thresholds, path.name), notes)


def regress(runs: list[Path], baseline_file: Path | None, junit: Path | None = None, summary: Path | None = None,
            thresholds: Thresholds = Thresholds(), allow_different_gpu: bool = False,
            allow_different_config: bool = False, history: Path | None = None, last: int = 10,
            metrics: Path | None = None, bootstrap: int = BOOTSTRAP) -> GateResult:
    """`ssmprof regress`: every run against the baseline file, or (`history`, no file) against the last `last`
    runs of its configuration in the history (a run with fewer than `bootstrap` before it passes, "no baseline
    yet"); the markdown summary, the JUnit XML and the metrics file (Bencher Metric Format) also written where
    asked. Runs the baseline cannot judge are refused before any is gated."""
    for path, option in ((junit, "--junit"), (summary, "--summary"), (metrics, "--metrics")):
        check_file(path, option)
    check_history(history)  # the runs are appended there after gating: refused before, not after
    if baseline_file is None and history is None:
        raise IncomparableBaseline("regress needs --baseline FILE or --history DIR to gate against")
    for value, option in ((last, "--last"), (bootstrap, "--bootstrap")):
        if baseline_file is None and value < 2:  # the noise of one run is unknown; a negative LIMIT fails in SQL
            raise InvalidConfig(f"{option} must be >= 2: a rolling baseline needs at least 2 runs, got {value}")
    refuse_repeated(runs)
    loaded = [(Path(path), load_run(path)) for path in runs]
    made: list[tuple[Baseline | None, str]]
    if baseline_file is not None:
        made = [(read_document(Baseline, baseline_file), "")] * len(loaded)
    else:
        assert history is not None  # refused above where neither is given
        view = snapshot(history)  # one snapshot for every run of the command, whatever is appended meanwhile
        made = [history_document(view, run, last, min(bootstrap, last)) for _, run in loaded]
    verdicts = [_verdict(document, note, path, run, thresholds, allow_different_gpu, allow_different_config)
                for (document, note), (path, run) in zip(made, loaded, strict=True)]
    documents = [document for document, _ in made if document is not None]
    result = GateResult(gate_markdown(verdicts, documents[0] if documents else None, thresholds),
                        pd.concat([v.checks for v in verdicts], ignore_index=True))
    if summary is not None:
        write_text(summary, result.summary)
    if junit is not None:
        write_text(junit, gate_junit(verdicts))
    if metrics is not None:
        write_text(metrics, bencher_metrics([(path.name, run_rows(run.kernels, run.info)) for path, run in loaded]))
    return result
