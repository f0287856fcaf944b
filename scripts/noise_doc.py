"""The tables of docs/noise.md, generated from the bundled runs and sweeps: the sweeps' best chunk sizes and
crossovers restated with their intervals, H100 against H200 on mamba2-lm (one run each, and pooled over the
bundled reruns), and the profiled iteration of every bundled run against its timed steps.

`python scripts/noise_doc.py` prints the tables; `--write` replaces each generated block of docs/noise.md (between
`<!-- noise:NAME -->` and `<!-- /noise:NAME -->`); tests/test_noise.py checks that the page holds them.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ssmprof import bundled
from ssmprof.analysis.step import profiled_iteration
from ssmprof.analysis.summaries.sweep import RegimeTables
from ssmprof.analysis.trust import noise
from ssmprof.pipeline import regimes
from ssmprof.schema import read_run

DOC = Path(__file__).parent.parent / "docs" / "noise.md"
GPU = {"h100-sxm": "H100", "h200": "H200"}


def _table(rows: list[dict]) -> str:
    frame = pd.DataFrame(rows)
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


@functools.cache
def _sweep(gpu: str, name: str) -> RegimeTables:
    return regimes.analyze([bundled.REFERENCE / gpu / "sweeps" / name]).tables


def best_table() -> str:
    rows = []
    for gpu, label in GPU.items():
        best = _sweep(gpu, "d_state-chunk_size").best
        assert best is not None  # the sweep varies chunk_size
        for r in best.itertuples():
            rows.append({"GPU": label, "d_state": r.d_state, "fastest chunk": r.best_chunk_size,
                         "runner-up": r.runner_up_chunk_size, "runner-up slower": f"{r.runner_up_slower_pct:.1f} %",
                         "95 % interval":
                             f"{r.runner_up_slower_low_pct:+.1f} % to {r.runner_up_slower_high_pct:+.1f} %",
                         "verdict": "best" if r.noise_verdict == "best" else f"tie with {r.tied_with}",
                         "fastest on SSM kernel time": r.best_chunk_size_ssm_time})
    return _table(rows)


def _bracket(low: float, high: float, verdict: str) -> str:
    return f"{low:,.0f}-{high:,.0f}" if verdict == "crossover" else verdict


def crossover_table() -> str:
    rows = []
    for gpu, label in GPU.items():
        crossovers = _sweep(gpu, "seq_len").crossover
        assert crossovers is not None  # the sweep runs three workloads
        for r in crossovers.itertuples():
            step, kernel = r.crossover_seq_len, r.crossover_seq_len_kernel_time
            rows.append({"GPU": label, "pair": f"{r.workload_a} / {r.workload_b}",
                         "step-time crossing": "none" if step != step else f"{step:,.0f}",
                         "beyond noise between": _bracket(r.crossover_low, r.crossover_high, r.noise_verdict),
                         "within noise at (gap %)": f"{r.tied_at} ({r.tied_gap_pct})" if r.tied_at else "",
                         "kernel-time crossing": "none" if kernel != kernel else f"{kernel:,.0f}",
                         "kernel time: beyond noise between": _bracket(r.kernel_crossover_low, r.kernel_crossover_high,
                                                                       r.kernel_noise_verdict)})
    return _table(rows)


def _runs(gpu: str) -> list[tuple[str, Path]]:
    folders = sorted(path.parent for path in (bundled.REFERENCE / gpu).rglob("run.json"))
    return [(str(folder.relative_to(bundled.REFERENCE)), folder) for folder in folders]


def compare_table() -> str:
    infos = {gpu: [read_run(folder).info for _, folder in _runs(gpu)] for gpu in GPU}
    single = [read_run(bundled.REFERENCE / gpu / "mamba2-lm").info for gpu in GPU]
    pooled = [noise.reruns(infos[gpu])[noise.rerun_key(one)] for gpu, one in zip(GPU, single, strict=True)]
    rows = []
    for what, (a, b) in (("one run each", ([single[0]], [single[1]])), ("pooled over reruns", pooled)):
        ratio = noise.ratio_interval(noise.pooled_steps(a), noise.pooled_steps(b))
        steps = [noise.step_interval(noise.pooled_steps(side)) for side in (a, b)]
        rows.append({"mamba2-lm paper, H100 (A) vs H200 (B)": what, "runs": f"{len(a)} / {len(b)}",
                     "steps": f"{steps[0].samples} / {steps[1].samples}",
                     "median step A": f"{steps[0].value:.1f} ms [{steps[0].low:.1f}, {steps[0].high:.1f}]",
                     "median step B": f"{steps[1].value:.1f} ms [{steps[1].low:.1f}, {steps[1].high:.1f}]",
                     "speedup of B": f"{ratio.value:.3f}x [{ratio.low:.3f}, {ratio.high:.3f}]",
                     "verdict": noise.speedup_verdict(ratio)})
    return _table(rows)


def iteration_table() -> str:
    rows = []
    for gpu in GPU:
        for name, folder in _runs(gpu):
            if "/sweeps/" in name:
                continue
            run = read_run(folder)
            r = profiled_iteration.iteration_check(run.kernels, run.info).iloc[0]
            rows.append({"run": name, "median step": f"{r.step_ms:.1f} ms",
                         "steps' spread": f"{r.step_spread_ms:.1f} ms",
                         "kernel span": f"{r.span_ms:.1f} ms", "GPU busy": f"{r.busy_ms:.1f} ms",
                         "representative": "yes" if r.representative else "no"})
    return _table(rows)


BLOCKS = {"best": best_table, "crossover": crossover_table, "compare": compare_table, "iteration": iteration_table}


def blocks() -> dict[str, str]:
    return {name: make() for name, make in BLOCKS.items()}


def write(text: str, generated: dict[str, str]) -> str:
    for name, table in generated.items():
        text = re.sub(rf"(<!-- noise:{name} -->\n).*?(\n<!-- /noise:{name} -->)", _between(table), text, flags=re.S)
    return text


def _between(table: str) -> Callable[[re.Match[str]], str]:
    """re.sub's replacement that puts `table` between a block's two markers (as text: no escapes read)."""
    return lambda marked: marked.group(1) + table + marked.group(2)


if __name__ == "__main__":
    generated = blocks()
    if "--write" in sys.argv:
        DOC.write_text(write(DOC.read_text(), generated))
    else:
        for name, table in generated.items():
            print(f"<!-- noise:{name} -->\n{table}\n<!-- /noise:{name} -->\n")
