"""A second process on the GPU: bf16 GEMMs back to back for `seconds` (the gate must name a shared GPU as the
cause of a run measured beside it). Usage: python scripts/gemm_loop.py [seconds] [size]"""

import sys
import time

import torch


def gemm_loop(seconds: float, size: int) -> None:
    """bf16 `size`-square GEMMs for `seconds`, synchronizing every 20."""
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(20):
            a = (a @ b) * 1e-4
        torch.cuda.synchronize()


if __name__ == "__main__":
    gemm_loop(float(sys.argv[1]) if len(sys.argv) > 1 else 120.0, int(sys.argv[2]) if len(sys.argv) > 2 else 8192)
