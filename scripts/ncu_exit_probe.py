"""Where a profiled process's last seconds go under Nsight Compute: every ncu output line time-stamped from
launch, and the target's own last moment, for a bare torch target with and without --nvtx, and one that
launches 3,000 kernels in NVTX ranges of which ncu profiles five, and one that loads cuBLAS, cuDNN and a
Triton kernel and holds 8 GiB. Every counter pass of a paper run spent
14-19 s outside the child harness's stages, with the child ending in os._exit, whatever its memory
(0.3-37 GiB). Measured on the H100 (2026-11-23): the bare target, ending in os._exit under the collector's
flags, is done 0.2 s after its code (`--nvtx` or not), and ncu prints no "Disconnected" line then: the
seconds are no fixed cost of ncu. Whether they lie in the child (planning its kernels, the harness outside
its stages) or after it, `pass_seconds` now says from the child's own stamps. Needs no install: the host's
torch runs it.

    /opt/torch/.venv/bin/python scripts/ncu_exit_probe.py [nvtx] [no nvtx] [many] [libraries]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

TARGET = """
import os, sys, time, torch
a = torch.ones(1024, device="cuda")
if "libraries" in sys.argv:  # load what a training child loads: cuBLAS, cuDNN, a Triton kernel, 8 GiB held
    held = torch.empty(8 * 2**30, dtype=torch.uint8, device="cuda")
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    (x @ x).sum()
    torch.nn.functional.conv2d(torch.randn(8, 64, 56, 56, device="cuda"), torch.randn(64, 64, 3, 3, device="cuda"))
    sys.path.insert(0, sys.argv[-1])
    import triton_double
    triton_double.double[(4,)](a, 1024, BLOCK=256)
torch.cuda.synchronize()
torch.cuda.profiler.start()
a.mul_(2)
if "many" in sys.argv:  # a training step's shape: thousands of launches in nested NVTX ranges, a few profiled
    for step in range(3000):
        torch.cuda.nvtx.range_push(f"layer {step % 48}")
        a.add_(1)
        torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
print("TARGET_END", time.time(), flush=True)
os._exit(0)
"""


# Triton's @jit needs its kernel in a file
TRITON_MODULE = """
import triton, triton.language as tl


@triton.jit
def double(x, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + i, tl.load(x + i, mask=i < n) * 2, mask=i < n)
"""


def probe(label: str, flags: list[str], args: list[str]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        with open(f"{scratch}/triton_double.py", "w") as f:
            f.write(TRITON_MODULE)
        argv = ["ncu", "--profile-from-start", "off", "--clock-control", "none", "--import-sass", "no", *flags,
                "--metrics", "gpu__time_duration.sum", "--export", f"{scratch}/r", "--force-overwrite",
                sys.executable, "-c", TARGET, *args, scratch]
        began = time.time()
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in child.stdout:
            line = line.rstrip()
            if line.startswith("TARGET_END"):
                line = f"target's code ended at {float(line.split()[1]) - began:.2f} s"
            print(f"{label:12s} {time.time() - began:7.2f} s  {line}", flush=True)
        child.wait()
        print(f"{label:12s} {time.time() - began:7.2f} s  ncu exited {child.returncode}", flush=True)


VARIANTS = {  # label: (ncu flags, target args)
    "nvtx": (["--nvtx"], []),
    "no nvtx": ([], []),
    "many": (["--nvtx", "--kernel-name", "regex:^vectorized_elementwise_kernel$", "--launch-count", "5"], ["many"]),
    "libraries": (["--nvtx"], ["libraries"]),
}

if __name__ == "__main__":
    for label in sys.argv[1:] or VARIANTS:  # the labels named, else all
        probe(label, *VARIANTS[label])
