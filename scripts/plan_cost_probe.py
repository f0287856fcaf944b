"""Where the counter child's kernel planning goes under Nsight Compute: each import and CUDA step it takes, timed
in one process under ncu (the collector's flags) and in one without (what it found: `tests/data/plan-cost-h100`
and the README's "Cost of the counters").

    .venv/bin/python scripts/plan_cost_probe.py
"""

from __future__ import annotations

import subprocess
import sys

STEPS = """
import importlib, json, time
marks = {}
began = time.perf_counter()
def mark(label):
    marks[label] = round(time.perf_counter() - began, 2)
import torch
mark("import torch")
torch.cuda.init()
mark("cuda init")
torch.zeros(1, device="cuda")
mark("first tensor")
for name in ("triton", "causal_conv1d_cuda", "causal_conv1d", "selective_scan_cuda", "transformers", "mamba_ssm"):
    importlib.import_module(name)
    mark(f"import {name}")
print("MARKS", json.dumps(marks), flush=True)
"""


def run(under_ncu: bool) -> str:
    argv = [sys.executable, "-c", STEPS]
    if under_ncu:
        argv = ["ncu", "--profile-from-start", "off", "--nvtx", "--clock-control", "none", "--import-sass", "no",
                "--metrics", "gpu__time_duration.sum", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("MARKS")]
    return lines[-1] if lines else (done.stdout + done.stderr)[-500:]


if __name__ == "__main__":
    for under_ncu in (False, True):
        print("under ncu" if under_ncu else "without ncu", run(under_ncu), flush=True)
