"""`ssmprof calibrate`: check our counter formulas on kernels whose work we know, and measure ceilings.

Checks (Nsight Compute on a child process, like the counter collector):
- a bf16 GEMM of M x N x K: tensor-path ops must equal 2*M*N*K within 1 % (a tensor-path "op" is one FLOP);
- a Triton kernel of ITERS chained fp32 multiply-adds on each of N elements: fadd + fmul + 2*ffma must
  equal 2*N*ITERS within 1 %;
- a copy kernel over S bytes: DRAM bytes read + written must equal 2*S within 2 %;
- the L1 read kernel: L1 bytes must equal every block it reads plus the sums it stores within 2 % (a load the
  compiler hoisted out of the loop would leave its bytes uncounted).
Ceilings (CUDA events, in this process, median of repeats): DRAM GB/s (a copy far larger than L2),
L2 GB/s (a copy that fits in L2, repeated), L1 GB/s (reads of a span that fits in L1, repeated), bf16
tensor TFLOP/s (the best of several large GEMMs), fp32 TFLOP/s (independent FMA chains). They are
written to a device profile that rooflines use instead of datasheet numbers.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd
import torch

from ssmprof.errors import NoGpu
from ssmprof.profiler.counters import run_ncu
from ssmprof.profiler.markers import NvtxMarker
from ssmprof.profiler.ncu_extract import read_report
from ssmprof.schema import FORWARD

GEMM_MNK = (4096, 4096, 4096)
FMA_ELEMENTS, FMA_ITERS = 1 << 24, 256
COPY_BYTES = 1 << 30  # 1 GiB: 20x the H100's L2, so the copy streams through DRAM
L2_COPY_BYTES = 8 << 20  # 8 MiB source + 8 MiB destination fit in a 50 MB L2
# The span is 5 blocks (20 KiB) while a trip reads 4: each sum's block moves every trip, so no load is loop-invariant
# (over a 4-block span the compiler hoisted them all out of the loop, and the H100 counted 145 GB/s of L1 traffic
# for a "6.7 TB/s" kernel). The ceiling launch reads 16,384 blocks a program: 2.6 ms on the H100, so the ~30 us
# of launching it from Python stay under 1 % of what is timed.
L1_SPAN, L1_BLOCK, L1_ITERS = 5 * 1024, 1024, 16384
L1_CHECK_PROGRAMS, L1_CHECK_ITERS = 132, 256  # the known-work launch: small, so ncu replays it quickly


# What each launch does, for `ssmprof.analysis.calibration.evaluate`: the derived column (computed by
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
        # and Nsight Compute counted l1tex__t_bytes 3.94x the known bytes (H100, 2026-11-23); with it the count is
        # exact (2026-11-24). Four blocks a trip into four sums: with one running sum each trip waited for its
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




def l1_read(x: torch.Tensor, out: torch.Tensor, programs: int, iters: int = L1_ITERS) -> None:
    _l1_read_kernel()[(programs,)](x, out, ITERS=iters, SPAN=L1_SPAN, BLOCK=L1_BLOCK)


def fma_chain(x: torch.Tensor, out: torch.Tensor, iters: int) -> None:
    block = 1024
    _fma_kernel()[(x.numel() // block,)](x, out, 1.0001, 0.5, ITERS=iters, BLOCK=block)


def known_work() -> list:
    """The four calibration launches, as closures over preallocated buffers (random data, never zeros)."""
    m, n, k = GEMM_MNK
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    x, y = torch.randn(FMA_ELEMENTS, device="cuda"), torch.empty(FMA_ELEMENTS, device="cuda")
    src = torch.randn(COPY_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    span, sums = torch.randn(L1_SPAN, device="cuda"), torch.empty(L1_CHECK_PROGRAMS * L1_BLOCK, device="cuda")
    return [lambda: a @ b, lambda: fma_chain(x, y, FMA_ITERS), lambda: copy_kernel(src, dst),
            lambda: l1_read(span, sums, L1_CHECK_PROGRAMS, L1_CHECK_ITERS)]


def copy_kernel(src: torch.Tensor, dst: torch.Tensor) -> None:
    """A copy done by a kernel (reads S, writes S): `copy_` would be a cudaMemcpy, which ncu does not profile."""
    torch.mul(src, 1.0, out=dst)


def child() -> int:
    """Run under ncu: warm each launch up outside the profiled bracket, then launch each once inside it."""
    launches = known_work()
    for launch in launches:
        launch()
    torch.cuda.synchronize()
    marker = NvtxMarker()
    torch.cuda.profiler.start()
    with marker.phase(FORWARD):
        for launch in launches:
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


def _copy_gb_s(nbytes: int, copies: int) -> float:
    """Bytes moved (read + write) per second by `copies` back-to-back copy kernels over `nbytes`, replayed
    as one CUDA graph: an L2-sized copy lasts a few microseconds, less than launching it from Python takes
    (launched one by one, the "L2" ceiling came out below the DRAM ceiling)."""
    src = torch.randn(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    copy_kernel(src, dst)  # load the kernel before capturing
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(copies):
            copy_kernel(src, dst)
    return copies * 2 * nbytes / (_median_ms(graph.replay, 10) / 1e3) / 1e9


# bf16 GEMM shapes (M, N, K) for the tensor ceiling: the best of several, since cuBLAS's tile choice makes one
# shape faster than another (the workloads' own GEMMs beat a single 8192^3 one on the H100)
GEMM_SHAPES = ((8192, 8192, 8192), (16384, 8192, 8192), (8192, 16384, 4096), (16384, 16384, 4096))


def _gemm_tflops() -> float:
    best = 0.0
    for m, n, k in GEMM_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        best = max(best, 2 * m * n * k / (_median_ms(lambda a=a, b=b: a @ b) / 1e3) / 1e12)
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
    timed the launch at 21.7 TB/s (H100, 2026-11-24)."""
    programs, kernel = 8 * torch.cuda.get_device_properties(0).multi_processor_count, _l1_read_kernel()
    x, out = torch.randn(L1_SPAN, device="cuda"), torch.empty(programs * L1_BLOCK, device="cuda")

    def launch():
        kernel[(programs,)](x, out, ITERS=L1_ITERS, SPAN=L1_SPAN, BLOCK=L1_BLOCK)

    milliseconds = _median_ms(launch, 5)
    return programs * L1_ITERS * L1_BLOCK * 4 / (milliseconds / 1e3) / 1e9


def measure_ceilings() -> dict:
    """Achievable rates on this GPU (what rooflines should use), each from a kernel built to hit it: DRAM from
    one copy 20x larger than L2, L2 from 200 copies of a buffer that fits in it (as one CUDA graph), L1 from
    repeated reads of a span that fits in every SM's L1, bf16 tensor from the best of GEMM_SHAPES, fp32 from
    `fma_peak` (independent FMA chains, unrolled)."""
    return {"dram_gb_s": _copy_gb_s(COPY_BYTES, 1), "l2_gb_s": _copy_gb_s(L2_COPY_BYTES, 200),
            "l1_gb_s": _l1_gb_s(), "bf16_tensor_tflops": _gemm_tflops(), "fp32_tflops": _fma_tflops(),
            "source": "measured by ssmprof calibrate"}


def run_calibration(ncu_timeout_s: float = 900, keep_report: Path | None = None) -> tuple[pd.DataFrame, dict, float]:
    """(report of the KNOWN_WORK launches, measured ceilings, ncu wall seconds) on the visible GPU; the
    four-kernel report is copied to `keep_report` if given (small: the test fixture for extraction)."""
    if not torch.cuda.is_available():
        raise NoGpu("calibrate measures a GPU: no CUDA GPU is visible")
    ceilings = measure_ceilings()
    torch.cuda.empty_cache()  # the ncu child needs the memory
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "calibrate.ncu-rep"
        wall = run_ncu([sys.executable, "-m", "ssmprof.profiler.calibrate", "child"], report, "all", ncu_timeout_s)
        if keep_report is not None:
            shutil.copyfile(report, keep_report)
        return read_report(report), ceilings, wall


if __name__ == "__main__":
    raise SystemExit(child() if sys.argv[1:] == ["child"] else 2)
