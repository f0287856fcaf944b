"""Application replay for processes holding more than half the GPU: the argv, the automatic choice, the option."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ssmprof
from ssmprof.cli import app
from ssmprof.errors import SsmprofError
from ssmprof.profiler.counters import replay_mode
from ssmprof.profiler.ncu_argv import ncu_argv

TARGET = ["python", "-m", "ssmprof.profiler.ncu_child", "mamba3-lm", "paper", "{}", "1"]
REFERENCE = Path(ssmprof.__file__).parent / "reference"
H100_BYTES = 85017493504  # run.json's gpu.memory_bytes of the H100 runs


def test_application_replay_reruns_the_target_once_per_pass(tmp_path):
    argv = ncu_argv(TARGET, tmp_path / "r", "sampled", replay="application")
    assert argv[argv.index("--replay-mode") + 1] == "application" and argv[-len(TARGET):] == TARGET
    assert argv[argv.index("--filter-mode") + 1] == "per-launch-config"  # the same launches in every process
    assert "--replay-mode" not in ncu_argv(TARGET, tmp_path / "r", "sampled")  # kernel replay: ncu's default
    targeted = ncu_argv(TARGET, tmp_path / "r", "sampled", targets={"k": [2]}, replay="application")
    assert "--kernel-id" in targeted and "--replay-mode" in targeted
    with pytest.raises(ValueError, match="replay"):
        ncu_argv(TARGET, tmp_path / "r", "sampled", replay="range")


def test_auto_takes_application_replay_for_mamba3_paper_on_the_h100_only():
    """mamba3-lm paper holds 49 GiB at its peak (the bundled H200 run): over half the H100, under half the H200."""
    run = json.loads((REFERENCE / "h200" / "mamba3-lm" / "run.json").read_text())
    held = run["harness"]["peak_memory_bytes"]
    assert replay_mode("auto", held, H100_BYTES) == "application"
    assert replay_mode("auto", held, run["gpu"]["memory_bytes"]) == "kernel"
    mamba2 = json.loads((REFERENCE / "h100-sxm" / "mamba2-lm" / "run.json").read_text())
    assert replay_mode("auto", mamba2["harness"]["peak_memory_bytes"], H100_BYTES) == "kernel"  # 35.9 GiB fits
    assert replay_mode("kernel", held, H100_BYTES) == "kernel"  # asked for: kept
    assert replay_mode("application", 0, H100_BYTES) == "application"
    assert replay_mode("auto", None, H100_BYTES) == "kernel"  # nothing measured: ncu's default
    with pytest.raises(SsmprofError, match="--replay must be"):
        replay_mode("range", held, H100_BYTES)


def test_profile_refuses_an_unknown_replay_in_one_line_before_running_anything(tmp_path):
    result = CliRunner().invoke(app, ["profile", "mamba2-lm", "--preset", "tiny", "--replay", "range",
                                      "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "--replay must be auto, kernel or application, got 'range'" in result.output
    assert "Traceback" not in result.output and not any(tmp_path.iterdir())
