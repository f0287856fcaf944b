"""The run history on committed real runs: a history of 26 mamba2-lm small runs on an H100 (the gate's held-back
reruns, tests/data/regress-reruns-h100) with regressions planted at known runs; every planted change point is found
at its run, none on the clean stretch; the trend page renders; a rolling baseline gates as a baseline file does."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from ssmprof import bundled, schema
from ssmprof.analysis.change.history import detect, median_interval
from ssmprof.pipeline import history

H100 = Path(__file__).parent / "data" / "regress-reruns-h100"
RERUNS = [f"rerun-{i}" for i in range(1, 9)]
FWD, DX = "_chunk_scan_fwd_kernel", "_chunk_scan_chunk_state_bwd_dx_kernel"
runner = CliRunner()
pytest.importorskip("duckdb", reason="the history extra (`pip install 'ssmprof[history]'`; CI installs it)")


def _slower(kernels, where, factor):
    kernels = kernels.copy()
    kernels.loc[where, "duration_ns"] = (kernels.loc[where, "duration_ns"] * factor).round().astype("int64")
    return kernels


def fwd_slower(kernels):
    """One SSD kernel 20 % slower (a kernel regression)."""
    return _slower(kernels, kernels["kernel_name"] == FWD, 1.2)


def dx_split(kernels):
    """Two of the four backward dx launches on another grid, 50 % slower (a launch-configuration change)."""
    kernels = kernels.copy()
    hit = kernels.index[kernels["kernel_name"] == DX][:2]
    kernels.loc[hit, "grid_x"] = kernels.loc[hit, "grid_x"] * 2
    return _slower(kernels, kernels.index.isin(hit), 1.5)


def host_slower(info):
    """Every timed step 1.8x longer with the same kernels (a host-side slowdown: the GPU waits for the host)."""
    harness = info["harness"]
    steps = [1.8 * t for t in harness["step_times_ms"]]
    return {**info, "harness": {**harness, "step_times_ms": steps, "step_ms": sorted(steps)[len(steps) // 2]}}


# (first run, kernel plants, info plants): each stretch keeps what was planted before it unless it says otherwise
STRETCHES = [(0, [], []), (8, [fwd_slower], []), (14, [fwd_slower], [host_slower]), (20, [dx_split], [host_slower])]
RUNS = 26
PLANTED = {  # run -> the series whose change point must be found there (scope, name, metric)
    8: {("kernel", FWD, "time_per_launch_ns"), ("category", "SSM scan", "time_ns")},
    14: {("step", "", "step_ms"), ("step", "", "host_wait_ms")},
    20: {("kernel", FWD, "time_per_launch_ns"), ("site", DX, "time_ns")},
}


def plants_at(position):
    return next((k, i) for first, k, i in reversed(STRETCHES) if position >= first)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The history folder of 26 runs: the 8 reruns cycled in order, plants applied from their stretch on."""
    root = tmp_path_factory.mktemp("history")
    folder = root / "history"
    for position in range(RUNS):
        source = schema.read_run(H100 / RERUNS[position % len(RERUNS)])
        kernels, infos = plants_at(position)
        frame, info = source.kernels, source.info.model_dump()
        for plant in kernels:
            frame = plant(frame)
        for plant in infos:
            info = plant(info)
        info["created"] = f"2026-01-01T00:{position:02d}:00+00:00"
        run = schema.write_run(root / f"run-{position:02d}", schema.new_run_info(info), frame)
        history.append([run], folder, commit=f"{position:02d}" + "ab" * 19)
    return folder, root


def found_at(changes):
    out = {}
    for row in changes.to_dict("records"):
        name = row["kernel_name"] or row["category"]
        out.setdefault(row["position"], set()).add((row["scope"], name, row["metric"]))
    return out


def test_every_planted_change_point_found_at_its_run_and_none_elsewhere(built):
    folder, _ = built
    (trend,) = history.trends(folder)
    assert len(trend.runs) == RUNS
    found = found_at(trend.changes)
    assert set(found) == set(PLANTED), found  # no change point on the clean stretch (runs 0-7) nor elsewhere
    for position, series in PLANTED.items():
        assert series <= found[position], (position, found[position])
    # each change point is named with the commits around it and what moved
    at_8 = trend.changes[trend.changes["position"] == 8].iloc[0]
    assert (at_8["commit_before"][:2], at_8["commit_after"][:2]) == ("07", "08")
    assert any(line.startswith(f"{FWD} [forward]") and "(+20 %)" in line for line in at_8["moved"])
    at_20 = trend.changes[trend.changes["position"] == 20].iloc[0]
    assert any(line.startswith(f"{DX} [backward] config changed:") for line in at_20["moved"])
    at_14 = trend.changes[trend.changes["position"] == 14]
    assert not any(at_14["moved"].iloc[0])  # a host slowdown: no kernel moved


def test_history_command_renders_the_trend_page(built, tmp_path):
    """The page names runs by commit and date, gives change points as a table (not markdown), and draws no chart
    for a configuration with fewer runs than a change point needs (an H200 run beside the H100 history)."""
    from ssmprof.cli import app

    folder, root = built
    mixed = tmp_path / "history"
    shutil.copytree(folder, mixed)
    history.append([Path(__file__).parent / "data" / "regress-reruns-h200" / "rerun-1"], mixed, commit="ff" * 20)
    result = runner.invoke(app, ["history", str(mixed), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    page, markdown = (tmp_path / "history.html").read_text(), (tmp_path / "history.md").read_text()
    assert "mamba2-lm --preset small on NVIDIA H100 80GB HBM3" in page and "<pre>" not in page
    assert '<table class="data">' in page and '"title":{"text":"ms"}' in page  # a table; units on the axes
    assert "<th>First changed run</th><th>Run before</th>" in page  # was "first changed run": the column's name
    assert "12ababa\\u003cbr\\u003e2026-01-01" in page  # the x axis: commit and date
    assert "26 runs, 00ababa 2026-01-01 to 25ababa 2026-01-01; 3 change points." in markdown
    assert "| 14ababa 2026-01-01 | 13ababa 2026-01-01 | host wait: " in markdown
    h200 = page[page.index("on NVIDIA H200"):]
    assert "A change point needs 5 runs" in h200 and "Plotly.newPlot" not in h200


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (installed by .ci/run)")
def test_history_page_in_headless_chromium(built, tmp_path):
    """The page as a reader sees it at 1600 px: no script error, every chart drawn, nothing wider than the page."""
    from test_report import browse

    folder, _ = built
    page = history.history_report(folder, tmp_path).html
    shot, check, log = browse(page, tmp_path, "history-checked")
    assert shot.stat().st_size > 50_000 and check["errors"] == [] and "Uncaught" not in log, check
    assert check["plots"] == 3 and check["empty"] == [] and check["wide"] == [] and check["over"] == [], check


def test_the_trend_charts_log_axes_are_ticked_in_full(built):
    """Plotly's own ticks on a log axis spanning a decade or two labelled its minor ticks with one small digit each,
    squashed together (2 5 2 5; issue #55): each log axis ticks a few values labelled in full over the values it
    draws, and a chart grows with its legend, so that its plot keeps its height."""
    from ssmprof.reports import history as page
    from ssmprof.reports.figures import MOST_LOG_TICKS
    from ssmprof.reports.style import decade_label

    (trend,) = history.trends(built[0])
    charts = [chart for chart in page._figures(trend) if chart.layout.yaxis.type == "log"]
    assert len(charts) == 2
    for chart in charts:
        axis = chart.layout.yaxis
        assert 2 <= len(axis.tickvals) <= MOST_LOG_TICKS  # each tick one of ours, labelled in full: no minor digits
        assert list(axis.ticktext) == [f"{value:g}" if value < 1000 else decade_label(value) for value in axis.tickvals]
        drawn = [y for trace in chart.data for y in trace.y if y and y > 0]
        assert 10 ** axis.range[0] <= min(drawn) and max(drawn) <= 10 ** axis.range[1]
        legend_rows = page._legend_rows([trace.name for trace in chart.data])
        assert chart.layout.height == 300 + page.LEGEND_ROW * legend_rows


def test_rolling_baseline_gates_like_a_baseline_file(built):
    """The last 5 runs of the configuration as the baseline: a run like them passes; the same run with the SSD
    kernel slower fails on that kernel; with the host slower (same kernels) on step time and host wait only; on a
    shared GPU, the shared GPU is named as the cause and nothing else is judged."""
    from ssmprof.pipeline import gate

    folder, root = built
    result = gate.regress([root / "run-25"], None, history=folder, last=5)
    assert not result.regressed, result.summary
    assert f"- note: baseline: the last 5 runs of its configuration in history {folder} (commits 20abababab to " \
           "24abababab)" in result.summary
    source = schema.read_run(root / "run-25")
    info = source.info.model_dump()
    cases = {
        "kernel-slower": (info, fwd_slower(source.kernels)),
        "host-slower": (host_slower(info), source.kernels),
        "shared-gpu": ({**info, "gpu_sharing": {"shared": True, "samples": 40, "shared_sample_fraction": 1.0,
                                                       "max_other_processes": 1, "sm_utilization_pct": 100}},
                       fwd_slower(source.kernels)),
    }
    failed = {}
    for name, (info, kernels) in cases.items():
        run = schema.write_run(root / name, schema.new_run_info(info), kernels)
        table = gate.regress([run], None, history=folder, last=5).table
        failed[name] = table[table["regressed"]]
    assert FWD in set(failed["kernel-slower"]["kernel_name"]) and "step" not in set(failed["kernel-slower"]["check"])
    assert set(failed["host-slower"]["check"]) == {"step"}
    assert set(failed["host-slower"]["metric"]) == {"step_ms", "host_wait_ms"}
    assert failed["shared-gpu"]["check"].tolist() == ["shared GPU"]
    assert failed["shared-gpu"]["note"].iloc[0].startswith("run on a shared GPU: 1 other process(es) used it")


def test_the_store_is_queried_through_duckdb_and_refuses_an_empty_folder(built, tmp_path):
    folder, _ = built
    runs = history.runs_table(folder)
    assert len(runs) == RUNS and runs["commit"].iloc[0].startswith("00")
    assert len(list(folder.glob("*.parquet"))) == RUNS  # one file per appended run
    with pytest.raises(schema.CorruptFile, match="holds no runs"):
        history.runs_table(tmp_path)
    (tmp_path / "damaged.parquet").write_bytes(b"not parquet")  # nothing is appended to a history it can't read
    with pytest.raises(schema.CorruptFile, match="cannot be read"):
        history.append([bundled.REFERENCE / "h100-sxm" / "mamba2-lm"], tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == ["damaged.parquet"]


def test_median_interval_and_detector():
    assert median_interval([3, 1, 2, 5, 4]) == (3.0, 1.0, 5.0)
    flat = pd.Series([10, 10.2, 9.9, 10.1, 10, 9.8, 10.1, 10.2]).to_numpy()
    assert detect(flat, flat * 0, 0.05) == []
    step = pd.Series([10, 10.2, 9.9, 10.1, 13, 13.2, 12.9, 13.1]).to_numpy()
    assert [i for i, *_ in detect(step, step * 0, 0.05)] == [4]


def test_regress_cli_against_the_history_writes_bencher_metrics_and_appends(built, tmp_path):
    from ssmprof.cli import app

    folder, root = built
    copy = tmp_path / "history"
    copy.mkdir()
    for path in folder.glob("*.parquet"):
        (copy / path.name).write_bytes(path.read_bytes())
    metrics = tmp_path / "gate.bmf.json"
    result = runner.invoke(app, ["regress", str(root / "run-25"), "--history", str(copy), "--last", "5",
                                 "--metrics", str(metrics), "--junit", str(tmp_path / "gate.xml")])
    assert result.exit_code == 0, result.output
    # run-25 is in the history already: its baseline leaves it out (commits 20-24), and it is not appended again
    assert "commits 20abababab to 24abababab" in result.output
    assert "already: not appended again" in " ".join(result.output.split())
    assert len(list(copy.glob("*.parquet"))) == RUNS
    document = json.loads(metrics.read_text())
    step = document["run-25/step"]
    assert set(step) == {"step-time", "host-wait"}
    assert step["step-time"]["lower_value"] <= step["step-time"]["value"] <= step["step-time"]["upper_value"]
    kernel = next(v for k, v in document.items() if k.startswith(f"run-25/kernel/{FWD} [forward"))
    assert set(kernel) == {"time-per-launch-us"} and "lower_value" in kernel["time-per-launch-us"]
    assert "run-25/category/SSM scan" in document and "run-25/total" in document
    # no baseline and no history: one line, exit 1
    refused = runner.invoke(app, ["regress", str(root / "run-25")])
    assert refused.exit_code == 1 and "needs --baseline FILE or --history DIR" in refused.output


def test_one_run_counts_once_and_nothing_is_written_unasked(tmp_path, monkeypatch):
    """A run given twice (its path repeated, or a copy of its directory) is refused by `history --add` and
    `baseline` (one line, nothing written); a run the history holds already is not appended again; `history`
    without --out writes no page into the working folder."""
    import shutil

    from ssmprof.cli import app

    monkeypatch.chdir(tmp_path)
    run, copy, folder = H100 / "rerun-1", tmp_path / "copy-of-rerun-1", tmp_path / "history"
    shutil.copytree(run, copy)
    for args in (["history", str(folder), "--add", str(run), "--add", str(run)],
                 ["history", str(folder), "--add", str(run), "--add", str(copy)],
                 ["baseline", str(run), str(copy), "-o", str(tmp_path / "baseline.json")]):
        refused = runner.invoke(app, args)
        assert refused.exit_code == 1 and "is the same run as" in refused.output, refused.output
        assert len(refused.output.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy-of-rerun-1"]
    first = runner.invoke(app, ["history", str(folder), "--add", str(run)])
    again = runner.invoke(app, ["history", str(folder), "--add", str(copy)])
    assert first.exit_code == again.exit_code == 0, again.output
    assert "not appended again" in again.output and "1 run, 0 change points" in again.output
    assert len(list(folder.glob("*.parquet"))) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy-of-rerun-1", "history"]


def test_a_run_on_a_shared_gpu_before_any_baseline_is_named(tmp_path):
    """Gated against a new history, a run that shared its GPU passes (no baseline yet) but says its times measure
    another process too; it is appended, and no rolling baseline takes it (`recent_runs`)."""
    from ssmprof.pipeline import gate

    shared = Path(__file__).parent / "data" / "gate-planted-h100" / "shared-gpu"
    result = gate.regress([shared], None, history=tmp_path / "history")
    assert not result.regressed and "no baseline yet: history" in result.summary
    assert "run on a shared GPU: 1 other process(es) used it" in result.summary


def test_metrics_that_moved_at_one_run_are_one_change_point():
    """A category and the total kernel time moving at the same run are one change point, on the page and in the
    command's line alike (the command counted them as two)."""
    from ssmprof.pipeline.history import Trend

    changes = pd.DataFrame({"position": [6, 6, 9], "metric": ["category SSM scan", "total kernel time", "step"]})
    trend = Trend("mamba2-lm", "small", "", "H100", pd.DataFrame(), pd.DataFrame(), changes)
    assert trend.change_count == 2
    assert Trend("mamba2-lm", "small", "", "H100", pd.DataFrame(), pd.DataFrame(), changes.iloc[:0]).change_count == 0


ISSUE_RUNS = [*RERUNS, "planted-autotune", "planted-unfused-conv", "planted-cublas-no-workspace"]


@pytest.fixture(scope="module")
def uncommitted(tmp_path_factory):
    """The issue's history appended as a new user does, outside a git checkout and CI (no commit recorded): the 8
    reruns, then the three planted regressions (the chunk scan's new tile +88 % at the first)."""
    from ssmprof.cli import app

    root = tmp_path_factory.mktemp("uncommitted")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        for variable in history.COMMIT_VARIABLES:
            patch.delenv(variable, raising=False)
        args = ["history", str(root / "history")] + [a for name in ISSUE_RUNS for a in ("--add", str(H100 / name))]
        added = runner.invoke(app, args)
    assert added.exit_code == 0, added.output
    assert set(history.runs_table(root / "history")["commit"]) == {"unknown"}
    return root / "history"


@pytest.mark.parametrize(("commits", "created", "labels"), [
    (["0a1b2c3d4e", "9f8e7d6c5b"], ["2026-11-23T14:49:14+00:00", "2026-11-23T14:49:43+00:00"],
     ["0a1b2c3 2026-11-23", "9f8e7d6 2026-11-23"]),  # commits recorded: commit and date
    (["unknown", "unknown"], ["2026-11-23T14:49:14+00:00", "2026-11-23T14:52:13+00:00"],
     ["2026-11-23 14:49", "2026-11-23 14:52"]),  # no commit: date and time
    (["unknown", ""], ["2026-11-23T14:49:14+00:00", "2026-11-23T14:49:43+00:00"],
     ["2026-11-23 14:49:14", "2026-11-23 14:49:43"]),  # one minute: to the second
    (["0a1b2c3d4e", "0a1b2c3d4e"], ["2026-11-23T14:49:14+00:00", "2026-11-23T14:52:13+00:00"],
     ["0a1b2c3 2026-11-23 14:49", "0a1b2c3 2026-11-23 14:52"]),  # reruns of one commit: with their time
    (["unknown", "unknown"], ["2026-11-23T14:49:14+00:00", "2026-11-23T14:49:14+00:00"],
     ["2026-11-23 14:49:14 #1", "2026-11-23 14:49:14 #2"]),  # one second: their place in the history
], ids=["commits", "no-commit", "no-commit-one-minute", "one-commit-reruns", "one-second"])
def test_each_run_is_named_apart_never_unknown(commits, created, labels):
    from ssmprof.reports.history import run_labels

    runs = pd.DataFrame({"run_id": [f"r{i}" for i in range(len(commits))], "commit": commits, "created": created})
    assert run_labels(runs) == labels


def test_a_history_without_commits_names_its_runs_and_change_points_apart(uncommitted, tmp_path):
    """Runs without a commit are named by their date and time, not "unknown <date>"; a change point's first changed
    run and the run before are two runs; the kernel that changed (+88 %) is among those plotted."""
    from ssmprof.cli import app
    from ssmprof.reports.history import _figures, change_table

    result = runner.invoke(app, ["history", str(uncommitted), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    page, markdown = (tmp_path / "history.html").read_text(), (tmp_path / "history.md").read_text()
    assert "unknown" not in page and "unknown" not in markdown
    # rerun-1 and rerun-2 began in one minute: named to the second
    assert "11 runs, 2026-11-23 14:49:14 to 2026-11-23 14:55; 1 change point." in markdown
    (trend,) = history.trends(uncommitted)
    table = change_table(trend)
    assert table[["first_changed_run", "run_before"]].values.tolist() == [["2026-11-23 14:53", "2026-11-23 14:52"]]
    plotted = {trace.name.split(" grid ")[0] for figure in _figures(trend)[2:] for trace in figure.data}
    assert f"{FWD} [forward]" in plotted, plotted


def test_history_without_out_prints_each_change_point(uncommitted, built):
    """`ssmprof history DIR` prints, as its help says, each change point: one line per series, its first changed
    run, the run before, the change and its noise band."""
    from ssmprof.cli import app

    result = runner.invoke(app, ["history", str(uncommitted)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].endswith("11 runs, 1 change point"), lines
    total = next(line for line in lines if "total kernel time" in line)
    assert "first changed run 2026-11-23 14:53, run before 2026-11-23 14:52" in total, total
    assert "(+1.9 %)" in total and "beyond its noise band" in total, total
    help_text = " ".join(runner.invoke(app, ["history", "--help"]).output.split())
    assert "change point" in help_text
    printed = runner.invoke(app, ["history", str(built[0])]).output.splitlines()
    assert sum("first changed run 14ababa" in line for line in printed) == 2, printed  # step time and host wait
