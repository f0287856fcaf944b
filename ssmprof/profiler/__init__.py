"""Harness (warm-up, phases, NVTX, cudaProfilerStart/Stop) and collectors."""
