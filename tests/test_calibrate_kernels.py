"""The fp32 ceiling kernel computes what its FLOP count says, run by Triton's interpreter on the CPU."""

import pytest
import torch


def test_fma_peak_runs_four_chains_of_iters_fmas(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read when the kernel is defined
    from ssmprof.profiler.calibrate import _fma_peak_kernel

    x, out = torch.randn(2048), torch.empty(2048)
    _fma_peak_kernel()[(2,)](x, out, 1.0001, 0.5, ITERS=16, BLOCK=1024)
    chains = [x + offset for offset in (0.0, 1.0, 2.0, 3.0)]
    for _ in range(16):
        chains = [c * 1.0001 + 0.5 for c in chains]
    assert torch.allclose(out, sum(chains))
