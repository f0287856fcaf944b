"""`ssmprof profile --script` on a GPU: the counter passes run the script as the timeline did, and a profiled
step that launches no GPU kernel is one line naming the script's line."""

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ssmprof import schema
from ssmprof.cli import app

pytestmark = pytest.mark.gpu
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_script.py"


def test_a_script_gets_counters_on_its_launches(tmp_path):
    script = tmp_path / "train.py"
    shutil.copy(EXAMPLE, script)
    result = CliRunner().invoke(app, ["profile", "--script", str(script), "--out", str(tmp_path), "--name", "run",
                                      "--counters", "focus", "--", "--preset", "tiny", "--steps", "20"])
    assert result.exit_code == 0, result.output
    run = schema.read_run(tmp_path / "run")
    assert set(run.kernels["phase"]) >= {"forward", "backward", "optimizer"}
    assert (run.kernels["counter_status"] == "measured").any() and run.info.harness.throughput > 0


def test_a_step_without_gpu_work_is_one_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\nimport ssmprof\n\nfor i in range(20):\n    with ssmprof.step():\n"
                      "        torch.ones(4).sum()\n")
    result = CliRunner().invoke(app, ["profile", "--script", str(script), "--out", str(tmp_path / "runs")])
    assert result.exit_code == 1
    assert f"{script}:5: the profiled ssmprof.step() launched no GPU kernel" in result.output
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
