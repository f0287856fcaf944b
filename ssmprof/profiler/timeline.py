"""Timeline collector: torch.profiler (Kineto/CUPTI) over the profiled iteration, one row per kernel launch.

Cheap (one traced iteration) and complete: every launch with its duration, stream, grid and block, the
framework op that launched it, and its phase. The phase comes from the harness's `ssmprof/<phase>`
record_function ranges, matched by *time* rather than by thread: autograd launches backward kernels
from its own thread while the main thread sits inside the `backward` range, so a kernel belongs to the
phase range that contains the host-side launch call (cudaLaunchKernel / cuLaunchKernel), whatever thread
made it. Kernels launched outside every range are `other`.
"""

from __future__ import annotations

import bisect
import json
import re
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from ssmprof.profiler.markers import NVTX_DOMAIN, PHASES
from ssmprof.schema import KERNEL_COLUMNS

_PHASE_LABELS = {f"{NVTX_DOMAIN}/{phase}": phase for phase in PHASES}
_LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


class TimelineCapture:
    """Context manager around the profiled iteration; `trace` holds the Chrome-trace dict afterwards."""

    def __init__(self, cuda: bool):
        activities = [torch.profiler.ProfilerActivity.CPU]
        if cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.cuda = cuda
        # Input shapes name the problem a library kernel solves: cuBLAS's persistent GEMMs launch one grid for
        # every shape, so (name, grid, block) alone cannot say which GEMM a launch is.
        self._profile = torch.profiler.profile(activities=activities, record_shapes=True)
        self.trace: dict = {}
        self.wall_s = 0.0

    def __enter__(self):
        self._started = time.perf_counter()
        self._profile.__enter__()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
        self._profile.__exit__(*exc)
        if exc[0] is None:
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "trace.json"
                self._profile.export_chrome_trace(str(path))
                self.trace = json.loads(path.read_text())
        self.wall_s = time.perf_counter() - self._started
        return False


def short_kernel_name(full: str) -> str:
    """`void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)` -> `vectorized_elementwise_kernel`."""
    name = full.strip()
    if name.startswith("void "):
        name = name[len("void "):]
    depth, kept = 0, []
    for char in name:  # drop template arguments and the parameter list, keeping nesting in mind
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            kept.append(char)
    name = "".join(kept).strip()
    return re.split(r"::", name)[-1].strip() or full


def phase_ranges(events: list[dict]) -> list[tuple[float, float, str]]:
    """(start, end, phase) of every harness phase range in the trace, sorted by start (microseconds)."""
    ranges = [
        (e["ts"], e["ts"] + e.get("dur", 0), _PHASE_LABELS[e["name"]])
        for e in events
        if e.get("cat") == "user_annotation" and e.get("name") in _PHASE_LABELS
    ]
    return sorted(ranges)


def phase_at(ranges: list[tuple[float, float, str]], ts: float) -> str:
    i = bisect.bisect_right([start for start, _, _ in ranges], ts) - 1
    if i >= 0 and ranges[i][0] <= ts <= ranges[i][1]:
        return ranges[i][2]
    return "other"


def kernel_table(trace: dict) -> pd.DataFrame:
    """One row per kernel in the trace, in launch order, with the contract's identity/context/time columns."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    ranges = phase_ranges(events)
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in _LAUNCH_CATEGORIES and "correlation" in e.get("args", {})}
    ops = {e["args"]["External id"]: (e["name"], _shapes(e["args"])) for e in events
           if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    kernels = sorted((e for e in events if e.get("cat") == "kernel"),
                     key=lambda e: (launches.get(e["args"].get("correlation"), e)["ts"], e["ts"]))
    rows = []
    first_start = min((k["ts"] for k in kernels), default=0.0)
    for index, kernel in enumerate(kernels):
        args = kernel["args"]
        launch = launches.get(args.get("correlation"))
        op, shapes = ops.get(launch["args"].get("External id"), ("", "")) if launch else ("", "")
        grid, block = args.get("grid", [0, 0, 0]), args.get("block", [0, 0, 0])
        rows.append({
            "launch_idx": index,
            "kernel_name": short_kernel_name(kernel["name"]),
            "kernel_name_full": kernel["name"],
            # A kernel whose launch call was not recorded is placed by its own start (later than its launch).
            "phase": phase_at(ranges, launch["ts"] if launch else kernel["ts"]),
            "launch_op": op,
            "launch_shapes": shapes,
            "stream": args.get("stream", -1),
            "grid_x": grid[0], "grid_y": grid[1], "grid_z": grid[2],
            "block_x": block[0], "block_y": block[1], "block_z": block[2],
            "shared_mem_bytes": args.get("shared memory", -1),
            "start_ns": round((kernel["ts"] - first_start) * 1e3),
            "duration_ns": round(kernel.get("dur", 0) * 1e3),
            "counter_status": "not collected",
            "counter_lender": -1,
        })
    return pd.DataFrame(rows, columns=list(KERNEL_COLUMNS))


def _shapes(op_args: dict) -> str:
    """The op's recorded input shapes as compact JSON ("" when shapes were not recorded)."""
    dims = op_args.get("Input Dims")
    return json.dumps(dims, separators=(",", ":")) if dims is not None else ""
