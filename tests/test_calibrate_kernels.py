"""The fp32 and L1 ceiling kernels compute what its FLOP count says, run by Triton's interpreter on the CPU."""

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


def test_l1_read_sums_iters_blocks_of_its_span_in_every_program(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from ssmprof.profiler.calibrate import L1_BLOCK, L1_SPAN, l1_read

    x, out = torch.randn(L1_SPAN), torch.empty(3 * L1_BLOCK)
    l1_read(x, out, programs=3, iters=6)
    # 6 blocks of 1,024 walk the 4,096-float span: its four blocks, then the first two again
    blocks = x.view(4, L1_BLOCK)
    expected = blocks.sum(0) + blocks[0] + blocks[1]
    assert torch.allclose(out.view(3, L1_BLOCK), expected.expand(3, L1_BLOCK), atol=1e-5)
