"""What each torch.profiler configuration costs a training step, on the GPU: the step under no profiler, under the
timing pass's capture (`cuda_quiet`: CUDA activity alone, no external correlation), under CUDA activity with
correlation, and under the detail pass's (`cpu_cuda_shapes`: host ops with their shapes and CUDA activity).

One JSON line per (round, mode): the median of five steps timed by CUDA events as the harness times them
(`harness.time_steps`: the host runs ahead), the host's time to queue a step, and the host's cost of a tiny launch
(`profile_run.host_launch_us`) inside the capture. A step whose GPU work outlasts its queueing is unchanged by a
capture's host cost; a step the host paces is lengthened by it. Two rounds, because a host-paced step varies from
round to round without any profiler. Made on a GPU host after the kernels are built:

    python benchmarks/bench_tracer_cost.py WORKLOAD PRESET [KEY=VALUE ...]

tests/data/sync-sites-h100/tracer-host-cost.jsonl holds its lines for four workloads on an H100.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Callable

import torch

from ssmprof.pipeline.measure import WorkloadOptions, prepare
from ssmprof.profiler.harness import Trainer, time_steps
from ssmprof.profiler.markers import NvtxMarker
from ssmprof.profiler.profile_run import host_launch_us
from ssmprof.profiler.timeline import TimelineCapture

STEPS = 6  # per mode; the first absorbs the capture's start
ROUNDS = 2
WARMUP = 3


def captures() -> dict[str, Callable[[], contextlib.AbstractContextManager]]:
    """Each mode's capture: the profile's own timing and detail passes (`timeline.TimelineCapture`), and CUDA
    activity with external correlation, which the timing pass turns off."""
    return {
        "none": contextlib.nullcontext,
        "cuda_quiet": lambda: TimelineCapture(cuda=True).timing_window(),
        "cuda": lambda: torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]),
        "cpu_cuda_shapes": lambda: TimelineCapture(cuda=True),
    }


def under(trainer: Trainer, capture: Callable[[], contextlib.AbstractContextManager]) -> dict:
    """STEPS steps inside `capture`, each bracketed by CUDA events; the first left out of the medians."""
    torch.cuda.synchronize()
    queued, marks = [], []
    with capture():
        for _ in range(STEPS):
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            began = time.perf_counter()
            trainer.step()
            queued.append((time.perf_counter() - began) * 1e3)
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            marks.append((start, end))
        torch.cuda.synchronize()
        launch = host_launch_us()
    steps = [start.elapsed_time(end) for start, end in marks][1:]
    return {"step_ms": round(statistics.median(steps), 2), "steps": [round(step, 1) for step in steps],
            "enqueue_ms": round(statistics.median(queued[1:]), 2), "launch_us": round(launch, 2)}


def main(workload: str, preset: str, sets: list[str]) -> None:
    ready = prepare(WorkloadOptions(workload, preset, sets=sets))
    trainer = Trainer(ready.workload, ready.cfg, ready.plan, NvtxMarker())
    for _ in range(WARMUP):
        trainer.step()
    torch.cuda.synchronize()
    name = f"{workload} {preset}"
    _, timed = time_steps(trainer, STEPS)
    print(json.dumps({"workload": name, "round": 0, "mode": "time_steps", "step_ms": round(statistics.median(timed), 2),
                      "steps": [round(step, 1) for step in timed]}), flush=True)
    for round_ in range(1, ROUNDS + 1):
        for mode, capture in captures().items():
            print(json.dumps({"workload": name, "round": round_, "mode": mode, **under(trainer, capture)}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("preset")
    parser.add_argument("sets", nargs="*", help="KEY=VALUE settings, as --set takes them")
    args = parser.parse_args()
    main(args.workload, args.preset, args.sets)
