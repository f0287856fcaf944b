"""`ssmprof profile --script`: a training script of one's own, in a folder outside the repository, marked with
`ssmprof.step()`, profiled on the CPU into a run directory like a workload's; and each kind of bad script as one
line naming its file and line, with nothing written."""

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import ssmprof
from ssmprof import api, schema
from ssmprof.cli import app
from ssmprof.errors import ScriptFailed
from ssmprof.kernels import plan_kernels
from ssmprof.profiler.counters import pass_seconds
from ssmprof.profiler.harness import run_training
from ssmprof.profiler.markers import NvtxMarker
from ssmprof.profiler.script import script_command
from ssmprof.profiler.script_child import StepDriver, iterations_needed, run_script
from ssmprof.profiler.timeline import TimelineCapture, cpu_table
from ssmprof.workloads.registry import get_workload

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_script.py"  # mamba2-lm under a plain loop, two lines added


@pytest.fixture
def one_thread(monkeypatch):
    """One CPU thread per process: the script's child otherwise fights the test runner for the cores."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def test_a_script_outside_the_repository_profiles_like_its_workload(tmp_path, one_thread):
    script = tmp_path / "train.py"
    shutil.copy(EXAMPLE, script)
    assert sum("# ssmprof" in line for line in script.read_text().splitlines()) <= 3
    out = tmp_path / "runs"
    result = CliRunner().invoke(app, ["profile", "--script", str(script), "--device", "cpu", "--out", str(out),
                                      "--name", "mine", "--", "--steps", "32", "--preset", "tiny", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    run = schema.read_run(out / "mine")
    assert run.info.workload.name == "train.py" and run.info.workload.preset == "script"
    assert run.info.workload.config == {"script": str(script), "args": ["--steps", "32", "--preset", "tiny",
                                                                        "--device", "cpu"]}
    assert set(run.kernels["phase"]) == {"forward", "backward", "optimizer"}
    assert len(run.info.harness.step_times_ms) == 10 and run.info.coverage.phase_time_fraction == 1.0
    assert len(run.info.harness.host_time.sampled_steps_ms) == 10  # 1 warm-up, 10 timed, 20 host-sampled, 1 profiled

    # the same model as a workload, through the harness: the same ops, in the same order, in the same phases
    workload = get_workload("mamba2-lm")
    cfg = workload.config("tiny", {})
    plan = plan_kernels(workload.kernel_ops(cfg), "cpu", False, cfg.dtype)
    capture = TimelineCapture(cuda=False)
    run_training(workload, "tiny", cfg, plan, steps=1, warmup=0, marker=NvtxMarker(), capture=capture)
    suite = schema.conform_kernels(cpu_table(capture.trace))
    columns = ["kernel_name", "phase", "launch_shapes"]
    assert len(run.kernels) == len(suite) > 100
    assert run.kernels[columns].equals(suite[columns])


def test_the_marks_do_nothing_outside_a_profile():
    assert api._driver is None
    assert ssmprof.step(model=None, optimizer=None) is ssmprof.phase("forward")
    with ssmprof.step():
        pass

    @ssmprof.step()
    def iteration(x):
        return x + 1

    assert iteration(1) == 2


LOOP = """\
import sys
import torch
import ssmprof

model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range({steps}):
    with ssmprof.step(model=model, optimizer=optimizer):
        {body}
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
"""

# (scenario, script text, what the one line says)
BAD_SCRIPTS = [
    ("import error", "import no_such_module_here\n", "train.py:1: ModuleNotFoundError: No module named"),
    ("syntax error", "x = (\n", "train.py:1: SyntaxError"),
    ("exception inside the step", LOOP.format(steps=20, body="if i == 2: raise ValueError('boom')"),
     "train.py:9: ValueError: boom (in ssmprof.step() iteration 3)"),
    ("no marked iteration", LOOP.format(steps=3, body="pass"),
     "train.py: the script ended after 3 ssmprof.step() iterations; profiling needs 4 (1 warm-up, 2 timed, "
     "1 profiled)"),
    ("nested steps", LOOP.format(steps=20, body="ssmprof.step().__enter__()"),
     "entered inside the iteration entered at"),
    ("a script that exits non-zero", LOOP.format(steps=20, body="sys.exit(3) if i == 1 else None"),
     "train.py:9: the script exited with status 3 after 2 ssmprof.step() iterations"),
    ("out of memory in the step", LOOP.format(steps=20, body="if i: raise torch.cuda.OutOfMemoryError('')"),
     "train.py:9: GPU out of memory (in ssmprof.step() iteration 2)"),
]


# (device, timing iterations, what the count says): on the GPU the timing pass's iterations count too (an H100 run
# of examples/train_script.py with --steps 20 said this, and --steps 39 profiled)
NEEDED = [("cpu", 0, "32 (1 warm-up, 10 timed, 20 host-sampled, 1 profiled)"),
          ("cuda", 5, "37 (1 warm-up, 10 timed, 20 host-sampled, 5 timing, 1 profiled)")]


@pytest.mark.parametrize(("device", "timing", "says"), NEEDED, ids=[case[0] for case in NEEDED])
def test_the_iterations_a_script_needs_count_every_stage(tmp_path, device, timing, says):
    job = schema.make_document(schema.ScriptJob, script="train.py", device=device, mode="timeline", warmup=1,
                               steps=10, timing_iterations=timing, sampled_iterations=20,
                               result=str(tmp_path / "r.json"), table=str(tmp_path / "t.parquet"))
    assert iterations_needed(job) == says


@pytest.mark.parametrize(("text", "says"), [case[1:] for case in BAD_SCRIPTS], ids=[case[0] for case in BAD_SCRIPTS])
def test_a_bad_script_is_one_line_naming_its_file_and_line(tmp_path, monkeypatch, text, says):
    script = tmp_path / "train.py"
    script.write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    job = schema.make_document(schema.ScriptJob, script="train.py", device="cpu", mode="timeline", warmup=1,
                               steps=2, result=str(tmp_path / "r.json"), table=str(tmp_path / "t.parquet"))
    backward = torch.autograd.backward
    with pytest.raises(ScriptFailed) as failed:
        run_script(job, StepDriver(job))
    assert says in str(failed.value) and "\n" not in str(failed.value)
    assert api._driver is None and torch.autograd.backward is backward  # undone for whatever runs next


def test_the_command_line_says_one_line_and_writes_nothing(tmp_path, one_thread):
    script = tmp_path / "train.py"
    script.write_text(LOOP.format(steps=20, body="if i == 2: raise ValueError('boom')"))
    out = tmp_path / "runs"
    done = subprocess.run([sys.executable, "-m", "ssmprof.cli", "profile", "--script", str(script), "--device", "cpu",
                           "--out", str(out)], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (f"error: {script}:9: ValueError: boom (in ssmprof.step() "
                                                    "iteration 3)")
    assert "Traceback" not in done.stderr + done.stdout
    assert not out.exists() or not any(out.iterdir())


def test_a_missing_script_and_workload_options_are_refused(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(app, ["profile", "--script", str(tmp_path / "nope.py"), "--device", "cpu"])
    assert missing.exit_code == 1 and "nope.py: no such file" in missing.output
    shaped = runner.invoke(app, ["profile", "--script", str(EXAMPLE), "--batch-size", "4"])
    assert shaped.exit_code == 1 and "--batch-size shape a suite workload" in shaped.output


def test_script_lines_in_the_docs_are_real():
    text = (ROOT / "docs" / "own-model.md").read_text()
    assert "## An existing training script" in text and "ssmprof profile --script" in text


def test_a_counter_pass_runs_the_script_as_the_suite_child_runs(tmp_path, one_thread):
    """What each Nsight Compute pass starts (`script.script_command` with a counters job and `--timings`), here
    without ncu: the script stops after its profiled iteration and the pass record reads as the suite child's."""
    script = tmp_path / "train.py"
    script.write_text(LOOP.format(steps=50, body="pass"))
    job = schema.make_document(schema.ScriptJob, script=str(script), device="cpu", mode="counters", warmup=1,
                               steps=1, result=str(tmp_path / "r.json"), table=str(tmp_path / "t.parquet"))
    job_file = schema.write_document(job, tmp_path / "job.json")
    launched = time.time()
    done = subprocess.run([*script_command(job_file), "--timings", str(tmp_path / "pass.json")], cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    record = schema.read_document(schema.PassRecord, tmp_path / "pass.json")
    parts = pass_seconds(launched, time.time(), record.stamps)
    assert record.stamps["timed"] >= 0 and record.stamps["profiled"] > 0 and min(parts.values()) >= 0
    assert record.work["config"] == {"script": str(script), "args": []}
    assert not (tmp_path / "r.json").exists()  # a counter pass writes its timings only
