"""Why the L1 read kernel's ceiling run (8 programs an SM, 4,096 blocks each) read slower than its profiled check
launch (1 program an SM, 256 blocks): the same kernel timed over programs per SM and loop lengths, as the ceiling was
timed then (`l1_read` defines the kernel at every call), and one launch of the ceiling's size for Nsight Compute
(`once`). On the H100 (tests/data/calibrate-h100/l1-probe.log) every timing carried ~3.5 ms whatever the work, and
Nsight Compute timed the 17.7 GB launch at 817 us (21.7 TB/s, L1/TEX throughput 81 %): the time was Python's."""

import sys

import torch

from ssmprof.profiler.calibrate import L1_BLOCK, L1_SPAN, _median_ms, l1_read


def probe(once: bool) -> None:
    """One launch of the ceiling run's size (`once`, for Nsight Compute), or the timings over programs per SM and
    loop lengths, one line each."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = torch.randn(L1_SPAN, device="cuda")
    if once:
        l1_read(x, torch.empty(8 * sms * L1_BLOCK, device="cuda"), 8 * sms)
        torch.cuda.synchronize()
        return
    for per_sm in (1, 2, 4, 8, 16):
        out = torch.empty(per_sm * sms * L1_BLOCK, device="cuda")
        for iters in (256, 4096, 16384):  # the short launch's time includes Python's launch (~20-40 us)
            ms = _median_ms(lambda out=out, programs=per_sm * sms, iters=iters: l1_read(x, out, programs, iters), 5)
            print(f"{per_sm:2d} programs/SM  {iters:5d} blocks each  {ms * 1e3:9.1f} us  "
                  f"{per_sm * sms * iters * L1_BLOCK * 4 / (ms / 1e3) / 1e9:9.0f} GB/s", flush=True)


if __name__ == "__main__":
    probe(once=sys.argv[1:] == ["once"])
