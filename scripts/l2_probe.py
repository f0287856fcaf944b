"""Whether `calibrate`'s L2 ceiling (200 copies of an 8 MiB buffer replayed as one CUDA graph: 4,694 GB/s on the
H100, 2026-11-24) is below what L2 delivers, as `_chunk_scan_bwd_dcb` moving 7,628 GB/s of L2 bytes suggests: the
same measure beside one persistent kernel that reads a 16 MiB buffer (in L2, not in L1: `.cg` loads) over and over,
with no launch inside the timed interval but its own. `once`: one launch of it, for Nsight Compute
(lts__t_bytes should equal the bytes it reads). Run on an H100 (2026-11-24, tests/data/calibrate-h100/l2-probe.log):
4,707 GB/s for the copies, 8,605 GB/s for the read kernel; the README says what follows."""

import sys

import torch
import triton
import triton.language as tl

from ssmprof.profiler.calibrate import L2_COPY_BYTES, _copy_gb_s, _median_ms

BLOCK, SPAN = 1024, 4 << 20  # floats: 16 MiB, a third of the H100's L2, 4,096 blocks


@triton.jit
def l2_read(x_ptr, out_ptr, ITERS: tl.constexpr, BLOCKS: tl.constexpr, BLOCK: tl.constexpr):
    # Program p reads blocks p, p + P, p + 2P, ... (P programs) round the buffer, four at a time into four sums so
    # that four loads are in flight; `.cg` keeps them out of L1, so every byte crosses L2.
    lanes, programs = tl.arange(0, BLOCK), tl.num_programs(0)
    s0 = tl.zeros([BLOCK], tl.float32)
    s1 = tl.zeros([BLOCK], tl.float32)
    s2 = tl.zeros([BLOCK], tl.float32)
    s3 = tl.zeros([BLOCK], tl.float32)
    for step in range(0, ITERS, 4):
        first = tl.program_id(0) + step * programs
        s0 += tl.load(x_ptr + tl.multiple_of((first % BLOCKS) * BLOCK, BLOCK) + lanes, cache_modifier=".cg")
        s1 += tl.load(x_ptr + tl.multiple_of(((first + programs) % BLOCKS) * BLOCK, BLOCK) + lanes,
                      cache_modifier=".cg")
        s2 += tl.load(x_ptr + tl.multiple_of(((first + 2 * programs) % BLOCKS) * BLOCK, BLOCK) + lanes,
                      cache_modifier=".cg")
        s3 += tl.load(x_ptr + tl.multiple_of(((first + 3 * programs) % BLOCKS) * BLOCK, BLOCK) + lanes,
                      cache_modifier=".cg")
    tl.store(out_ptr + tl.program_id(0) * BLOCK + lanes, s0 + s1 + s2 + s3)


sms = torch.cuda.get_device_properties(0).multi_processor_count
x = torch.randn(SPAN, device="cuda")
if sys.argv[1:] == ["once"]:
    l2_read[(8 * sms,)](x, torch.empty(8 * sms * BLOCK, device="cuda"), ITERS=256, BLOCKS=SPAN // BLOCK, BLOCK=BLOCK)
    torch.cuda.synchronize()
    sys.exit()
print(f"calibrate's L2 measure (200 copies of {L2_COPY_BYTES >> 20} MiB, one CUDA graph): "
      f"{_copy_gb_s(L2_COPY_BYTES, 200):,.0f} GB/s", flush=True)
for per_sm in (4, 8, 16):
    out = torch.empty(per_sm * sms * BLOCK, device="cuda")
    for iters in (256, 2048):
        def launch(out=out, programs=per_sm * sms, iters=iters):
            l2_read[(programs,)](x, out, ITERS=iters, BLOCKS=SPAN // BLOCK, BLOCK=BLOCK)

        ms = _median_ms(launch, 5)
        print(f"l2_read {per_sm:2d} programs/SM x {iters:4d} blocks: {ms * 1e3:8.1f} us  "
              f"{per_sm * sms * iters * BLOCK * 4 / (ms / 1e3) / 1e9:8,.0f} GB/s", flush=True)
