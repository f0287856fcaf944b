"""The profiled iteration as a Chrome / Perfetto trace (the JSON trace-event format): open it in
ui.perfetto.dev or chrome://tracing beside the report.

One process per run (its workload and GPU), one thread (track) per CUDA stream, one complete event ("X") per
kernel launch at its timeline start and duration, and a "phases" track with the forward / backward / optimizer
spans. Each launch's args carry what the report says of it: category, phase, launching op, launch
configuration, counter status, the roofline verdict and % of roof, DRAM throughput, hit rates, FLOP/s.
Perfetto colours slices by name, so a kernel keeps one colour; the category is in `cat` and args.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from ssmprof.schema import RunInfo

# args of each launch: (column, key in the trace), written where the run has a value
ARGS = (("category", "category"), ("phase", "phase"), ("launch_op", "launching op"), ("launch_idx", "launch"),
        ("counter_status", "counters"), ("verdict", "verdict"), ("pct_of_roof", "% of roof"),
        ("dram_throughput_pct", "DRAM throughput % of peak"), ("l2_hit_rate_pct", "L2 hit %"),
        ("l1_hit_rate_pct", "L1 hit %"), ("flop_per_s", "FLOP/s"), ("ai_dram", "FLOP per DRAM byte"),
        ("kernel_name_full", "full name"))
PHASES_TID = 0  # the phases track sits above the streams


def _value(value):
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    return round(value, 3) if isinstance(value, float) else value


def trace_events(runs: list[tuple[RunInfo, pd.DataFrame]]) -> dict:
    """The trace of each (run.json, per-launch frame) pair; the frame: the analysis frame, with the roofline's
    `verdict` and `pct_of_roof` where the run has counters. Times in microseconds from the run's first launch."""
    events = []
    for pid, (info, kernels) in enumerate(runs):
        workload = info.workload
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": f"{workload.name} --preset {workload.preset} on {info.gpu.name}"}})
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": PHASES_TID, "args": {"name": "phases"}})
        if kernels.empty:
            continue
        origin = int(kernels["start_ns"].min())
        for stream in sorted(kernels["stream"].unique()):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": int(stream) + 1,
                           "args": {"name": f"stream {int(stream)}"}})
        ends = kernels["start_ns"] + kernels["duration_ns"]
        for phase, rows in kernels.groupby("phase", sort=False):
            start = int(rows["start_ns"].min())
            events.append({"ph": "X", "name": phase, "cat": "phase", "pid": pid, "tid": PHASES_TID,
                           "ts": (start - origin) / 1e3, "dur": (int(ends[rows.index].max()) - start) / 1e3})
        columns = [(column, key) for column, key in ARGS if column in kernels.columns]
        grid = kernels[["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]].to_numpy()
        for position, row in enumerate(kernels.itertuples(index=False)):
            args = {key: _value(getattr(row, column)) for column, key in columns}
            args = {k: v for k, v in args.items() if v is not None and v != ""}
            g = grid[position]
            args["grid"], args["block"] = f"{g[0]},{g[1]},{g[2]}", f"{g[3]},{g[4]},{g[5]}"
            events.append({"ph": "X", "name": row.kernel_name, "cat": str(row.category), "pid": pid,
                           "tid": int(row.stream) + 1, "ts": (int(row.start_ns) - origin) / 1e3,
                           "dur": int(row.duration_ns) / 1e3, "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": "ssmprof", "note": "one profiled training iteration per process"}}


def trace_json(runs: list[tuple[RunInfo, pd.DataFrame]]) -> str:
    return json.dumps(trace_events(runs), allow_nan=False)
