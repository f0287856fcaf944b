"""Every console line of the CLI as the user typed it: paths and names with brackets, spaces, unicode or 300
characters are text (never Rich markup), each refusal is one line and exit 1, and the line names the real
cause. Table-driven over error paths that stop before any work, so the whole file runs in seconds."""

import builtins
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ssmprof import __version__
from ssmprof.cli import app

runner = CliRunner()
RUN = str(Path(__file__).parent.parent / "ssmprof/reference/h100-sxm/mamba2-lm")
LONG = "a" * 300  # over the 255 bytes a Linux file name may have
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="the grid is checked here before the GPU is missed")


def refused(tmp_path: Path, args: list[str]) -> str:
    """Run `args` ({tmp} is a fresh folder holding `file`, a regular file) and return its single output line,
    after checking the refusal: exit 1, one line, no traceback."""
    (tmp_path / "file").write_text("")
    result = runner.invoke(app, [arg.replace("{tmp}", str(tmp_path)) for arg in args])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and len(lines) == 1, result.output
    assert lines[0].startswith("error: ")
    return lines[0].replace(str(tmp_path), "{tmp}")


@pytest.mark.parametrize(("args", "message"), [
    # the inputs
    (["report", "runs[/]x"], "error: runs[/]x does not exist"),
    (["report", "does_not_exist"], "does_not_exist does not exist"),
    (["history", "nonexistent"], "history nonexistent does not exist: append runs with `ssmprof history"),
    (["report", RUN, "-o", f"{LONG}.html"], "File name too long"),
    # brackets that Rich would read as tags
    (["report", "[bold]run"], "[bold]run does not exist"),
    # a run against itself, its run.json for its directory (both once accepted or misnamed)
    (["compare", RUN, RUN], "is the same run as"),
    (["report", f"{RUN}/run.json"], "mamba2-lm/run.json is a run's run.json: give its run directory"),
    (["report", "[red]x[/red]"], "[red]x[/red] does not exist"),
    (["report", "run\\[x]"], "run\\[x] does not exist"),
    (["compare", "a[/]", RUN], "a[/] does not exist"),
    (["baseline", "[link=x]r"], "[link=x]r does not exist"),
    (["project", "r[/]", "--to", "h200"], "r[/] does not exist"),
    (["project", RUN, "--to", "h[/]200"], "h[/]200"),
    (["run", "mamba[/]2"], "unknown workload 'mamba[/]2'"),
    (["run", "mamba2-lm", "--preset", "[bold]tiny"], "unknown preset '[bold]tiny'"),
    (["profile", "mamba2-lm", "--preset", "tiny", "--out", "{tmp}/runs", "--name", "x[/]y"],
     "--name must be a folder name, not a path, got 'x[/]y'"),
    (["history", "h[/]x"], "history h[/]x does not exist"),
    # spaces and unicode
    (["report", "my runs/a b"], "my runs/a b does not exist"),
    (["report", "läufe/运行-α"], "läufe/运行-α does not exist"),
    (["compare", RUN, "ü b"], "ü b does not exist"),
    # very long names
    (["report", RUN, "--format", "md", "--csv", f"{{tmp}}/{LONG}"], "File name too long"),
    (["report", LONG], "File name too long"),
    (["run", "mamba2-lm", "--preset", "tiny", "--device", "cpu", "--json", f"{{tmp}}/{LONG}.json"],
     "File name too long"),
    (["profile", "mamba2-lm", "--preset", "tiny", "--out", "{tmp}/runs", "--name", LONG],
     "--name must be at most 255 bytes"),
    (["reference", "--out", f"{{tmp}}/{LONG}"], "File name too long"),
    # a file where a folder is expected
    (["report", "{tmp}/file"], "{tmp}/file is not a run directory (no run.json)"),
    (["report", RUN, "-o", "{tmp}/file/r.html"], "{tmp}/file is not a writable folder"),
    (["report", RUN, "--format", "md", "--csv", "{tmp}/file"], "is a file, not a folder"),
    (["history", "{tmp}/file"], "history {tmp}/file is a file, not a folder"),
    (["reference", "--out", "{tmp}/file"], "--out {tmp}/file is a file, not a folder"),
    (["baseline", RUN, "-o", "{tmp}/file/b.json"], "{tmp}/file is not a writable folder"),
    (["profile", "mamba2-lm", "--preset", "tiny", "--out", "{tmp}/file/runs"], "{tmp}/file is not a writable"),
    # a folder where a file is expected
    (["report", RUN, "-o", "{tmp}"], "is a folder: give a file name"),
    (["baseline", RUN, "-o", "{tmp}"], "is a folder: give a file name"),
    # folders no one can write (root may write anywhere else) and missing parents of one
    (["report", RUN, "-o", "/proc/r.html"], "/proc is not a writable folder"),
    (["report", RUN, "--format", "md", "--csv", "/proc/no/such/csv"], "/proc is not a writable folder"),
    (["reference", "--out", "/proc/reports"], "/proc is not a writable folder"),
    (["baseline", RUN, "-o", "/proc/x/y/b.json"], "/proc is not a writable folder"),
    # inputs that do not exist, named as such
    (["report", RUN, "--device-profile", "{tmp}/none [1].json"], "none [1].json"),
    (["compare", RUN, "{tmp}/missing run"], "{tmp}/missing run does not exist"),
    (["regress", "{tmp}/gone", "--baseline", "{tmp}/b.json"], "does not exist"),
    (["results", "--readme", "{tmp}/[x].md"], "[x].md"),
])
def test_a_refusal_is_one_line_with_the_name_as_typed(tmp_path, args, message):
    assert message in refused(tmp_path, args)


def test_a_run_json_defect_is_said_in_words_not_class_names(tmp_path):
    import json
    import shutil

    shutil.copytree(RUN, tmp_path / "run")
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    (tmp_path / "run" / "run.json").write_text(json.dumps({**info, "gpu": "H100"}))
    line = refused(tmp_path, ["report", "{tmp}/run", "--format", "md"])
    assert "run.json gpu: Input should be an object, got 'H100'" in line and "RunGpu" not in line


@NO_GPU
@pytest.mark.parametrize(("vary", "message"), [
    ("chunk_size=64,100", "sweep point mamba2-lm chunk_size=100"),  # the grid's second point is impossible
    ("d_state=abc", "d_state"),
    ("nonsense=1,2", "nonsense"),
])
def test_sweep_names_an_impossible_grid_before_the_missing_gpu(tmp_path, vary, message):
    line = refused(tmp_path, ["sweep", "mamba2-lm", "--vary", vary, "--out", "{tmp}/sweep"])
    assert message in line and "no CUDA GPU" not in line


@NO_GPU
def test_sweep_of_a_possible_grid_says_no_gpu(tmp_path):
    assert "no CUDA GPU" in refused(tmp_path, ["sweep", "mamba2-lm", "--vary", "chunk_size=64,128", "--out",
                                               "{tmp}/sweep"])


def test_the_missing_duckdb_hint_keeps_its_extra(tmp_path, monkeypatch):
    """`pip install 'ssmprof[history]'`: the brackets are the extra's name, printed as typed."""
    real_import = builtins.__import__

    def no_duckdb(name, *args, **kwargs):
        if name == "duckdb":
            raise ImportError("no duckdb")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_duckdb)
    (tmp_path / "h").mkdir()
    assert "pip install 'ssmprof[history]'" in refused(tmp_path, ["history", "{tmp}/h"])


@pytest.mark.parametrize("args", [
    ["profile", "mamba2-lm", "--preset", "tiny", "--device", "cpu", "--out", "{tmp}/runs", "--history", "{tmp}/h"],
    ["profile", "--script", "examples/train_script.py", "--device", "cpu", "--out", "{tmp}/runs", "--history",
     "{tmp}/h", "--", "--preset", "tiny"],
    ["regress", RUN, "--history", "{tmp}/h"],
    ["history", "{tmp}/h", "--add", RUN],
], ids=["profile", "profile-script", "regress", "history-add"])
def test_a_history_without_duckdb_is_refused_before_any_work(tmp_path, monkeypatch, args):
    """A history is read through DuckDB: a command that would append to one says DuckDB is missing before it
    profiles, gates or appends anything, not after a profile has run."""
    real_import = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *rest, **kw: (_ for _ in ()).throw(ImportError(name))
                        if name == "duckdb" else real_import(name, *rest, **kw))
    monkeypatch.chdir(Path(__file__).parent.parent)
    assert refused(tmp_path, args) == "error: the run history needs DuckDB: pip install 'ssmprof[history]'"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file"]  # no run, no history entry written


def test_written_names_the_file_as_typed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["report", RUN, "-o", "r[bold]66 ü.md"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "written: r[bold]66 ü.md" and (tmp_path / "r[bold]66 ü.md").is_file()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"ssmprof {__version__}"


@pytest.mark.parametrize(("command", "says"), [
    ("report", "[default: report.html; with --format md, markdown printed]"),
    ("compare", "[default: markdown printed; with --format html, compare.html]"),
])
def test_output_help_says_what_the_default_does(command, says, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    result = runner.invoke(app, [command, "--help"], terminal_width=200)
    assert says in " ".join(result.output.split())


def test_top_level_help_shows_whole_first_sentences(monkeypatch):
    """Click cuts a command's summary at its first full stop: no "e.g." in a first sentence."""
    monkeypatch.setenv("COLUMNS", "200")
    result = runner.invoke(app, ["--help"], terminal_width=200)
    assert "compare    Compare two runs of one workload, such as H100 vs H200" in result.output
    assert "(e.g." not in result.output


@pytest.mark.parametrize("command", ["run", "profile", "sweep", "report", "compare", "baseline", "regress",
                                     "history", "project"])
def test_arguments_are_named_in_capitals(command):
    """One placeholder style: WORKLOAD, RUN_DIR, RUN_A, HISTORY_DIR in the usage line, as in the help texts."""
    usage = runner.invoke(app, [command, "--help"]).output.splitlines()[0]
    arguments = usage.split("[OPTIONS]", 1)[1]
    assert arguments.strip() and arguments == arguments.upper(), usage


def test_project_takes_a_gpu_name_in_any_case():
    """`--to H200` names the datasheet's `h200`: once refused as an unknown GPU."""
    result = runner.invoke(app, ["project", RUN, "--to", "H200"])
    assert result.exit_code == 0 and "PROJECTION (not a measurement)" in result.output


def _commands() -> list[str]:
    import typer

    return ["", *typer.main.get_command(app).commands]  # "": the top-level help


@pytest.mark.parametrize("command", _commands())
def test_help_reads_at_80_columns(command, monkeypatch):
    """Every command's --help at 80 columns: no line over 80, a metavar a person writes (RUN_DIR..., --out PATH),
    never typer's `<list[Path]>`, and no value broken at a hyphen ("WORKLOAD-" / "PRESET-TIME") nor a `quoted`
    command at its spaces ("`git rev-" / "parse HEAD`")."""
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(app, [*filter(None, [command]), "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(map(len, lines)) <= 80
    assert "<list[" not in result.output and not any(kind in result.output for kind in ("<str>", "<int>", "<path>"))
    for line in lines:
        assert not line.rstrip().endswith("-") or line.rstrip().endswith(" -"), line  # no word cut at its hyphen
        assert line.count("`") % 2 == 0, line  # a `quoted value` whole on its line


def test_workloads_fit_80_columns_with_whole_names(monkeypatch):
    """`ssmprof workloads` at 80 columns: every name whole on its line (a table cut "hf:granite-4.0-hybrid" to
    "hf:granite-4.0…"), every preset listed, nothing wider than the terminal."""
    from ssmprof.workloads.registry import LISTED

    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(app, ["workloads"], terminal_width=80)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(map(len, lines)) <= 80
    assert "…" not in result.output
    for workload in LISTED.values():
        assert any(line.split()[:1] == [workload.name] for line in lines), workload.name
        for preset in workload.presets:
            assert any(line.split()[:2] == ["-", preset] for line in lines), (workload.name, preset)
