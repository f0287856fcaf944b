"""The fp32, L1 and L2 ceiling kernels compute what their FLOP and byte counts say (Triton's interpreter on the CPU),
and compile for the H100 into the instructions those counts assume (PTX for sm_90, no GPU needed)."""

import re

import torch


def test_fma_peak_runs_four_chains_of_iters_fmas(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read when the kernel is defined
    from ssmprof.profiler.calibrate import _fma_peak_kernel

    x, out = torch.randn(2048), torch.empty(2048)
    _fma_peak_kernel()[(2,)](x, out, 1.0001, 0.5, ITERS=16, BLOCK=1024)
    chains = [x + offset for offset in (0.0, 1.0, 2.0, 3.0)]
    for _ in range(16):
        chains = [c * 1.0001 + 0.5 for c in chains]
    assert torch.allclose(out, sum(chains))


def test_l1_read_sums_iters_blocks_of_its_span_in_every_program(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from ssmprof.profiler.calibrate import L1_BLOCK, L1_SPAN, l1_read

    x, out = torch.randn(L1_SPAN), torch.empty(3 * L1_BLOCK)
    l1_read(x, out, programs=3, iters=8)
    # 8 blocks of 1,024 walk the span of 5 blocks once, then its first 3 again
    blocks = x.view(5, L1_BLOCK)
    expected = blocks.sum(0) + blocks[:3].sum(0)
    assert torch.allclose(out.view(3, L1_BLOCK), expected.expand(3, L1_BLOCK), atol=1e-5)


def test_l2_read_sums_every_programs_blocks_round_the_buffer(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from ssmprof.profiler.calibrate import L1_BLOCK, l2_read

    x, out = torch.randn(7 * L1_BLOCK), torch.empty(3 * L1_BLOCK)
    l2_read(x, out, programs=3, iters=8)
    # program p reads blocks p, p + 3, ..., p + 21, each modulo the 7 blocks
    blocks = x.view(7, L1_BLOCK)
    for program in range(3):
        expected = sum(blocks[(program + 3 * i) % 7] for i in range(8))
        assert torch.allclose(out.view(3, L1_BLOCK)[program], expected, atol=1e-5)


# The same kernels compiled for the H100 (sm_90) here, without a GPU: the PTX of each loop trip shows the work
# the ceiling formulas count. Pointer arguments are 16-byte aligned, as Triton specializes them at launch.
def _hopper_loop_bodies(kernel, scalars: dict, constants: dict) -> list[str]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {"x_ptr": "*fp32", "out_ptr": "*fp32", **scalars, **dict.fromkeys(constants, "constexpr")}
    aligned = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}
    source = ASTSource(kernel, signature=signature, constexprs=constants, attrs=aligned)
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 64)).asm["ptx"]
    bodies = []
    for label in re.finditer(r"^(\$L__BB\d+_\d+):", ptx, re.M):
        back = re.search(rf"bra(?:\.uni)?\s+{re.escape(label.group(1))};", ptx[label.end():])
        if back:
            bodies.append(ptx[label.end():label.end() + back.start()])
    return bodies


ELEMENTS_PER_THREAD = 1024 // (4 * 32)  # BLOCK 1,024 over Triton's default 4 warps


def test_fma_chain_loop_is_one_ffma_per_element_on_hopper():
    from ssmprof.profiler.calibrate import _fma_kernel

    (body,) = _hopper_loop_bodies(_fma_kernel(), {"a": "fp32", "b": "fp32"}, {"ITERS": 256, "BLOCK": 1024})
    assert body.count("fma.rn.f32") == ELEMENTS_PER_THREAD
    assert "mul.f32" not in body and "add.f32" not in body


def test_fma_peak_loop_is_four_chains_unrolled_eight_times_on_hopper():
    from ssmprof.profiler.calibrate import _fma_peak_kernel

    (body,) = _hopper_loop_bodies(_fma_peak_kernel(), {"a": "fp32", "b": "fp32"}, {"ITERS": 256, "BLOCK": 1024})
    assert body.count("fma.rn.f32") == 4 * 8 * ELEMENTS_PER_THREAD


def test_l1_read_loop_loads_a_block_with_vector_loads_on_hopper():
    from ssmprof.profiler.calibrate import L1_BLOCK, L1_ITERS, L1_SPAN, _l1_read_kernel

    (body,) = _hopper_loop_bodies(_l1_read_kernel(), {}, {"ITERS": L1_ITERS, "SPAN": L1_SPAN, "BLOCK": L1_BLOCK})
    # four blocks a trip, each in 16-byte loads cached in L1 (none hoisted), into four independent sums
    assert body.count("ld.global.ca.v4.b32") == 4 * ELEMENTS_PER_THREAD // 4
    assert body.count("add.f32") == 4 * ELEMENTS_PER_THREAD


def test_l2_read_loop_loads_four_blocks_past_l1_on_hopper():
    """A loop trip of four 16-byte `.cg` loads a block (L1 keeps none), none folded away: the private-block variant
    tried on the H100 lost its loop to the compiler, 5 loads a program for 257 blocks."""
    from ssmprof.profiler.calibrate import L1_BLOCK, L2_ITERS, L2_SPAN_BLOCKS, _l2_read_kernel

    (body,) = _hopper_loop_bodies(_l2_read_kernel(), {}, {"ITERS": L2_ITERS, "BLOCKS": L2_SPAN_BLOCKS,
                                                           "BLOCK": L1_BLOCK})
    assert body.count("ld.global.cg.v4.b32") == 4 * ELEMENTS_PER_THREAD // 4
    assert body.count("add.f32") == 4 * ELEMENTS_PER_THREAD
