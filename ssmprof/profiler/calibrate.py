"""`ssmprof calibrate`: check our counter formulas on kernels whose work we know, and measure ceilings.

Checks (Nsight Compute on a child process, like the counter collector):
- a bf16 GEMM of M x N x K: tensor-path ops must equal 2*M*N*K within 1 % (a tensor-path "op" is one FLOP);
- a Triton kernel of ITERS chained fp32 multiply-adds on each of N elements: fadd + fmul + 2*ffma must
  equal 2*N*ITERS within 1 %;
- a copy kernel over S bytes: DRAM bytes read + written must equal 2*S within 2 %;
- the L1 read kernel: L1 bytes must equal every block it reads plus the sums it stores within 2 % (a load the
  compiler hoisted out of the loop would leave its bytes uncounted);
- the L2 read kernel: likewise, its loads going past L1 to L2.

Ceilings are the fastest rate a probe reaches, measured two ways. The same child runs `ceiling_probes` under
Nsight Compute after the checks: GEMMs of the shapes and operand layouts the workloads run, write-only, read-only
and copy streams far larger than L2, the L2 and L1 read kernels at full size and independent FMA chains; each
rate is the probe's counters over its own counted duration, the units and the instrument every kernel of a run
is placed on the roofline with (`analysis.trust.calibration.counter_ceilings`). In this process, CUDA events time the
same kinds of probe (`measure_ceilings`, median of repeats) as the second collector. A kernel of a run above its
GPU's ceiling is a calibration defect, reported as such, so the probes are chosen to reach what kernels reach.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd
import torch

from ssmprof import schema
from ssmprof.errors import NoGpu
from ssmprof.profiler.counters import run_ncu
from ssmprof.profiler.markers import NvtxMarker
from ssmprof.profiler.ncu_extract import read_report
from ssmprof.schema import FORWARD

GEMM_MNK = (4096, 4096, 4096)
FMA_ELEMENTS, FMA_ITERS = 1 << 24, 256
COPY_BYTES = 1 << 30  # 1 GiB: 20x the H100's L2, so the copy streams through DRAM
# The L2 read kernel: 8 programs an SM read 4 blocks a trip of a 16 MiB buffer (a third of the H100's L2) with `.cg`
# loads, which L1 does not keep. It replaced 200 copies of an 8 MiB buffer replayed as one CUDA graph, which measured
# 4,707 GB/s where this kernel reads 8,605 GB/s on the H100 (tests/data/calibrate-h100/l2-probe.log). Every block is
# read by many programs; Hopper's L2 request coalescer merges some of their requests before the L2 slices count them
# (lts__t sectors 91.9 % of those L1 received, l2-probe-sectors.log), so its check counts the bytes L1 asks for, and
# the ceiling is in bytes L2 delivers. A variant whose programs read private blocks was folded by the compiler.
L2_SPAN_BLOCKS, L2_ITERS, L2_PROGRAMS_PER_SM = 4096, 2048, 8
L2_CHECK_PROGRAMS, L2_CHECK_ITERS = 1056, 256  # 8 programs on each of 132 SMs, 256 blocks each: 136 us on the H100
# The span is 5 blocks (20 KiB) while a trip reads 4: each sum's block moves every trip, so no load is loop-invariant
# (over a 4-block span the compiler hoisted them all out of the loop, and the H100 counted 145 GB/s of L1 traffic
# for a "6.7 TB/s" kernel). The ceiling launch reads 16,384 blocks a program: 2.6 ms on the H100, so the ~30 us
# of launching it from Python stay under 1 % of what is timed.
L1_SPAN, L1_BLOCK, L1_ITERS = 5 * 1024, 1024, 16384
L1_CHECK_PROGRAMS, L1_CHECK_ITERS = 132, 256  # the known-work launch: small, so ncu replays it quickly


# What each launch does, for `ssmprof.analysis.trust.calibration.evaluate`: the derived column (computed by
# the same `derive` the analyses use) must equal `expected` within `tolerance_pct`.
KNOWN_WORK = (
    {"check": "tensor FLOPs (bf16 GEMM)", "kernel": r"^(?:nvjet|sm90|cutlass|ampere|gemm)", "column": "flops_tensor",
     "expected": 2.0 * GEMM_MNK[0] * GEMM_MNK[1] * GEMM_MNK[2], "tolerance_pct": 1.0, "unit": "FLOP"},
    {"check": "vector FLOPs (fp32 FMA chain)", "kernel": r"^fma_chain$", "column": "flops_fp32",
     "expected": 2.0 * FMA_ELEMENTS * FMA_ITERS, "tolerance_pct": 1.0, "unit": "FLOP"},
    {"check": "DRAM bytes (copy kernel)", "kernel": r"elementwise", "column": "dram_bytes",
     "expected": 2.0 * COPY_BYTES, "tolerance_pct": 2.0, "unit": "bytes"},
    # every block read through L1, and the sums stored: what the L1 ceiling's bytes count assumes
    {"check": "L1 bytes (L1 read kernel)", "kernel": r"^l1_read$", "column": "l1_bytes",
     "expected": 4.0 * L1_CHECK_PROGRAMS * L1_BLOCK * (L1_CHECK_ITERS + 1), "tolerance_pct": 2.0, "unit": "bytes"},
    # every block asked of L1 (which keeps none of them: `.cg`) and so of L2, and the sums stored
    {"check": "L1 bytes (L2 read kernel)", "kernel": r"^l2_read$", "column": "l1_bytes",
     "expected": 4.0 * L2_CHECK_PROGRAMS * L1_BLOCK * (L2_CHECK_ITERS + 1), "tolerance_pct": 2.0, "unit": "bytes"},
)


def _fma_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def fma_chain(x_ptr, out_ptr, a, b, ITERS: tl.constexpr, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offsets)
        for _ in range(ITERS):
            x = tl.fma(x, a, b)  # one FFMA per element per iteration, whether or not Triton contracts mul+add
        tl.store(out_ptr + offsets, x)

    return fma_chain


def _fma_peak_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def fma_peak(x_ptr, out_ptr, a, b, ITERS: tl.constexpr, BLOCK: tl.constexpr):
        # Four independent chains, eight steps unrolled per loop trip: the chain kernel above spends issue
        # slots on its loop counter and waits on each FMA's result, and reached 37 % of the fp32 datasheet.
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x0 = tl.load(x_ptr + offsets)
        x1, x2, x3 = x0 + 1.0, x0 + 2.0, x0 + 3.0
        for _ in range(ITERS // 8):
            for _ in tl.static_range(8):
                x0, x1, x2, x3 = tl.fma(x0, a, b), tl.fma(x1, a, b), tl.fma(x2, a, b), tl.fma(x3, a, b)
        tl.store(out_ptr + offsets, x0 + x1 + x2 + x3)

    return fma_peak


def _l1_read_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def l1_read(x_ptr, out_ptr, ITERS: tl.constexpr, SPAN: tl.constexpr, BLOCK: tl.constexpr):
        # Every program reads the same SPAN floats (20 KiB: in every SM's L1 after the first pass) ITERS
        # times, BLOCK at a time; the offset moves with the loop so the compiler cannot hoist the load. BLOCK
        # divides SPAN, so each block starts 16-byte aligned; `multiple_of` tells the compiler so, for 16-byte
        # vector loads, cached in L1 (.ca). Without it Triton 3.6 (the GPU hosts') made the loop's loads 4-byte
        # scalar ones, each warp's load touching four times the bytes it used (a 16-byte stride between lanes),
        # and Nsight Compute counted l1tex__t_bytes 3.94x the known bytes (H100); with it the count is exact
        # (tests/data/calibrate-h100). Four blocks a trip into four sums: with one running sum each trip waited for its
        # load, and the kernel reached 3.2 TB/s on the H100, below its L2 ceiling.
        lanes = tl.arange(0, BLOCK)
        s0 = tl.load(x_ptr + lanes)
        s1 = tl.load(x_ptr + BLOCK % SPAN + lanes)
        s2 = tl.load(x_ptr + (2 * BLOCK) % SPAN + lanes)
        s3 = tl.load(x_ptr + (3 * BLOCK) % SPAN + lanes)
        for step in range(4, ITERS, 4):  # ITERS: a multiple of 4
            s0 += tl.load(x_ptr + tl.multiple_of((step * BLOCK) % SPAN, BLOCK) + lanes, cache_modifier=".ca")
            s1 += tl.load(x_ptr + tl.multiple_of(((step + 1) * BLOCK) % SPAN, BLOCK) + lanes, cache_modifier=".ca")
            s2 += tl.load(x_ptr + tl.multiple_of(((step + 2) * BLOCK) % SPAN, BLOCK) + lanes, cache_modifier=".ca")
            s3 += tl.load(x_ptr + tl.multiple_of(((step + 3) * BLOCK) % SPAN, BLOCK) + lanes, cache_modifier=".ca")
        tl.store(out_ptr + tl.program_id(0) * BLOCK + lanes, s0 + s1 + s2 + s3)

    return l1_read


def _l2_read_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def l2_read(x_ptr, out_ptr, ITERS: tl.constexpr, BLOCKS: tl.constexpr, BLOCK: tl.constexpr):
        # Program p reads blocks p, p + P, p + 2P, ... (P programs, a runtime number) round the buffer, four at a time
        # into four sums so that four loads are in flight; `.cg` keeps them out of L1, so every byte comes from L2.
        # The offsets depend on P, so the compiler cannot prove two trips read the same block and fold them.
        lanes, programs = tl.arange(0, BLOCK), tl.num_programs(0)
        s0 = tl.load(x_ptr + tl.multiple_of((tl.program_id(0) % BLOCKS) * BLOCK, BLOCK) + lanes, cache_modifier=".cg")
        s1 = tl.load(x_ptr + tl.multiple_of(((tl.program_id(0) + programs) % BLOCKS) * BLOCK, BLOCK) + lanes,
                     cache_modifier=".cg")
        s2 = tl.load(x_ptr + tl.multiple_of(((tl.program_id(0) + 2 * programs) % BLOCKS) * BLOCK, BLOCK) + lanes,
                     cache_modifier=".cg")
        s3 = tl.load(x_ptr + tl.multiple_of(((tl.program_id(0) + 3 * programs) % BLOCKS) * BLOCK, BLOCK) + lanes,
                     cache_modifier=".cg")
        for step in range(4, ITERS, 4):  # ITERS: a multiple of 4
            first = tl.program_id(0) + step * programs
            s0 += tl.load(x_ptr + tl.multiple_of((first % BLOCKS) * BLOCK, BLOCK) + lanes, cache_modifier=".cg")
            s1 += tl.load(x_ptr + tl.multiple_of(((first + programs) % BLOCKS) * BLOCK, BLOCK) + lanes,
                          cache_modifier=".cg")
            s2 += tl.load(x_ptr + tl.multiple_of(((first + 2 * programs) % BLOCKS) * BLOCK, BLOCK) + lanes,
                          cache_modifier=".cg")
            s3 += tl.load(x_ptr + tl.multiple_of(((first + 3 * programs) % BLOCKS) * BLOCK, BLOCK) + lanes,
                          cache_modifier=".cg")
        tl.store(out_ptr + tl.program_id(0) * BLOCK + lanes, s0 + s1 + s2 + s3)

    return l2_read


def l2_read(x: torch.Tensor, out: torch.Tensor, programs: int, iters: int = L2_ITERS) -> None:
    _l2_read_kernel()[(programs,)](x, out, ITERS=iters, BLOCKS=x.numel() // L1_BLOCK, BLOCK=L1_BLOCK)


def l1_read(x: torch.Tensor, out: torch.Tensor, programs: int, iters: int = L1_ITERS) -> None:
    _l1_read_kernel()[(programs,)](x, out, ITERS=iters, SPAN=L1_SPAN, BLOCK=L1_BLOCK)


def fma_chain(x: torch.Tensor, out: torch.Tensor, iters: int) -> None:
    block = 1024
    _fma_kernel()[(x.numel() // block,)](x, out, 1.0001, 0.5, ITERS=iters, BLOCK=block)


def known_work() -> list:
    """The calibration launches (KNOWN_WORK's), as closures over preallocated buffers (random data, never zeros)."""
    m, n, k = GEMM_MNK
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    x, y = torch.randn(FMA_ELEMENTS, device="cuda"), torch.empty(FMA_ELEMENTS, device="cuda")
    src = torch.randn(COPY_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    span, sums = torch.randn(L1_SPAN, device="cuda"), torch.empty(L1_CHECK_PROGRAMS * L1_BLOCK, device="cuda")
    buffer = torch.randn(L2_SPAN_BLOCKS * L1_BLOCK, device="cuda")
    l2_sums = torch.empty(L2_CHECK_PROGRAMS * L1_BLOCK, device="cuda")
    return [lambda: a @ b, lambda: fma_chain(x, y, FMA_ITERS), lambda: copy_kernel(src, dst),
            lambda: l1_read(span, sums, L1_CHECK_PROGRAMS, L1_CHECK_ITERS),
            lambda: l2_read(buffer, l2_sums, L2_CHECK_PROGRAMS, L2_CHECK_ITERS)]


# GEMM probes (M, K, N): the workloads' own shapes (the paper presets' projections, MLP and LM head, whose GEMMs
# under Nsight Compute reach more than a square one), each with its operands as the workloads lay them out:
# plain, the first transposed (weight gradients) and the second transposed (a linear layer's weight).
GEMM_PROBE_SHAPES = ((8192, 4096, 4096), (8192, 16384, 4096), (50280, 8192, 4096), (8192, 18560, 4096),
                     (8192, 4096, 50280), (16384, 8192, 8192))
GEMM_LAYOUTS = ("NN", "TN", "NT")
STREAM_BYTES = 2 << 30  # 2 GiB streams: 40x the H100's L2, so what is counted is DRAM's


def gemm_operands(m: int, k: int, n: int, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 operands of an M x K by K x N product; a "T" operand is the transposed view of a contiguous tensor,
    so cuBLAS takes its other layout (as for `x.t() @ grad` and `x @ w.t()`)."""
    a = (torch.randn(k, m, device="cuda", dtype=torch.bfloat16).t() if layout[0] == "T"
         else torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
    b = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t() if layout[1] == "T"
         else torch.randn(k, n, device="cuda", dtype=torch.bfloat16))
    return a, b


def ceiling_probes() -> list:
    """Launches built to reach each ceiling, as closures over preallocated buffers; run under Nsight Compute
    after the known-work launches, whose kernels they share (so the checks find theirs first)."""
    gemms = [gemm_operands(*shape, layout) for shape in GEMM_PROBE_SHAPES for layout in GEMM_LAYOUTS]
    stream = torch.empty(STREAM_BYTES // 4, device="cuda")
    source = torch.randn(STREAM_BYTES // 8, device="cuda")
    target = torch.empty_like(source)
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    l2_buffer = torch.randn(L2_SPAN_BLOCKS * L1_BLOCK, device="cuda")
    l2_sums = torch.empty(L2_PROGRAMS_PER_SM * programs * L1_BLOCK, device="cuda")
    span, l1_sums = torch.randn(L1_SPAN, device="cuda"), torch.empty(8 * programs * L1_BLOCK, device="cuda")
    x, y = torch.randn(FMA_ELEMENTS, device="cuda"), torch.empty(FMA_ELEMENTS, device="cuda")
    peak = _fma_peak_kernel()
    return [*(lambda a=a, b=b: a @ b for a, b in gemms),
            lambda: stream.fill_(1.0),  # write-only
            lambda: stream.sum(),  # read-only
            lambda: copy_kernel(source, target),
            lambda: l2_read(l2_buffer, l2_sums, L2_PROGRAMS_PER_SM * programs),
            lambda: l1_read(span, l1_sums, 8 * programs),
            lambda: peak[(FMA_ELEMENTS // 1024,)](x, y, 1.0001, 0.5, ITERS=1024, BLOCK=1024)]


def copy_kernel(src: torch.Tensor, dst: torch.Tensor) -> None:
    """A copy done by a kernel (reads S, writes S): `copy_` would be a cudaMemcpy, which ncu does not profile."""
    torch.mul(src, 1.0, out=dst)


# Each ceiling probe runs this many times under Nsight Compute and the fastest counts: a ceiling is the best a probe
# reaches, so one launch, subject to the clocks of its moment, is a sample of it, not its maximum.
PROBE_REPEATS = 3


def child() -> int:
    """Run under ncu: warm each launch up outside the profiled bracket, then launch the known-work kernels once and
    the ceiling probes PROBE_REPEATS times inside it."""
    checks, probes = known_work(), ceiling_probes()
    for launch in checks + probes:
        launch()
    torch.cuda.synchronize()
    marker = NvtxMarker()
    torch.cuda.profiler.start()
    with marker.phase(FORWARD):
        for launch in checks + probes * PROBE_REPEATS:
            launch()
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


def _median_ms(launch, repeats: int = 20) -> float:
    launch()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _graph_gb_s(launch, moved_bytes: int) -> float:
    """`moved_bytes` over the median time of `launch` replayed as a CUDA graph (no Python in the timed interval)."""
    launch()  # load the kernel before capturing
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    return moved_bytes / (_median_ms(graph.replay, 10) / 1e3) / 1e9


def _dram_gb_s() -> float:
    """The best of a write-only, a read-only and a copy stream over STREAM_BYTES (a copy alone reads and writes at
    once, and is not the fastest way to move DRAM bytes)."""
    stream = torch.empty(STREAM_BYTES // 4, device="cuda")
    sums = torch.empty((), device="cuda")
    write = _graph_gb_s(lambda: stream.fill_(1.0), STREAM_BYTES)
    read = _graph_gb_s(lambda: torch.sum(stream, dim=0, out=sums), STREAM_BYTES)
    src = torch.randn(STREAM_BYTES // 8, device="cuda")
    dst = torch.empty_like(src)
    return max(write, read, _graph_gb_s(lambda: copy_kernel(src, dst), STREAM_BYTES))


def _l2_gb_s() -> float:
    """Bytes per second `l2_read` takes from L2 (L2_PROGRAMS_PER_SM programs an SM, L2_ITERS blocks each: about
    1 ms on the H100). Defined once, outside what is timed (see `_l1_gb_s`)."""
    programs = L2_PROGRAMS_PER_SM * torch.cuda.get_device_properties(0).multi_processor_count
    kernel, blocks = _l2_read_kernel(), L2_SPAN_BLOCKS
    x, out = torch.randn(blocks * L1_BLOCK, device="cuda"), torch.empty(programs * L1_BLOCK, device="cuda")

    def launch():
        kernel[(programs,)](x, out, ITERS=L2_ITERS, BLOCKS=blocks, BLOCK=L1_BLOCK)

    return programs * L2_ITERS * L1_BLOCK * 4 / (_median_ms(launch, 5) / 1e3) / 1e9


def _gemm_tflops() -> float:
    """The best of the GEMM probes (every shape and layout of `ceiling_probes`), event-timed."""
    best = 0.0
    for m, k, n in GEMM_PROBE_SHAPES:
        for layout in GEMM_LAYOUTS:
            a, b = gemm_operands(m, k, n, layout)
            best = max(best, 2 * m * n * k / (_median_ms(lambda a=a, b=b: a @ b, 10) / 1e3) / 1e12)
            del a, b
    return best


def _fma_tflops(iters: int = 4096) -> float:
    """fp32 FMA throughput of `fma_peak` (4 chains x iters FMAs per element, 2 FLOPs each)."""
    x, y = torch.randn(FMA_ELEMENTS, device="cuda"), torch.empty(FMA_ELEMENTS, device="cuda")
    block, kernel = 1024, _fma_peak_kernel()

    def launch():
        kernel[(FMA_ELEMENTS // block,)](x, y, 1.0001, 0.5, ITERS=iters, BLOCK=block)

    return 2 * 4 * FMA_ELEMENTS * iters / (_median_ms(launch, 5) / 1e3) / 1e12


def _l1_gb_s() -> float:
    """Bytes per second read by `l1_read` from a 20 KiB span every SM holds in L1 (8 programs per SM). The kernel
    is defined once, outside what is timed: defining it again at each launch (as `l1_read` does) cost ~3.7 ms of
    Python before the launch, inside the timed interval, and the "ceiling" came out 4.7 TB/s where Nsight Compute
    timed the launch at 21.7 TB/s (H100; docs/history.md)."""
    programs, kernel = 8 * torch.cuda.get_device_properties(0).multi_processor_count, _l1_read_kernel()
    x, out = torch.randn(L1_SPAN, device="cuda"), torch.empty(programs * L1_BLOCK, device="cuda")

    def launch():
        kernel[(programs,)](x, out, ITERS=L1_ITERS, SPAN=L1_SPAN, BLOCK=L1_BLOCK)

    milliseconds = _median_ms(launch, 5)
    return programs * L1_ITERS * L1_BLOCK * 4 / (milliseconds / 1e3) / 1e9


def measure_ceilings() -> dict:
    """Achievable rates on this GPU timed by CUDA events (the second collector beside the probes' counters): DRAM
    from the best of three streams 40x larger than L2, L2 from `l2_read` over a buffer that fits in it (bytes L1
    asks for, which the L2 slices count less of where requests coalesce), L1 from repeated reads of a span that
    fits in every SM's L1, bf16 tensor from the best GEMM probe, fp32 from `fma_peak` (independent FMA chains,
    unrolled)."""
    return {"dram_gb_s": _dram_gb_s(), "l2_gb_s": _l2_gb_s(),
            "l1_gb_s": _l1_gb_s(), "bf16_tensor_tflops": _gemm_tflops(), "fp32_tflops": _fma_tflops(),
            "source": "measured by ssmprof calibrate"}


def run_calibration(ncu_timeout_s: float = 900, keep_report: Path | None = None) -> tuple[pd.DataFrame, dict, float]:
    """(report of the KNOWN_WORK launches, measured ceilings, ncu wall seconds) on the visible GPU; the
    report of those few launches is copied to `keep_report` if given (small: the test fixture for extraction)."""
    if not torch.cuda.is_available():
        raise NoGpu("calibrate measures a GPU: no CUDA GPU is visible")
    ceilings = measure_ceilings()
    torch.cuda.empty_cache()  # the ncu child needs the memory
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "calibrate.ncu-rep"
        wall = run_ncu([sys.executable, "-m", "ssmprof.profiler.calibrate", "child"], report, "all", ncu_timeout_s)
        if keep_report is not None:
            schema.copy_file(report, keep_report)
        return read_report(report), ceilings, wall


if __name__ == "__main__":
    raise SystemExit(child() if sys.argv[1:] == ["child"] else 2)
