"""The CLI through typer's CliRunner: real tiny runs on the CPU, and one clear line for bad input."""

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from ssmprof import bundled
from ssmprof.cli import app
from ssmprof.profiler import harness

DATA = Path(__file__).parent / "data"
runner = CliRunner()


def test_workloads_lists_every_workload_and_preset():
    result = runner.invoke(app, ["workloads"])
    assert result.exit_code == 0
    for text in ("mamba2-lm", "hybrid", "tiny", "small", "paper"):
        assert text in result.output


def test_run_tiny_on_cpu_writes_result(tmp_path):
    out = tmp_path / "r" / "result.json"
    result = runner.invoke(app, ["run", "hybrid", "--preset", "tiny", "--device", "cpu", "--steps", "2",
                                 "--seq-len", "32", "--set", "d_state=8", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "tokens/s" in result.output and "kernel: attention" in result.output
    data = json.loads(out.read_text())
    assert data["config"]["seq_len"] == 32 and data["config"]["d_state"] == 8
    assert data["items_per_step"] == 2 * 32 and len(data["step_times_ms"]) == 2
    assert data["provenance"]["ssd"].startswith("torch-reference")


def test_run_emits_nvtx_start_end_ranges(monkeypatch):
    """Phases are process-wide NVTX start/end ranges (push/pop would miss the autograd thread)."""
    import nvtx

    calls = []
    monkeypatch.setattr(nvtx, "start_range", lambda message, domain: calls.append(("start", message, domain)) or 7)
    monkeypatch.setattr(nvtx, "end_range", lambda handle: calls.append(("end", handle)))
    monkeypatch.setattr(nvtx, "push_range", lambda *a, **k: pytest.fail("push/pop ranges are per thread"))
    result = runner.invoke(app, ["run", "mamba2-lm", "--preset", "tiny", "--device", "cpu", "--steps", "1",
                                 "--warmup", "0"])
    assert result.exit_code == 0, result.output
    starts = [c[1] for c in calls if c[0] == "start"]
    assert starts == ["forward", "backward", "optimizer"] * 2
    assert {c[2] for c in calls if c[0] == "start"} == {"ssmprof"}
    assert sum(c[0] == "end" for c in calls) == len(starts)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "mamba4-lm"], "unknown workload 'mamba4-lm'"),
        (["run", "mamba2-lm", "--preset", "huge"], "unknown preset 'huge'"),
        (["run", "mamba2-lm", "--preset", "tiny", "--seq-len", "0"], "sequence length must be >= 1"),
        (["run", "mamba2-lm", "--preset", "tiny", "--set", "chunk_size"], "--set expects KEY=VALUE"),
        (["run", "mamba2-lm", "--preset", "tiny", "--set", "chunk_size=64", "--set", "chunk_size=128"],
         "--set chunk_size is given twice (64 and 128)"),
        (["run", "mamba2-lm", "--preset", "tiny", "--set", "chunk_size=100"], "power of two"),
        (["run", "hybrid", "--preset", "tiny", "--set", "n_heads=3"], "multiple of n_heads"),
        (["run", "mamba2-lm", "--preset", "tiny", "--device", "tpu"], "device must be auto, cuda or cpu"),
        (["run", "mamba2-lm", "--preset", "tiny", "--device", "cpu", "--steps", "0"], "steps >= 1"),
        (["run", "mamba2-lm", "--preset", "tiny", "--device", "cpu", "--set", "text_file=/no/such/file"],
         "cannot read text file"),
        (["run", "mamba2-lm", "--preset", "tiny", "--device", "cpu", "--tp", "0"], "--tp and --dp must be >= 1"),
        (["run", "mamba2-lm", "--preset", "tiny", "--device", "cpu", "--dp", "-1"], "--tp and --dp must be >= 1"),
        (["regress", "run", "--baseline", "b.json", "--sigmas", "-1"], "thresholds must be >= 0, got --sigmas -1"),
        (["regress", "run", "--history", "h", "--last", "-3"], "--last must be >= 2"),
        (["profile", "mamba2-lm", "--preset", "tiny", "--tp", "2", "--device", "cpu", "--nnodes", "2",
          "--rdzv-endpoint", "node0"], "--rdzv-endpoint must be HOST:PORT (node 0's), got 'node0'"),
        (["profile", "mamba2-lm", "--autotune-from", "/no/such/run"], "/no/such/run"),
        (["profile", "mamba2-lm", "--autotune-from", str(DATA / "tp2-cpu-gloo-mamba2-lm-sp")],
         "the run records no Triton autotuning choices"),
        (["profile", "mamba2-lm", "--tp", "2", "--device", "cpu", "--autotune-from",
          str(bundled.REFERENCE / "h100-sxm" / "mamba2-lm")], "--autotune-from pins one process's Triton choices"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_gpu():
    result = runner.invoke(app, ["run", "mamba2-lm", "--preset", "tiny", "--device", "cuda"])
    assert result.exit_code == 1
    assert "no CUDA GPU is visible" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("failure", "message"),
    [
        (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB"),
         "GPU out of memory running mamba2-lm"),
        # what torch raised on our H100 for mamba2-lm paper at batch 256 (32-bit index overflow)
        (RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
                      "asynchronously reported at some other API call"),
         "a CUDA kernel failed running mamba2-lm (batch 2, seq_len 64): an illegal memory access was encountered"),
    ],
)
def test_gpu_failures_are_one_line(monkeypatch, failure, message):
    def fail(self):
        raise failure

    monkeypatch.setattr(harness.Trainer, "step", fail)
    result = runner.invoke(app, ["run", "mamba2-lm", "--preset", "tiny", "--device", "cpu"])
    assert result.exit_code == 1
    assert message in result.output and "lower --batch-size" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("failure", "message"),
    [
        (RuntimeError("x\ny"), "running mamba2-lm failed (batch 2, seq_len 64): x (RuntimeError raised in test_cli)"),
        # what fla-core 0.6.0 raises on our H100 (Triton 3.6.0, no tilelang), where the plan now refuses first
        (RuntimeError("Triton >= 3.4.0 and < 3.7.1 on Hopper GPUs produces incorrect results for gated "
                      "chunk_bwd_dqkwg (see #640). Please upgrade Triton to >= 3.7.1 or install tilelang: `pip "
                      "install tilelang`"),
         "running mamba2-lm failed (batch 2, seq_len 64): Triton >= 3.4.0 and < 3.7.1 on Hopper GPUs produces "
         "incorrect results for gated chunk_bwd_dqkwg (see #640). Please upgrade Triton to >= 3.7.1 or install "
         "tilelang: `pip install tilelang` (RuntimeError raised in test_cli)"),
        (RuntimeError(""), "running mamba2-lm failed (batch 2, seq_len 64): RuntimeError (RuntimeError raised in"),
    ],
)
def test_a_library_runtime_error_in_training_is_one_typed_line(monkeypatch, failure, message):
    """A RuntimeError that is neither a CUDA error nor an OOM (a library refusing this host's stack) is one line
    naming the workload and the library's first line, not a traceback; the library's exception stays chained."""
    from ssmprof.errors import TrainingFailed
    from ssmprof.pipeline.measure import WorkloadOptions, train

    def fail(self):
        raise failure

    monkeypatch.setattr(harness.Trainer, "step", fail)
    result = runner.invoke(app, ["run", "mamba2-lm", "--preset", "tiny", "--device", "cpu"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert message in " ".join(result.output.split())  # rich wraps the line to the terminal; the text is one line
    with pytest.raises(TrainingFailed) as error:
        train(WorkloadOptions("mamba2-lm", "tiny"), "cpu", steps=1)
    assert "\n" not in str(error.value) and error.value.__cause__ is failure


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["suite", "--workloads", "mamba2-lm,foo"], "unknown workload 'foo'"),
        (["suite", "--counters", "some"], "--counters must be sampled, all, focus or none"),
    ],
)
def test_suite_bad_input(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_suite_without_gpu(tmp_path):
    result = runner.invoke(app, ["suite", "--out", str(tmp_path)])
    assert result.exit_code == 1 and "no CUDA GPU" in result.output
    assert list(tmp_path.iterdir()) == []


REFERENCE_RUN = "ssmprof/reference/h100-sxm/mamba2-lm"
REFERENCE_PATH = str(Path(__file__).parent.parent / REFERENCE_RUN)


@pytest.mark.parametrize(
    ("scenario", "args", "message"),
    [
        ("--json names a folder", ["run", "mamba2-lm", "--preset", "tiny", "--device", "cpu", "--json", "{tmp}"],
         "is a folder: give a file name"),
        ("--out is a file", ["profile", "mamba2-lm", "--preset", "tiny", "--out", "{tmp}/file"],
         "is a file, not a folder"),
        ("report -o names a folder", ["report", str(Path(__file__).parent.parent / REFERENCE_RUN), "-o", "{tmp}"],
         "is a folder: give a file name"),
        ("--csv is a file", ["report", str(Path(__file__).parent.parent / REFERENCE_RUN), "--csv", "{tmp}/file"],
         "is a file, not a folder"),
        # /proc takes no new file, yet os.access says it is writable when the tests run as root
        ("--json under /proc", ["run", "mamba2-lm", "--preset", "tiny", "--device", "cpu", "--json", "/proc/x/r.json"],
         "/proc is not a writable folder"),
        ("report --csv under /proc", ["report", REFERENCE_PATH, "--format", "md", "--csv", "/proc/x"],
         "/proc is not a writable folder"),
        ("profile --history is a file", ["profile", "mamba2-lm", "--preset", "tiny", "--tp", "2", "--device", "cpu",
                                         "--out", "{tmp}/runs", "--history", "{tmp}/file"], "is a file, not a folder"),
        ("regress --history is a file", ["regress", REFERENCE_PATH, "--baseline", "{tmp}/b.json", "--history",
                                         "{tmp}/file"], "--history {tmp}/file is a file, not a folder"),
        ("regress --baseline is a run.json", ["regress", REFERENCE_PATH, "--baseline", REFERENCE_PATH + "/run.json"],
         "has no version: it is not a baseline that ssmprof wrote"),
        ("profile --steps 0 under --tp", ["profile", "mamba2-lm", "--preset", "tiny", "--tp", "2", "--device", "cpu",
                                          "--out", "{tmp}/runs", "--steps", "0"], "--steps must be >= 1, got 0"),
        ("profile --name a path", ["profile", "mamba2-lm", "--preset", "tiny", "--out", "{tmp}/runs", "--name",
                                   "../elsewhere"], "--name must be a folder name, not a path"),
        ("a CPU run of minutes", ["run", "graph-mamba", "--preset", "small", "--device", "cpu"],
         "GFLOP per training step: on the CPU"),
        ("results --readme missing", ["results", "--readme", "{tmp}/none.md"], "names a file with the Results"),
        ("results --readme unmarked", ["results", "--readme", "{tmp}/file"], "section to replace"),
        ("results --readme binary", ["results", "--readme", "{tmp}/no-kernels/kernels.parquet"], "is not a text file"),
        ("compare a run of no kernels", ["compare", REFERENCE_PATH, "{tmp}/no-kernels"], "holds no kernels"),
        ("baseline of a run of no kernels", ["baseline", REFERENCE_PATH, "{tmp}/no-kernels", "-o", "{tmp}/b.json"],
         "holds no kernels"),
        ("history --add a run of no kernels", ["history", "{tmp}/history", "--add", "{tmp}/no-kernels", "--out",
                                               "{tmp}"], "holds no kernels"),
    ],
)
def test_output_paths_and_cpu_size_are_checked_before_any_work(tmp_path, monkeypatch, scenario, args, message):
    """Refused before training or profiling starts: both are replaced by a call that fails the test (a wall-clock
    bound here judged the machine's load rather than the order of the checks)."""
    import ssmprof.pipeline.measure
    import ssmprof.profiler.profile_run

    def started(*_args, **_kwargs):
        raise AssertionError(f"{scenario}: the work started before the check refused it")

    monkeypatch.setattr(ssmprof.pipeline.measure, "run_training", started)
    monkeypatch.setattr(ssmprof.profiler.profile_run, "profile_run", started)
    (tmp_path / "file").write_text("")
    shutil.copytree(Path(__file__).parent.parent / REFERENCE_RUN, tmp_path / "no-kernels")
    table = tmp_path / "no-kernels" / "kernels.parquet"
    pd.read_parquet(table).iloc[:0].to_parquet(table)
    result = runner.invoke(app, [arg.replace("{tmp}", str(tmp_path)) for arg in args])
    message = message.replace("{tmp}", str(tmp_path))
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output, scenario
    assert len(result.output.strip().splitlines()) == 1, scenario  # the refusal only: no summary, no progress
    assert not any((tmp_path / name).exists() for name in ("b.json", "history", "runs")), scenario


def test_html_report_without_output_goes_to_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["report", str(Path(__file__).parent.parent / REFERENCE_RUN)])
    assert result.exit_code == 0 and len(result.output) < 1000
    assert "written: report.html, plotly.min.js" in result.output  # the page and the library it loads
    assert 50_000 < (tmp_path / "report.html").stat().st_size < 1.5e6  # its data; plotly.js is a file beside it
    assert (tmp_path / "plotly.min.js").stat().st_size > 1e6


@pytest.mark.parametrize(("args", "written", "message"), [
    (["-o", "{tmp}/x.html"], "<!DOCTYPE html>", None),  # the suffix decides: HTML, as compare's markdown default
    (["-o", "{tmp}/x.md"], "# ssmprof compare", None),
    (["-o", "{tmp}/x.html", "--format", "md"], None, "--format md does not match the output file"),
    (["-o", "{tmp}/x.pdf"], None, "is neither .html nor .md"),  # never an HTML page named .pdf
    (["-o", "{tmp}/x.txt", "--format", "md"], "# ssmprof compare", None),  # asked for: any name
])
def test_compare_writes_the_format_of_the_output_suffix(tmp_path, args, written, message):
    from ssmprof import bundled

    runs = [str(bundled.runs(gpu)[0]) for gpu in bundled.GPUS]
    result = runner.invoke(app, ["compare", *runs, *[a.replace("{tmp}", str(tmp_path)) for a in args]])
    if message:
        assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output
        assert list(tmp_path.iterdir()) == []
    else:
        assert result.exit_code == 0, result.output
        assert Path(args[1].replace("{tmp}", str(tmp_path))).read_text().startswith(written)


@pytest.mark.parametrize("command", ["profile", "regress", "report", "compare", "project", "sweep"])
def test_help_reads_at_80_columns(command, monkeypatch):
    """Every line fits 80 columns, no flag is cut short, and `profile --help` fits about one screen."""
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(app, [command, "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in result.output
    assert len(lines) <= 80


def test_progress_off_a_terminal_is_one_line_per_stage_start_and_end():
    """In a CI log or a device call's log (no terminal) each harness stage says when it starts and ends, with the
    seconds since the command began: a profile that runs for minutes shows where it is."""
    result = runner.invoke(app, ["run", "mamba2-lm", "--preset", "tiny", "--device", "cpu", "--steps", "2",
                                 "--warmup", "1"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("[")]
    stages = [line.split("] ", 1)[1] for line in lines]
    # a stage done at its first report (one warm-up step) says only that it is done
    assert stages == ["warm-up: done (1/1)", "timed steps: started (1/2)", "timed steps: done (2/2)"]
    assert all(re.match(r"^\[ *\d+\.\d s\] ", line) for line in lines)
