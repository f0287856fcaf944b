"""The cost of `ssmprof.step()` and `ssmprof.phase()` outside `ssmprof profile`: what a training script that
keeps its marks pays each iteration. Goal (issue #41): nothing measurable against a training step.

Times `with ssmprof.step(model=..., optimizer=...)` around an empty body against the same loop without the
mark, and a function decorated with `@ssmprof.step(...)` against the function itself (outside a profile the
decorator returns it unchanged), `--repeats` times `--iterations`; the cost is the median difference per
iteration, shown with the range of the repeats. Exits 1 where a median is over LIMIT_NS.

    python benchmarks/bench_inactive_step.py [--iterations 200000] [--repeats 7]
"""

import argparse
import statistics
import sys
import time

import ssmprof

LIMIT_NS = 1_000  # 1 us: 0.01 % of a 10 ms training step (mamba2-lm small takes tens of ms on an H100)


def with_block(iterations: int, model, optimizer) -> float:
    """ns per iteration of `with ssmprof.step(...)` around an empty body, less the same loop without it."""
    began = time.perf_counter_ns()
    for _ in range(iterations):
        with ssmprof.step(model=model, optimizer=optimizer):
            pass
    middle = time.perf_counter_ns()
    for _ in range(iterations):
        pass
    return ((middle - began) - (time.perf_counter_ns() - middle)) / iterations


def decorator(iterations: int, model, optimizer) -> float:
    """ns per call of a function decorated with `ssmprof.step(...)`, less a call of the same function bare."""

    def iteration():
        pass

    marked = ssmprof.step(model=model, optimizer=optimizer)(iteration)
    began = time.perf_counter_ns()
    for _ in range(iterations):
        marked()
    middle = time.perf_counter_ns()
    for _ in range(iterations):
        iteration()
    return ((middle - began) - (time.perf_counter_ns() - middle)) / iterations


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    model, optimizer = object(), object()  # never touched outside a profile: no torch needed to measure it
    worst = 0.0
    for name, cost in (("with ssmprof.step()", with_block), ("@ssmprof.step() decorator", decorator)):
        costs = [cost(args.iterations, model, optimizer) for _ in range(args.repeats)]
        median = statistics.median(costs)
        worst = max(worst, median)
        print(f"{name}: {median:.0f} ns per iteration (repeats {min(costs):.0f} to {max(costs):.0f} ns), "
              f"{median / 1e7 * 100:.4f} % of a 10 ms step")
    print(f"limit {LIMIT_NS} ns: {'ok' if worst <= LIMIT_NS else 'EXCEEDED'}")
    return 0 if worst <= LIMIT_NS else 1


if __name__ == "__main__":
    sys.exit(main())
