"""`--cuda-graphs`: refused in one line where a step cannot be captured; its gain set beside the host wait."""

from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import ssmprof
from ssmprof.analysis.step.cuda_graphs import graph_gain
from ssmprof.analysis.step.host import host_summary
from ssmprof.cli import app
from ssmprof.pipeline.loading import load_run
from ssmprof.profiler.harness import capture_refusal
from ssmprof.workloads.registry import get_workload

H100 = Path(ssmprof.__file__).parent / "reference" / "h100-sxm"
GPU, CPU = SimpleNamespace(device="cuda"), SimpleNamespace(device="cpu")


@pytest.mark.parametrize(("workload", "plan", "parallel", "refusal"), [
    ("mamba2-lm", GPU, False, None),
    ("mamba-vision", GPU, False, None),
    ("mamba2-lm", CPU, False, "--cuda-graphs needs a CUDA GPU"),
    ("mamba2-lm", GPU, True, "--cuda-graphs runs one process"),
    ("graph-mamba", GPU, False, "graph-mamba cannot be captured as a CUDA graph: every training batch is another "
                                "set of molecular graphs"),
])
def test_what_cannot_be_captured_is_refused_with_its_reason(workload, plan, parallel, refusal):
    reason = capture_refusal(get_workload(workload), plan, parallel)
    assert reason == refusal if refusal is None else reason.startswith(refusal)


def test_run_refuses_cuda_graphs_without_a_gpu_in_one_line(tmp_path):
    result = CliRunner().invoke(app, ["run", "mamba2-lm", "--preset", "tiny", "--device", "cpu", "--cuda-graphs",
                                      "--json", str(tmp_path / "out.json")])
    assert result.exit_code != 0
    assert "--cuda-graphs needs a CUDA GPU" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out.json").exists()


def test_the_gain_is_set_beside_the_host_wait_with_its_noise():
    """The bundled H100 mamba2-lm run's eager steps (214.7 ms, spread 13.0 ms) and host wait, beside graphed steps
    of a scenario: 10 ms saved, outside the steps' spread; 2 ms, within it; and a graphed step shorter than the
    GPU's busy time, which fails the check."""
    run = load_run(H100 / "mamba2-lm")
    harness = run.info.harness.model_dump()
    host = host_summary(run.kernels, harness["step_ms"])
    assert graph_gain(harness, host) is None  # recorded without --cuda-graphs
    faster = graph_gain({**harness, "cuda_graphs": {"step_ms": harness["step_ms"] - 10.0,
                                                    "step_times_ms": [204.5, 204.7, 205.0]}}, host).iloc[0]
    assert round(faster["host_wait_ms"], 1) == round(harness["step_ms"] - host["gpu_busy_ms"].iloc[0], 1)
    assert round(faster["gain_ms"], 3) == 10.0 and faster["verdict"] == "faster" and faster["check"] == "ok"
    assert round(faster["noise_ms"], 2) == round((225.92 - 212.92 + 0.5) / 2, 2)
    assert faster["gain_share_of_host_wait"] == pytest.approx(10.0 / faster["host_wait_ms"])
    same = graph_gain({**harness, "cuda_graphs": {"step_ms": harness["step_ms"] - 2.0,
                                                  "step_times_ms": [212.7, 212.8]}}, host).iloc[0]
    assert same["verdict"] == "within noise"
    impossible = graph_gain({**harness, "cuda_graphs": {"step_ms": 100.0, "step_times_ms": [100.0]}}, host).iloc[0]
    assert impossible["check"].startswith("graphed step under the GPU's busy time")


@pytest.mark.gpu
@pytest.mark.parametrize("workload", ["mamba2-lm", "mamba-vision"])
def test_a_captured_step_replays_on_the_gpu(tmp_path, workload):
    """On a GPU: the tiny step captures, its replays are timed and no slower than the eager step beyond noise. In
    bf16: the tiny preset's fp32 (a CPU's) has no fused attention, which mamba-vision's step needs."""
    import json

    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["run", workload, "--preset", "tiny", "--dtype", "bf16", "--steps", "5",
                                      "--cuda-graphs", "--json", str(out)])
    assert result.exit_code == 0, result.output
    run = json.loads(out.read_text())
    assert len(run["graphed_step_times_ms"]) == 5 and run["graphed_step_ms"] > 0
    spread = max(run["step_times_ms"]) - min(run["step_times_ms"])
    assert run["graphed_step_ms"] <= run["step_ms"] + spread
