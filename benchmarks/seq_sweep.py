"""Sequence-length sweep: linear-time Mamba-2 (SSD scan) against quadratic attention.

Trains mamba2-lm and the transformer baseline at the `small` width (d_model 1024, 4 layers) with batch
1 and growing sequence length, so tokens per step grow with L. Time per token then stays flat for an
O(L) model and grows with L for an O(L^2) one; the table prints step time, its growth over the
shortest length, and microseconds per token.

    python benchmarks/seq_sweep.py [--lengths 1024,2048,4096,8192,16384] [--steps 5]
"""

import argparse
import gc
import json
import statistics

import torch

from ssmprof.kernels import plan_kernels
from ssmprof.profiler.harness import Trainer, time_steps
from ssmprof.profiler.markers import PhaseMarker
from ssmprof.workloads.registry import get_workload


def step_ms(name: str, seq_len: int, steps: int) -> float:
    workload = get_workload(name)
    cfg = workload.config("small", {"batch_size": 1, "seq_len": seq_len})
    trainer = Trainer(workload, cfg, plan_kernels(workload.ops, "cuda", dtype=cfg.dtype), PhaseMarker())
    for _ in range(2):  # compile + autotune for this shape
        trainer.step()
    _, times = time_steps(trainer, steps)
    del trainer
    gc.collect()
    torch.cuda.empty_cache()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", default="1024,2048,4096,8192,16384")
    parser.add_argument("--models", default="mamba2-lm,transformer")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json")
    parser.add_argument("--merge", help="JSON of an earlier sweep (other models, same lengths) to show alongside")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    results = {m: {L: step_ms(m, L, args.steps) for L in lengths} for m in args.models.split(",")}
    if args.merge:
        with open(args.merge) as f:
            earlier = json.load(f)["step_ms"]
        results.update({m: {int(L): ms for L, ms in by_len.items()} for m, by_len in earlier.items()})
    models = list(results)

    print(f"\nsequence sweep, batch 1, d_model 1024, 4 layers, bf16, {torch.cuda.get_device_name()}")
    columns = (f"{m + ' ms':>18}{'x vs ' + str(lengths[0]):>10}{'us/token':>10}" for m in models)
    print(f"{'seq_len':>8}" + "".join(columns))
    for L in lengths:
        row = f"{L:>8}"
        for m in models:
            ms = results[m][L]
            row += f"{ms:>18.2f}{ms / results[m][lengths[0]]:>10.2f}{ms * 1e3 / L:>10.2f}"
        print(row)
    growth = {m: results[m][lengths[-1]] / results[m][lengths[0]] for m in models}
    print(f"length x{lengths[-1] // lengths[0]}: " + ", ".join(f"{m} step time x{g:.1f}" for m, g in growth.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"lengths": lengths, "step_ms": results, "growth": growth}, f, indent=2)


if __name__ == "__main__":
    main()
