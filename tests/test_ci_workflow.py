"""The CI workflow of docs/ci.md, its commands run in order from an empty history cache, one job per commit:
every ssmprof command of the documented GitHub Actions job is taken from the page itself, the commit comes from
$GITHUB_SHA as on GitHub, and `profile` is replaced by a committed run of the same configuration (no GPU here).
The first `regress.BOOTSTRAP` jobs pass with "no baseline yet" and fill the history; from the next job on each
run is gated, and a planted regression fails at its own commit."""

import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ssmprof.pipeline.gate import BOOTSTRAP

pytest.importorskip("duckdb", reason="the history extra (`pip install 'ssmprof[history]'`; CI installs it)")
ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"
runner = CliRunner()

# (scenario, the runs of jobs 1..6, the job that must fail and the check that fails it)
WORKFLOWS = [
    ("h100 reruns, then a Triton autotuning change", [DATA / "regress-reruns-h100" / name for name in (
        "rerun-1", "rerun-2", "rerun-3", "rerun-4", "rerun-5", "planted-autotune")], 6, "config changed"),
    ("one H100 host, then every launch synchronous", [DATA / "gate-planted-h100" / name for name in (
        "clean-1", "clean-2", "clean-3", "clean-4", "launch-blocking", "clean-4")], 5, "step"),
]


def documented_commands() -> list[list[str]]:
    """The ssmprof commands of the GitHub Actions example in docs/ci.md, in order, as argument lists (the
    executable left out); a folded (`>`) step is joined as YAML joins it."""
    page = (ROOT / "docs" / "ci.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", page, re.S).group(1).splitlines()
    commands = []
    for number, line in enumerate(block):
        found = re.match(r"(\s*)(?:- )?run: (.*)", line)
        if not found:
            continue
        text = found.group(2)
        if text.strip() == ">":
            indent = len(found.group(1))
            text = " ".join(row.strip() for row in _continued(block[number + 1:], indent))
        if text.startswith(".venv/bin/ssmprof "):
            commands.append(shlex.split(text.removeprefix(".venv/bin/ssmprof ")))
    return commands


def _continued(lines: list[str], indent: int) -> list[str]:
    out = []
    for row in lines:
        if len(row) - len(row.lstrip()) <= indent + 2:
            break
        out.append(row)
    return out


def run_job(workspace: Path, source: Path, sha: str) -> dict[str, object]:
    """One CI job in a fresh checkout (`workspace` with the restored history cache): `profile` stands in as a
    copy of `source` into runs/, then every other documented command; each command's exit code and output."""
    from ssmprof.cli import app

    for leftover in ("runs", "history-page"):
        shutil.rmtree(workspace / leftover, ignore_errors=True)
    results = {}
    for command in documented_commands():
        if command[0] == "profile":
            shutil.copytree(source, workspace / "runs" / source.name)
            continue
        args = [arg for part in command for arg in (  # the shell's glob
            [str(p.relative_to(workspace)) for p in sorted(workspace.glob(part))] if "*" in part else [part])]
        result = runner.invoke(app, args, env={"GITHUB_SHA": sha, "COLUMNS": "400"})
        results[command[0]] = result
    return results


@pytest.mark.parametrize("scenario, sources, failing_job, failing_check", WORKFLOWS, ids=[w[0] for w in WORKFLOWS])
def test_documented_workflow_from_an_empty_cache(scenario, sources, failing_job, failing_check, tmp_path,
                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert [c[0] for c in documented_commands()] == ["profile", "regress", "history"]
    for job, source in enumerate(sources, start=1):
        sha = f"{job:02d}" + "c1" * 19
        results = run_job(tmp_path, source, sha)
        gate, page = results["regress"], results["history"]
        assert page.exit_code == 0, page.output
        assert (tmp_path / "history-page" / "history.html").is_file()
        summary = (tmp_path / "gate.md").read_text()
        if job <= BOOTSTRAP:  # no baseline yet: passes, says from which run it gates, appended
            assert gate.exit_code == 0, gate.output
            assert f"no baseline yet: history ci/history holds {job - 1} earlier runs" in summary
            assert f"the gate judges from the {BOOTSTRAP + 1}th run on" in summary
        elif job == failing_job:
            assert gate.exit_code == 1, gate.output
            assert re.search(rf"\| {failing_check} \|.*\| FAIL \|", summary), summary
            assert f"{job - 1:02d}c1c1c1c1" in summary  # the baseline's newest commit is the job before
        else:
            assert gate.exit_code == 0, summary
            earlier = len(set(sources[:job]) - {source})  # a run appended before is not its own baseline
            assert f"baseline: the last {earlier} runs of its configuration" in summary
        assert "appended 1 run(s) to history ci/history" in gate.output or "not appended again" in gate.output
        assert len(list((tmp_path / "ci" / "history").glob("*.parquet"))) == len(set(sources[:job]))
