"""The run history: runs appended to a folder (`--history DIR` of profile, suite and regress, or `ssmprof
history DIR --add RUN...`), its trends and change points (`ssmprof history DIR`), and rolling baselines for
`regress --history DIR`. Each run is one parquet file (`schema.write_history_entry`); every question across runs
(which runs, the last N of a configuration, medians and spreads over them) is a DuckDB query
(`history_store.query_history`), so a history of thousands of runs is never looped over in Python."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ssmprof.analysis.change.gate import EFFICIENCY, LAUNCHES, MAD_TO_SIGMA, PER_LAUNCH, ROW_KEY, STEP_METRICS, TIME
from ssmprof.analysis.change.history import change_points, moved, moved_sites, run_rows
from ssmprof.analysis.launches.frame import has_counters
from ssmprof.analysis.limits.limiters import limiters
from ssmprof.analysis.limits.roofline import roofline
from ssmprof.analysis.step.communication import one_rank
from ssmprof.errors import DuplicateRun, SsmprofError
from ssmprof.hardware import run_ceilings
from ssmprof.history_store import History, Snapshot, duckdb_module, query_history, snapshot
from ssmprof.pipeline.loading import load_run
from ssmprof.pipeline.outputs import check_folder, write_text
from ssmprof.schema import HISTORY_VERSION, Run, run_identity, write_history_entry

COMMIT_VARIABLES = ("GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "GIT_COMMIT")  # CI systems' commit under test
DEFAULT_LAST = 10  # runs in a rolling baseline
GATED_METRICS = (TIME, LAUNCHES, PER_LAUNCH, *EFFICIENCY, *STEP_METRICS)  # what `analysis.change.gate` gates


def commit_of(given: str | None = None) -> str:
    """The commit a run measured: `given`, else the CI's variable, else `git rev-parse HEAD` here, else
    "unknown"."""
    if given:
        return given
    for variable in COMMIT_VARIABLES:
        if os.environ.get(variable):
            return os.environ[variable]
    try:
        found = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return found.stdout.strip() if found.returncode == 0 else "unknown"


def history_run_id(run: Run) -> str:
    """The run's id in the history: its creation time and workload (readable, in time order) and its
    `schema.run_identity`, so that the same run appended twice has one id. The run is one read from its
    directory (a history holds run directories)."""
    assert run.path is not None  # `append` and `recent_runs` take runs as `load_run` read them
    created = run.info.created or ""
    return re.sub(r"[^0-9A-Za-z_-]", "", f"{created}-{run.info.workload.name}") + f"-{run_identity(run.path)}"


def entry(run: Run, commit: str) -> pd.DataFrame:
    """The rows `run` appends: its summary (`analysis.change.history.run_rows`, with % of roof where its GPU has
    ceilings and the limiters where it has counters) and the run's identity on every row."""
    info = run.info
    kernels = one_rank(run.kernels, info)
    roof, limiter = None, None
    if has_counters(kernels):
        ceilings, _ = run_ceilings(info.gpu.name, run.path)
        limiter = limiters(kernels, evidence=False, ceilings=ceilings)["limiter"]
        roof = roofline(kernels, ceilings)["pct_of_roof"] if ceilings is not None else None
    rows = run_rows(kernels, info, roof, limiter)
    created = info.created or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    workload = info.workload
    # whether another process used the GPU during the run ("unknown": not sampled)
    shared = {None: "unknown", True: "yes", False: "no"}[info.gpu_sharing.shared if info.gpu_sharing else None]
    return rows.assign(
        history_version=HISTORY_VERSION, run_id=history_run_id(run), created=created, commit=commit,
        workload=workload.name, preset=workload.preset, config=json.dumps(workload.config, sort_keys=True),
        gpu=info.gpu.name, driver=str(info.gpu.clocks.driver or ""), host_cpu=str(info.host.cpu or ""),
        versions=json.dumps(info.versions or {}, sort_keys=True, default=str), gpu_shared=shared)


def check_history(folder: Path | None) -> None:
    """A history folder given with --history (None: none) that can be appended to and read: a folder that can be
    made, and DuckDB, which reading it takes. Checked before a command's work, not after a profile has run."""
    if folder is not None:
        check_folder(folder, "--history")
        duckdb_module()


def refuse_repeated(runs: list[Path]) -> list[str]:
    """The runs' identities (`schema.run_identity`); the same run given twice (a path repeated, or a copy of a
    run) is refused: it would count one measurement twice."""
    identities = [run_identity(path) for path in runs]
    first: dict[str, Path] = {}
    for path, identity in zip(runs, identities, strict=True):
        if identity in first:
            raise DuplicateRun(f"{path} is the same run as {first[identity]} (same run.json and kernels.parquet): "
                               "give each run once")
        first[identity] = path
    return identities


@dataclass(frozen=True)
class Appended:
    written: list[Path]  # one history file per run appended
    present: list[Path]  # runs already in the history, not appended again


def append(runs: list[Path], folder: Path, commit: str | None = None) -> Appended:
    """Append each run (a run directory) to the history folder. A run given twice is refused; a run the history
    holds already (same identity) is not appended again, so a job that appends the same run twice (`profile
    --history` then `regress --history`) counts it once."""
    check_history(folder)
    view = snapshot(folder)
    known = set(runs_table(view)["run_id"]) if view.files else set()  # an unreadable history is refused here
    refuse_repeated(runs)
    loaded = [load_run(path) for path in runs]  # every run read before any is appended
    new = [run for run in loaded if history_run_id(run) not in known]
    sha = commit_of(commit)
    return Appended([write_history_entry(folder, entry(run, sha)) for run in new],
                    [path for path, run in zip(runs, loaded, strict=True) if history_run_id(run) in known])


# --- queries


def runs_table(history: History) -> pd.DataFrame:
    """One row per appended run, oldest first: run_id, created, commit, workload, preset, config, gpu,
    gpu_shared. `history`, here and in the queries below: a folder (read as it is at the query), or a snapshot of
    it (`history_store.snapshot`) that every query of one command shares."""
    return query_history(history, """
        SELECT run_id, any_value(created) AS created, any_value("commit") AS "commit",
               any_value(workload) AS workload, any_value(preset) AS preset, any_value(config) AS config,
               any_value(gpu) AS gpu, any_value(gpu_shared) AS gpu_shared
        FROM history GROUP BY run_id ORDER BY created, run_id""")


def recent_runs(history: History, run: Run, last: int = DEFAULT_LAST) -> pd.DataFrame:
    """The last `last` runs (run_id, commit, created; newest first) in the history of the configuration of
    `run` (workload, config, GPU), leaving out runs on a shared GPU and `run` itself where it was appended
    already (same `history_run_id`). An empty or new history holds none."""
    view = history if isinstance(history, Snapshot) else snapshot(history)
    if not view.files:
        return pd.DataFrame(columns=["run_id", "commit", "created"])
    workload = run.info.workload
    return query_history(view, """
        SELECT run_id, any_value("commit") AS "commit", any_value(created) AS created FROM history
        WHERE workload = ? AND config = ? AND gpu = ? AND gpu_shared <> 'yes' AND run_id <> ?
        GROUP BY run_id ORDER BY created DESC, run_id DESC LIMIT ?""",
        [workload.name, json.dumps(workload.config, sort_keys=True), run.info.gpu.name, history_run_id(run), last])


def rolling_baseline(history: History, run_ids: list[str]) -> pd.DataFrame:
    """The baseline rows (`analysis.change.gate.build_baseline`'s, and the step rows of `build_step_baseline`) over
    the runs `run_ids`: medians and spreads (MAD scaled to a standard deviation) computed by DuckDB."""
    keys = ", ".join([*ROW_KEY, "metric"])
    metrics = ", ".join(f"'{m}'" for m in GATED_METRICS)
    marks = ", ".join("?" for _ in run_ids)
    return query_history(history, f"""
        WITH rows AS (SELECT * FROM history WHERE run_id IN ({marks}) AND metric IN ({metrics})),
        medians AS (SELECT {keys}, median(value) AS median, count(*) AS runs FROM rows GROUP BY {keys})
        SELECT {", ".join(f"m.{c}" for c in [*ROW_KEY, "metric"])}, m.median,
               {MAD_TO_SIGMA} * median(abs(r.value - m.median)) AS spread, any_value(m.runs) AS runs
        FROM medians m JOIN rows r USING ({keys})
        GROUP BY ALL ORDER BY ALL""", list(run_ids))


def configuration_rows(history: History, workload: str, config: str, gpu: str) -> pd.DataFrame:
    """Every row of one configuration's runs (the series the trends and change points are drawn from)."""
    return query_history(history, """
        SELECT * FROM history WHERE workload = ? AND config = ? AND gpu = ? AND scope <> 'phase'
        ORDER BY created, run_id""", [workload, config, gpu])


# --- trends


@dataclass(frozen=True)
class Trend:
    """One configuration's runs (workload, preset, config, GPU): the runs in order, their rows, and the change
    points with what moved."""

    workload: str
    preset: str
    config: str
    gpu: str
    runs: pd.DataFrame  # run_id, created, commit, gpu_shared, oldest first
    rows: pd.DataFrame
    # `analysis.change.history.change_points`, with `moved` (lines) and `moved_sites` (the sites those lines name:
    # (kernel name, phase, launching op) tuples) per change point
    changes: pd.DataFrame

    @property
    def change_count(self) -> int:
        """Change points counted by run: the metrics that moved at one run (a category and the total) are one."""
        return int(self.changes["position"].nunique()) if len(self.changes) else 0


def trends(history: History) -> list[Trend]:
    """Each configuration of the history, its change points found and named; every query of one snapshot (a
    folder is read once, as it is now: runs appended meanwhile by other processes are in no trend, rather than in
    the rows of a configuration but not in its runs)."""
    view = history if isinstance(history, Snapshot) else snapshot(history)
    runs = runs_table(view)
    out = []
    for (workload, preset, config, gpu), group in runs.groupby(["workload", "preset", "config", "gpu"], sort=True):
        rows = configuration_rows(view, workload, config, gpu)
        group = group.reset_index(drop=True)
        changes = change_points(rows, group)
        ids = group["run_id"].tolist()
        spans = list(zip(changes["since"], changes["position"], strict=True))
        changes["moved"] = [moved_sites(rows, ids[since:i], ids[i]) for since, i in spans]
        changes["moved_sites"] = [list(moved(rows, ids[since:i], ids[i]).index) for since, i in spans]
        out.append(Trend(workload, preset, config, gpu, group, rows, changes))
    return out


@dataclass(frozen=True)
class HistoryResult:
    markdown: Path | None  # None where no folder was asked for
    html: Path | None
    trends: list[Trend]
    change_lines: list[list[str]]  # per trend, one line per change point and series (`reports.history.change_lines`)


def history_report(folder: Path, out: Path | None) -> HistoryResult:
    """`ssmprof history`: the history's trends and change points, of one snapshot of it (`trends`); the trend
    page (HTML) and its markdown written into `out` where given, nowhere otherwise."""
    from ssmprof.reports.history import change_lines, history_html, history_markdown

    check_folder(out, "--out")
    found = trends(folder)
    if not found:
        raise SsmprofError(f"history {folder} holds no runs")
    lines = [change_lines(trend) for trend in found]
    if out is None:
        return HistoryResult(None, None, found, lines)
    markdown, page = out / "history.md", out / "history.html"
    write_text(markdown, history_markdown(found))
    write_text(page, history_html(found))
    return HistoryResult(markdown, page, found, lines)
