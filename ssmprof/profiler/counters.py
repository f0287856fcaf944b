"""Counter collector: Nsight Compute on the same training iteration, in a child process, joined to the timeline.

The child (`ssmprof.profiler.child`) repeats the parent's run: same workload, config, seed and warm-up,
so its bracketed iteration launches the same kernels with the same launch configurations. Each kernel
of the report is matched to timeline launches by (short name, grid size, block size): in `sampled` mode
one profiled launch per configuration lends its counters to every launch of that configuration; in `all`
mode the k-th launch of a configuration in the report is the k-th on the timeline.
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
from pathlib import Path

import pandas as pd

from ssmprof.errors import SsmprofError
from ssmprof.profiler.ncu import ncu_argv
from ssmprof.schema import COUNTER_COLUMNS


class CounterCollectionError(SsmprofError):
    pass


PERMISSION_HINT = ("GPU performance counters are not permitted for this user (ERR_NVGPUCTRPERM): profile as "
                   "root, or have an administrator load the driver with NVreg_RestrictProfilingToAdminUsers=0; "
                   "or use --counters none")


def run_ncu(target: list[str], report: Path, mode: str, timeout_s: float,
            on_kernel: Callable[[int], None] | None = None) -> float:
    """Run Nsight Compute on `target`; returns its wall time. Any failure is one CounterCollectionError."""
    ncu = shutil.which("ncu")
    if ncu is None:
        raise CounterCollectionError("Nsight Compute (ncu) is not on PATH: install it, or use --counters none")
    started = time.perf_counter()
    try:
        child = subprocess.Popen(ncu_argv(target, report, mode, ncu=ncu), stdout=subprocess.PIPE,
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


def attach_counters(timeline: pd.DataFrame, counters: pd.DataFrame, mode: str) -> pd.DataFrame:
    """The timeline with its counter columns filled from the report (NaN where no profiled launch matches)."""
    timeline = timeline.copy()
    timeline["grid_size"] = timeline["grid_x"] * timeline["grid_y"] * timeline["grid_z"]
    timeline["block_size"] = timeline["block_x"] * timeline["block_y"] * timeline["block_z"]
    key = ["kernel_name", "grid_size", "block_size"]
    columns = [c for c in COUNTER_COLUMNS if c in counters.columns]
    report = counters[key + columns].astype({"grid_size": "int64", "block_size": "int64"})
    if mode == "all":
        timeline["ordinal"] = timeline.groupby(key).cumcount()
        report = report.assign(ordinal=report.groupby(key).cumcount())
        key = key + ["ordinal"]
    else:
        report = report.drop_duplicates(key)
    merged = timeline.drop(columns=columns).merge(report, on=key, how="left", validate="many_to_one")
    return merged.drop(columns=[c for c in ("grid_size", "block_size", "ordinal") if c in merged.columns])


def unmatched_profiled(timeline: pd.DataFrame, counters: pd.DataFrame) -> list[str]:
    """Profiled launch configurations the timeline never ran ("name grid block"): counters that found no
    launch to join to. Empty when the child repeated the parent's iteration exactly."""
    key = ["kernel_name", "grid_size", "block_size"]
    ran = pd.DataFrame({"kernel_name": timeline["kernel_name"],
                        "grid_size": timeline["grid_x"] * timeline["grid_y"] * timeline["grid_z"],
                        "block_size": timeline["block_x"] * timeline["block_y"] * timeline["block_z"]})
    profiled = counters[key].astype({"grid_size": "int64", "block_size": "int64"}).drop_duplicates()
    missing = profiled.merge(ran.drop_duplicates(), on=key, how="left", indicator=True)
    missing = missing[missing["_merge"] == "left_only"]
    return [f"{r.kernel_name} grid {r.grid_size} block {r.block_size}" for r in missing.itertuples()]
