"""The process Nsight Compute profiles: the same training iteration as the parent's, nothing else.

    python -m ssmprof.profiler.ncu_child WORKLOAD PRESET OVERRIDES_JSON WARMUP [--allow-fallback] [--autotune FILE]
                                     [--timings FILE] [--state FILE]

Same workload, config and seed as the timeline run, and the timeline run's Triton autotuning choices pinned
(FILE, `schema.AutotunePins`), so the bracketed iteration launches the same kernels with the same launch
configurations; WARMUP steps (the timeline's, capped at `counters.PASS_WARMUP`: nothing is left to compile or
autotune here) and one timed step (cheap: ncu is off outside the bracket). `--timings` writes when the child's
code began (after Nsight Compute's start-up, Python's and the imports), when it went on (`counters.GO_ENV`: a
pass started ahead of its turn imports what it can, touching no GPU, then waits for the pass before it to
end), when CUDA was initialized, when its kernels were planned and the autotuning choices pinned, the
harness's seconds per stage and when it ended, so a pass's wall time can be taken apart, and the work it ran
(`pass_work`), which the passes of one profile must agree on (`schema.PassRecord`). `--state`: the weights the
parent's profiled iteration ran, loaded right before the child's (a mixture of experts routes by them).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from ssmprof import schema
from ssmprof.errors import SsmprofError
from ssmprof.kernels import plan_kernels, preload
from ssmprof.profiler import autotune
from ssmprof.profiler.counters import GO_ENV
from ssmprof.profiler.harness import RunResult, run_training
from ssmprof.profiler.markers import NvtxMarker
from ssmprof.workloads.registry import get_workload


def main(argv: list[str]) -> int:
    began = time.time()
    name, preset, overrides, warmup = argv[0], argv[1], json.loads(argv[2]), int(argv[3])
    try:
        workload = get_workload(name)
        cfg = workload.config(preset, overrides)
        go = os.environ.get(GO_ENV)
        if go:
            preload(workload.kernel_ops(cfg))
            while not os.path.exists(go):
                time.sleep(0.02)
        went = time.time()
        # CUDA first, on its own stamp: planning once took 12 s a pass on the H100 (mamba1-lm; docs/history.md) and
        # CUDA's initialization under ncu was a suspect; it took 0.2-1.0 s of the H200 passes, the imports the rest
        if torch.cuda.is_available():
            torch.cuda.init()
        cuda_ready = time.time()
        plan = plan_kernels(workload.kernel_ops(cfg), "cuda", "--allow-fallback" in argv, cfg.dtype)
        planned = time.time()
        if "--autotune" in argv:
            autotune.pin(schema.read_document(schema.AutotunePins, Path(argv[argv.index("--autotune") + 1])).choices)
        pinned = time.time()
        state = Path(argv[argv.index("--state") + 1]) if "--state" in argv else None
        result = run_training(workload, preset, cfg, plan, steps=1, warmup=warmup, marker=NvtxMarker(),
                              load_state=state)
        if "--timings" in argv:
            stamps = {"began": began, "went": went, "cuda_ready": cuda_ready, "planned": planned, "pinned": pinned,
                      **result.harness_seconds, "ended": time.time()}
            record = schema.make_document(schema.PassRecord, stamps=stamps, work=pass_work(result))
            schema.write_document(record, Path(argv[argv.index("--timings") + 1]))
    except SsmprofError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def pass_work(result: RunResult) -> dict:
    """The work a pass ran, as the passes of one profile must agree on it (`counters.check_same_work`): the GPU
    model, the config, the kernels planned, the loss of its first step (before any update: same weights, same
    batch) and of its profiled step."""
    return {"gpu": result.gpu.get("name"), "config": result.config, "provenance": result.provenance,
            "first_loss": result.first_loss, "loss": result.final_loss}


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # Nothing is left to save once the timings are written: skip the interpreter's teardown of torch and Triton.
    # (The 14.4-19.7 s a pass once spent outside the harness's stages were not the teardown but the kernel plan's
    # imports: `kernels.mamba_ssm`.)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
