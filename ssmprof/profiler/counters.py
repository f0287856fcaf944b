"""Counter collector: Nsight Compute on the same training iteration, in a child process, joined to the timeline.

The child (`ssmprof.profiler.child`) repeats the parent's run: same workload, config, seed, warm-up and
Triton autotuning choices, so its bracketed iteration launches the same kernels with the same launch
configurations in the same order. A report row is placed on the timeline by its launch configuration (as
ncu counts invocations: function name, 3-D grid and block, shared memory) and its position among that
configuration's launches, and must carry the same full kernel name. A launch that was not profiled
borrows counters only from a profiled launch of the same configuration *and* problem (`problems`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ssmprof.errors import SsmprofError
from ssmprof.profiler.ncu import ncu_argv, parse_query_metrics
from ssmprof.schema import COUNTER_COLUMNS


class CounterCollectionError(SsmprofError):
    pass


PERMISSION_HINT = ("GPU performance counters are not permitted for this user (ERR_NVGPUCTRPERM): profile as "
                   "root, or have an administrator load the driver with NVreg_RestrictProfilingToAdminUsers=0; "
                   "or use --counters none")


def _ncu() -> str:
    ncu = shutil.which("ncu")
    if ncu is None:
        raise CounterCollectionError("Nsight Compute (ncu) is not on PATH: install it, or use --counters none")
    return ncu


def available_metrics(chip: str) -> set[str]:
    """The base metric names this Nsight Compute knows on `chip` (`ncu --query-metrics --chip`)."""
    try:
        listing = subprocess.run([_ncu(), "--query-metrics", "--chip", chip], capture_output=True, text=True,
                                 timeout=120, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CounterCollectionError(f"ncu --query-metrics --chip {chip} failed: {exc}") from None
    names = parse_query_metrics(listing.stdout)
    if listing.returncode != 0 or not names:
        raise CounterCollectionError(f"ncu --query-metrics --chip {chip} listed no metrics: "
                                     f"{_last_message(listing.stdout.splitlines() + listing.stderr.splitlines())}")
    return names


def run_ncu(target: list[str], report: Path, mode: str, timeout_s: float,
            on_kernel: Callable[[int], None] | None = None, metrics: list[str] | None = None,
            targets: dict[str, list[int]] | None = None) -> float:
    """Run Nsight Compute on `target`; returns its wall time. Any failure is one CounterCollectionError."""
    ncu = _ncu()
    started = time.perf_counter()
    try:
        child = subprocess.Popen(ncu_argv(target, report, mode, metrics, ncu=ncu, targets=targets),
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, errors="replace")
    except OSError as exc:
        raise CounterCollectionError(f"cannot start Nsight Compute: {exc.strerror}") from None
    tail: deque[str] = deque(maxlen=40)
    seen = {"permission": False, "profiled": 0}

    def read_output() -> None:
        for line in child.stdout:
            tail.append(line.rstrip())
            if "ERR_NVGPUCTRPERM" in line:
                seen["permission"] = True
            if line.startswith("==PROF== Profiling"):
                seen["profiled"] += 1
                if on_kernel:
                    on_kernel(seen["profiled"])

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    try:
        returncode = child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise CounterCollectionError(f"Nsight Compute timed out after {timeout_s:.0f} s "
                                     f"({seen['profiled']} kernels profiled); raise --ncu-timeout") from None
    reader.join(timeout=10)
    if seen["permission"]:
        raise CounterCollectionError(PERMISSION_HINT)
    text = "\n".join(tail)
    if "No space left on device" in text:
        raise CounterCollectionError(f"disk full while Nsight Compute wrote {report}")
    if returncode != 0:
        raise CounterCollectionError(f"the profiled child failed under Nsight Compute (exit {returncode}): "
                                     f"{_last_message(tail)}")
    if not report.exists():
        raise CounterCollectionError(f"Nsight Compute wrote no report ({_last_message(tail)})")
    return time.perf_counter() - started


def _last_message(lines) -> str:
    meaningful = [line for line in lines if line.strip() and not line.startswith("==PROF==")]
    return meaningful[-1].strip() if meaningful else "no output"


def child_command(workload: str, preset: str, overrides: dict, warmup: int, allow_fallback: bool,
                  autotune_file: Path | None = None) -> list[str]:
    """The child's argv; `autotune_file` holds the parent's Triton autotuning choices (`autotune.snapshot`)."""
    command = [sys.executable, "-m", "ssmprof.profiler.child", workload, preset, json.dumps(overrides), str(warmup)]
    command += ["--allow-fallback"] if allow_fallback else []
    return command + (["--autotune", str(autotune_file)] if autotune_file else [])


# The launch configuration as Nsight Compute counts invocations: function name, 3-D grid, 3-D block and
# shared memory per block. The k-th launch of a configuration in a report is the k-th on the timeline
# (the child repeats the parent's iteration), which is what makes the join exact.
CONFIG_KEY = ["kernel_name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "shared_mem_bytes"]


def problems(timeline: pd.DataFrame) -> pd.Series:
    """What each launch computes, as far as its counters are concerned: the full kernel name, and for kernels
    launched by a framework op (cuBLAS, cuDNN and ATen kernels under `aten::*`) also that op and its input
    shapes, since their grid need not follow the shapes. Custom kernels (Triton, CUDA extensions) size their
    grids from the shapes, so their configuration is their problem; the duration check tests that."""
    library = timeline["launch_op"].fillna("").str.startswith("aten::")
    detail = "|" + timeline["launch_op"].fillna("") + "|" + timeline["launch_shapes"].fillna("")
    return timeline["kernel_name_full"].map(_normalized) + detail.where(library, "")


@dataclass
class SamplingPlan:
    """Which launches sampled mode measures: the first of each configuration (pass 1) and, in
    configurations that hold several problems, the first launch of each further problem (pass 2)."""

    ordinals: pd.Series  # each launch's 0-based position among the launches of its configuration
    problems: pd.Series
    ambiguous: list[str]  # "name grid block" of configurations holding several problems
    targets: dict[str, list[int]]  # pass 2: function name -> 1-based invocation numbers

    @classmethod
    def of(cls, timeline: pd.DataFrame) -> SamplingPlan:
        ordinals = timeline.groupby(CONFIG_KEY, sort=False).cumcount()
        problem = problems(timeline)
        frame = timeline[CONFIG_KEY].assign(ordinal=ordinals, problem=problem)
        counts = frame.groupby(CONFIG_KEY, sort=False)["problem"].transform("nunique")
        firsts = frame[(counts > 1) & ~frame.duplicated(CONFIG_KEY + ["problem"]) & (frame["ordinal"] > 0)]
        targets: dict[str, set[int]] = {}
        for name, ordinal in zip(firsts["kernel_name"], firsts["ordinal"], strict=True):
            targets.setdefault(name, set()).add(int(ordinal) + 1)
        ambiguous = frame[counts > 1].drop_duplicates(CONFIG_KEY)
        return cls(ordinals, problem, [_config_label(r) for r in ambiguous.itertuples()],
                   {name: sorted(numbers) for name, numbers in targets.items()})


def attach_counters(timeline: pd.DataFrame, passes: list[tuple[pd.DataFrame, dict]],
                    plan: SamplingPlan) -> tuple[pd.DataFrame, dict]:
    """The timeline with its counter columns, `counter_status` and `counter_lender` filled from the reports,
    and notes for run.json. `passes`: (report rows in profiling order, expected ordinals) per Nsight Compute
    pass, where expected ordinals are `{"all": True}` (every launch), `{"first": True}` (the first launch of
    each configuration) or `{"invocations": [1-based numbers], "names": [...]}` (a targeted pass).

    A launch is `measured` when a report row is its own launch (same configuration, same ordinal, same full
    name); otherwise it borrows from a measured launch of the same configuration and problem (`lent`), or
    stays without counters (`unmatched`)."""
    timeline = timeline.copy()
    timeline["_ordinal"] = plan.ordinals.to_numpy()
    timeline["_problem"] = plan.problems.to_numpy()
    sizes = timeline.groupby(CONFIG_KEY, sort=False).size().rename("_launches").reset_index()
    measured, not_on_timeline, mismatched = [], [], []
    for rows, expected in passes:
        placed, unknown, off = _place(rows, expected, sizes)
        measured.append(placed)
        not_on_timeline += unknown
        mismatched += off
    columns = [c for c in COUNTER_COLUMNS]
    profiled = pd.concat(measured, ignore_index=True).drop_duplicates(CONFIG_KEY + ["_ordinal"])
    own = timeline[CONFIG_KEY + ["_ordinal", "launch_idx", "kernel_name_full"]].merge(
        profiled[CONFIG_KEY + ["_ordinal", "_full"] + columns], on=CONFIG_KEY + ["_ordinal"], how="inner")
    own = own[own["kernel_name_full"].map(_normalized) == own["_full"].map(_normalized)]
    lenders = (timeline[["launch_idx", "_problem"] + CONFIG_KEY]
               .merge(own[["launch_idx"]], on="launch_idx")
               .drop_duplicates(CONFIG_KEY + ["_problem"])
               .rename(columns={"launch_idx": "counter_lender"}))
    joined = timeline.drop(columns=columns + ["counter_lender"]).merge(
        lenders, on=CONFIG_KEY + ["_problem"], how="left")
    is_own = joined["launch_idx"].isin(own["launch_idx"])
    joined.loc[is_own, "counter_lender"] = joined.loc[is_own, "launch_idx"]
    joined["counter_lender"] = joined["counter_lender"].fillna(-1).astype("int64")
    values = own.set_index("launch_idx")[columns]
    joined = joined.join(values, on="counter_lender")
    joined["counter_status"] = np.select([is_own, joined["counter_lender"] >= 0], ["measured", "lent"], "unmatched")
    notes = {"configurations": int(len(sizes)), "launches_profiled": int(len(own)),
             "ambiguous_configurations": plan.ambiguous, "targeted_invocations": plan.targets,
             "profiled_not_on_timeline": sorted(set(not_on_timeline)), "ordinal_mismatch": sorted(set(mismatched))}
    return joined.drop(columns=["_ordinal", "_problem"]).sort_values("launch_idx", ignore_index=True), notes


def _place(rows: pd.DataFrame, expected: dict, sizes: pd.DataFrame) -> tuple[pd.DataFrame, list[str], list[str]]:
    """Give each report row the ordinal of the launch it measured, per configuration and in profiling
    order; configurations whose row count differs from what was asked for are left out (named), since
    their rows cannot be placed with certainty."""
    rows = rows.rename(columns={"kernel_name_full": "_full"}).merge(sizes, on=CONFIG_KEY, how="left")
    unknown = [_config_label(r) for r in rows[rows["_launches"].isna()].drop_duplicates(CONFIG_KEY).itertuples()]
    placed, off = [], []
    for _, group in rows[rows["_launches"].notna()].groupby(CONFIG_KEY, sort=False):
        launches = int(group["_launches"].iloc[0])
        if "all" in expected:
            ordinals = list(range(launches))
        elif "first" in expected:
            ordinals = [0]
        else:
            ordinals = [n - 1 for n in expected["invocations"] if n <= launches]
        if len(ordinals) != len(group):
            off.append(_config_label(next(group.itertuples())))
            continue
        placed.append(group.assign(_ordinal=ordinals))
    columns = CONFIG_KEY + ["_ordinal", "_full"] + list(COUNTER_COLUMNS)
    frame = pd.concat(placed, ignore_index=True) if placed else pd.DataFrame(columns=columns)
    return frame.reindex(columns=columns), unknown, off


def _config_label(row) -> str:
    return (f"{row.kernel_name} grid {row.grid_x}x{row.grid_y}x{row.grid_z} block {row.block_x}x{row.block_y}x"
            f"{row.block_z} smem {row.shared_mem_bytes}")


def _normalized(name: str) -> str:
    """Demangled names as CUPTI and Nsight Compute print them differ at most in a leading `void ` and spaces."""
    name = name.strip()
    return "".join((name[5:] if name.startswith("void ") else name).split())
