"""Real training iterations on the GPU through the CLI: fused kernels, finite loss, memory measured."""

import json

import pytest
from typer.testing import CliRunner

from ssmprof.cli import app

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("workload", ["mamba2-lm", "hybrid"])
def test_run_tiny_on_gpu_uses_fused_kernels(tmp_path, workload):
    out = tmp_path / "result.json"
    result = CliRunner().invoke(app, ["run", workload, "--preset", "tiny", "--device", "cuda", "--steps", "2",
                                      "--warmup", "1", "--dtype", "bf16", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["provenance"]["ssd"].startswith("triton-fused")
    assert data["provenance"]["conv1d"].startswith("causal-conv1d-cuda")
    assert data["peak_memory_bytes"] > 0 and data["gpu"]["sm_count"] > 0
