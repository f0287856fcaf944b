"""The CI workflows of docs/ci.md (GitHub Actions) and README.md ("Tracking in CI"), their commands run in order
from an empty history cache, one job per commit in a fresh folder with the cache restored: every ssmprof command
is taken from the page itself, variables ($GITHUB_SHA, $GITHUB_STEP_SUMMARY) and globs expanded as the shell does,
and `profile` is replaced by a committed run of the same configuration (no GPU here). The first
`gate.BOOTSTRAP` jobs pass with "no baseline yet" and fill the history; from the next job on each run is gated,
and a planted regression fails at its own commit."""

import os
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
RERUNS = ("h100 reruns, then a Triton autotuning change", [DATA / "regress-reruns-h100" / name for name in (
    "rerun-1", "rerun-2", "rerun-3", "rerun-4", "rerun-5", "planted-autotune")], 6, "config changed")
ONE_HOST = ("one H100 host, then every launch synchronous", [DATA / "gate-planted-h100" / name for name in (
    "clean-1", "clean-2", "clean-3", "clean-4", "launch-blocking", "clean-4")], 5, "step")


def actions_commands() -> list[str]:
    """The ssmprof commands of the GitHub Actions example in docs/ci.md, in order (the executable left out); a
    folded (`>`) step is joined as YAML joins it."""
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
            commands.append(text.removeprefix(".venv/bin/ssmprof "))
    return commands


def readme_commands() -> list[str]:
    """The ssmprof commands of README.md's "Tracking in CI" block, in order, continuation lines joined."""
    section = (ROOT / "README.md").read_text().split("## Tracking in CI", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    return [line.removeprefix("ssmprof ") for line in block.splitlines() if line.startswith("ssmprof ")]


def _continued(lines: list[str], indent: int) -> list[str]:
    out = []
    for row in lines:
        if len(row) - len(row.lstrip()) <= indent + 2:
            break
        out.append(row)
    return out


def _option(args: list[str], name: str, default: str | None = None) -> str | None:
    return args[args.index(name) + 1] if name in args else default


def run_job(workspace: Path, commands: list[str], source: Path) -> dict[str, object]:
    """One CI job in a fresh checkout (`workspace`, the history cache restored into it): `profile` stands in as a
    copy of `source` where it would write its run, then every other documented command, variables and globs
    expanded as the shell does; each command's result."""
    from ssmprof.cli import app

    results = {}
    for command in commands:
        args = [os.path.expandvars(arg) for arg in shlex.split(command, comments=True)]
        if args[0] == "profile":
            shutil.copytree(source, workspace / _option(args, "--out") / _option(args, "--name", source.name))
            continue
        args = [arg for part in args for arg in (  # the shell's glob
            [str(p.relative_to(workspace)) for p in sorted(workspace.glob(part))] if "*" in part else [part])]
        results[args[0]] = (runner.invoke(app, args, env={"COLUMNS": "400"}), args)
    return results


@pytest.mark.parametrize("doc, commands, workflow", [
    ("docs/ci.md", actions_commands, RERUNS), ("docs/ci.md", actions_commands, ONE_HOST),
    ("README.md", readme_commands, ONE_HOST)], ids=["ci.md-reruns", "ci.md-one-host", "readme-one-host"])
def test_documented_workflow_from_an_empty_cache(doc, commands, workflow, tmp_path, monkeypatch):
    scenario, sources, failing_job, failing_check = workflow
    documented = commands()
    assert [shlex.split(c)[0] for c in documented] == ["profile", "regress", "history"], doc
    cache, history = None, None
    for job, source in enumerate(sources, start=1):
        workspace = tmp_path / f"job-{job}"  # a fresh checkout
        workspace.mkdir()
        monkeypatch.chdir(workspace)
        monkeypatch.setenv("GITHUB_SHA", f"{job:02d}" + "c1" * 19)
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(workspace / "step-summary.md"))
        if cache is not None:  # the cache restored where the job keeps its history
            shutil.copytree(cache, workspace / history)
        results = run_job(workspace, documented, source)
        (gate, gate_args), (page, page_args) = results["regress"], results["history"]
        history = _option(gate_args, "--history")
        cache = workspace / history
        assert page.exit_code == 0, page.output
        assert (workspace / _option(page_args, "--out") / "history.html").is_file()
        summary = (workspace / _option(gate_args, "--summary")).read_text()
        if job <= BOOTSTRAP:  # no baseline yet: passes, says from which run it gates, appended
            assert gate.exit_code == 0, gate.output
            assert f"no baseline yet: history {history} holds {job - 1} earlier runs" in summary
            assert f"the gate judges from the {BOOTSTRAP + 1}th run on" in summary
        elif job == failing_job:
            assert gate.exit_code == 1, gate.output
            assert re.search(rf"\| {failing_check} \|.*\| FAIL \|", summary), summary
            assert f"{job - 1:02d}c1c1c1c1" in summary  # the baseline's newest commit is the job before
        else:
            assert gate.exit_code == 0, summary
            earlier = len(set(sources[:job]) - {source})  # a run appended before is not its own baseline
            assert f"baseline: the last {earlier} runs of its configuration" in summary
        assert "appended 1 run(s) to history" in gate.output or "not appended again" in gate.output
        assert len(list(cache.glob("*.parquet"))) == len(set(sources[:job]))
