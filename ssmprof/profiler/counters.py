"""Counter collector: Nsight Compute on the same training iteration, in a child process, joined to the timeline.

The child (`ssmprof.profiler.ncu_child`) repeats the parent's run: same workload, config, seed, warm-up and
Triton autotuning choices, so its bracketed iteration launches the same kernels with the same launch
configurations in the same order. A report row is placed on the timeline by its launch configuration (as
ncu counts invocations: function name, 3-D grid and block, shared memory) and its position among that
configuration's launches, and must carry the same full kernel name. A launch that was not profiled
borrows counters only from a profiled launch of the same configuration *and* problem (`problems`).
"""

from __future__ import annotations

import json
import os
import re
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
from ssmprof.kernels import is_fused_kernel
from ssmprof.op_work import problem_work
from ssmprof.profiler.counter_cost import AHEAD_SET_UP_S, ITERATION_UNDER_NCU_S, SECONDS_PER_LAUNCH
from ssmprof.profiler.ncu_argv import FLUSH, REPLAYS, ncu_argv, parse_query_metrics
from ssmprof.schema import COUNTER_COLUMNS, LAUNCH_CONFIG, STALL_COLUMNS, config_label, signal_file


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


# Kernel replay saves and restores all the GPU memory the profiled process holds, once per replay pass, in spare
# GPU memory while a copy fits there and through the host once it does not. Measured on an H100 (80 GB,
# `gpu_check.sh ncu-cost`): 20 profiled GEMM launches of 14 passes took 12.6 s holding 0.2 GiB, 14.7 s holding
# 30 GiB, and 181.9 s holding 45 GiB. PyTorch's caching allocator keeps the step's peak reserved for the whole
# iteration (37.6 GiB for the transformer at the paper preset, past the edge); without it the process holds only
# the tensors live at each launch. Kernels and their launch configurations do not change, only where the
# tensors lie; the child is slower between profiled launches, which costs little next to a replay.
PROFILED_CHILD_ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}


def replay_through_host(held_bytes: float, gpu_memory_bytes: float) -> bool:
    """Whether kernel replay's copy of what the profiled process holds (at most its peak of live tensors, with the
    caching allocator off) no longer fits beside it on the GPU, so that every replay pass goes through the host:
    30 GiB on the H100's 79 fitted, 45 did not (above); mamba3-lm's 49 GiB at the paper preset did not finish 52
    pass-1 launches in 270 s on an H100 (tests/data/next-ssms-h100) where the H200 (131 GiB) took 30 s."""
    return 2 * held_bytes > gpu_memory_bytes


REPLAY_CHOICES = ("auto", *REPLAYS)


def replay_mode(choice: str, held_bytes: float | None, gpu_memory_bytes: float) -> str:
    """The replay a counter pass uses: `choice` where it names one (`--replay`), else ("auto") application
    replay where kernel replay would go through the host (`replay_through_host`): each of its passes reruns the
    child instead (about its start-up, build and warm-up, 15-20 s at the paper preset, per metric pass), which
    beats copying tens of GiB through the host at every pass of every launch (182 s for 20 launches at 45 GiB)."""
    if choice not in REPLAY_CHOICES:
        raise CounterCollectionError(f"--replay must be one of {', '.join(REPLAY_CHOICES)}, got {choice!r}")
    if choice != "auto":
        return choice
    return "application" if held_bytes is not None and replay_through_host(held_bytes, gpu_memory_bytes) else "kernel"


# A pass started ahead of its turn: the child imports what it can, touching no GPU, then waits for this file.
GO_ENV = "SSMPROF_GO_FILE"


class NcuPass:
    """One Nsight Compute run of a target, started at once; `ahead=True` starts it ahead of its turn: its child
    starts Python and imports its kernel libraries (5-10 s a pass on the H100, outside the replayed iteration)
    while the pass before it replays, then waits for `finish` before it touches the GPU. Any failure is one
    CounterCollectionError. `env`: variables the child gets beside this process's (e.g. CUDA_VISIBLE_DEVICES).
    """

    def __init__(self, target: list[str], report: Path, mode: str, metrics: list[str] | None = None,
                 targets: dict[str, list[int]] | None = None, names: list[str] | None = None, ahead: bool = False,
                 env: dict[str, str] | None = None, replay: str = "kernel", cache: str = FLUSH):
        self.report, self.go = report, report.with_suffix(".go") if ahead else None
        self.launched = time.time()
        # application replay saves nothing, so the child keeps its caching allocator
        unsaved = PROFILED_CHILD_ENV if replay == "kernel" else {}
        env = {**os.environ, **unsaved, **(env or {}), **({GO_ENV: str(self.go)} if self.go else {})}
        try:
            self.child = subprocess.Popen(ncu_argv(target, report, mode, metrics, ncu=_ncu(), targets=targets,
                                                   names=names, replay=replay, cache=cache),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          errors="replace", env=env)
        except OSError as exc:
            raise CounterCollectionError(f"cannot start Nsight Compute: {exc.strerror}") from None
        self.tail: deque[str] = deque(maxlen=40)
        self.seen = {"permission": False, "profiled": 0}
        self.on_kernel: Callable[[int], None] | None = None
        self.lock = threading.Lock()  # a kernel profiled before `finish` is told once finish gives `on_kernel`
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.child.stdout is not None  # opened with stdout=PIPE
        for line in self.child.stdout:
            self.tail.append(line.rstrip())
            if "ERR_NVGPUCTRPERM" in line:
                self.seen["permission"] = True
            if line.startswith("==PROF== Profiling"):
                with self.lock:
                    self.seen["profiled"] += 1
                    if self.on_kernel:
                        self.on_kernel(self.seen["profiled"])

    def finish(self, timeout_s: float, on_kernel: Callable[[int], None] | None = None) -> float:
        """Let the pass go on (if it waits) and wait for it; returns its wall time from then (from its start
        where it never waited): what it adds to the collection's wall time. Sets `ended`."""
        with self.lock:
            self.on_kernel = on_kernel
            if on_kernel:
                for done in range(1, self.seen["profiled"] + 1):
                    on_kernel(done)
        began = time.time() if self.go else self.launched
        if self.go:
            signal_file(self.go)
        try:
            returncode = self.child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()
            raise CounterCollectionError(f"Nsight Compute timed out after {timeout_s:.0f} s "
                                         f"({self.seen['profiled']} kernels profiled); raise --ncu-timeout") from None
        self.reader.join(timeout=10)
        if self.seen["permission"]:
            raise CounterCollectionError(PERMISSION_HINT)
        text = "\n".join(self.tail)
        if "No space left on device" in text:
            raise CounterCollectionError(f"disk full while Nsight Compute wrote {self.report}")
        if returncode != 0:
            raise CounterCollectionError(f"the profiled child failed under Nsight Compute (exit {returncode}): "
                                         f"{_last_message(self.tail)}")
        if not self.report.exists():
            raise CounterCollectionError(f"Nsight Compute wrote no report ({_last_message(self.tail)})")
        self.ended = time.time()
        return self.ended - began

    def cancel(self) -> None:
        """Stop a pass that will not get its turn (an earlier one failed)."""
        if self.child.poll() is None:
            self.child.kill()
            self.child.wait()


def run_ncu(target: list[str], report: Path, mode: str, timeout_s: float,
            on_kernel: Callable[[int], None] | None = None, metrics: list[str] | None = None,
            targets: dict[str, list[int]] | None = None, names: list[str] | None = None) -> float:
    """Run Nsight Compute on `target` now; returns its wall time. Any failure is one CounterCollectionError."""
    return NcuPass(target, report, mode, metrics, targets, names).finish(timeout_s, on_kernel)


def _last_message(lines) -> str:
    meaningful = [line for line in lines if line.strip() and not line.startswith("==PROF==")]
    return meaningful[-1].strip() if meaningful else "no output"


# Warm-up steps of a counter pass's child, at most (the timeline run's `--warmup` where fewer). The timeline run's
# warm-up is where Triton compiles and autotunes; the child finds the kernels compiled (the on-disk cache) and the
# choices pinned, so its first step only loads them, its one timed step is a steady one, and the profiled iteration
# the third. With the timeline's 3 warm-up steps the H100 suite's 18 passes spent 52 s warming up and the suite 606 s;
# with 1, 35 s and 580 s, the counters the same (tests/data/suite-cost-h100-pass-warmup).
PASS_WARMUP = 1


def child_command(workload: str, preset: str, overrides: dict, warmup: int, allow_fallback: bool,
                  autotune_file: Path | None = None, timings_file: Path | None = None,
                  state_file: Path | None = None) -> list[str]:
    """The child's argv (`warmup`: the timeline run's, capped at PASS_WARMUP); `autotune_file` holds the parent's
    Triton autotuning choices (`autotune.snapshot`), `timings_file` receives the child's own timings
    (`pass_seconds`), `state_file` the weights the parent's profiled iteration ran (`harness.run_training`)."""
    command = [sys.executable, "-m", "ssmprof.profiler.ncu_child", workload, preset, json.dumps(overrides),
               str(min(warmup, PASS_WARMUP))]
    command += ["--allow-fallback"] if allow_fallback else []
    command += ["--autotune", str(autotune_file)] if autotune_file else []
    command += ["--state", str(state_file)] if state_file else []
    return command + (["--timings", str(timings_file)] if timings_file else [])


def pass_seconds(launched: float, ended: float, timings: dict) -> dict[str, float]:
    """One Nsight Compute pass's wall time taken apart: `start` (ncu's and Python's start-up and the imports,
    until the child's code began), `ahead` (a pass started ahead of its turn: importing its kernel libraries and
    waiting for the pass before it, overlapped with that pass's replay), `cuda` (initializing CUDA), `plan`
    (planning the kernels: probing and importing what was not imported ahead), `pin` (pinning the autotuning
    choices), the child harness's stages (`build`, `warmup`, `timed`, and `profiled`: the iteration ncu
    replays), `harness` (the harness outside its stages), and `exit` (after the child's code ended: the process
    ending, ncu writing the report). `launched` and `ended`: when the parent started ncu and saw it end
    (time.time()); `timings`: what the child wrote with --timings. The parts add up to `ended - launched`."""
    stages = {stage: float(timings[stage]) for stage in ("build", "warmup", "timed", "profiled") if stage in timings}
    went = timings.get("went", timings["began"])
    return {"start": timings["began"] - launched, "ahead": went - timings["began"],
            "cuda": timings["cuda_ready"] - went, "plan": timings["planned"] - timings["cuda_ready"],
            "pin": timings["pinned"] - timings["planned"], **stages,
            "harness": timings["ended"] - timings["pinned"] - sum(stages.values()), "exit": ended - timings["ended"]}


# How far apart two passes' first losses may be (relative). The first step runs before any optimizer update: the same
# seed gives the same weights and batch, and its forward repeats up to the order of floating-point reductions, far
# below bf16's 2**-8 resolution. The profiled step's losses are recorded, not checked: by then the backward's
# atomics have moved the weights apart by a few bf16 units, and AdamW's normalized update amplifies that (mamba1-lm
# paper on an H100: 1.9e-03 and 3.8e-03 apart after two updates, its first losses identical).
PASS_LOSS_TOLERANCE = 1e-3


def check_same_work(works: list[dict]) -> dict:
    """Whether the counter passes of one profile ran the same work (`ncu_child.pass_work` of each): the same GPU
    model, config and kernel plan exactly, and their first losses within PASS_LOSS_TOLERANCE where they report
    one (a user script's passes do not). Passes spread over several GPUs are joined as one iteration only if they
    did; run.json records this as `pass_work`, with the profiled step's losses and their spread beside.
    Raises CounterCollectionError naming what differs."""
    first = works[0]
    for field in ("gpu", "config", "provenance"):
        differs = [number for number, work in enumerate(works, start=1) if work.get(field) != first.get(field)]
        if differs:
            raise CounterCollectionError(f"counter pass {differs[0]} ran other work than pass 1 ({field} differs): "
                                         "its counters cannot be joined with the others'")
    if "loss" not in first:  # a user script's passes (`script_child`): its loss is its own, ssmprof never sees it
        return {"passes": len(works), "gpu": first.get("gpu"), "same": True}
    starts = [float(work.get("first_loss", work["loss"])) for work in works]
    start_spread = _relative_spread(starts)
    if start_spread > PASS_LOSS_TOLERANCE:
        raise CounterCollectionError(f"the counter passes' first losses differ by {start_spread:.1e} (relative, "
                                     f"more than {PASS_LOSS_TOLERANCE:g}): they did not start from the same "
                                     "weights and batch")
    losses = [float(work["loss"]) for work in works]
    return {"passes": len(works), "gpu": first.get("gpu"), "first_losses": starts, "first_loss_spread": start_spread,
            "losses": losses, "loss_spread": _relative_spread(losses), "same": True}


def _relative_spread(values: list[float]) -> float:
    return (max(values) - min(values)) / max(abs(values[0]), 1e-12)


# The warp-stall pass: the functions holding this share of the kernel time, at most this many (plus the SSM
# kernels); each profiled once, so the pass costs about one profiled launch per function.
STALL_TIME_SHARE = 0.9
STALL_FUNCTIONS = 24
# Nsight Compute's launch configuration: function name, 3-D grid, 3-D block, shared memory per block. Its
# per-launch-config filter profiles the first launch of each (pass 1 of sampled mode).
CONFIG_KEY = ["kernel_name", *LAUNCH_CONFIG, "shared_mem_bytes"]
# Words a demangler may or may not print: CUPTI writes `vectorized_elementwise_kernel<4, ...,
# std::array<char*, 3ul> >(int, BinaryFunctor<...>, ...)` and `{lambda(float, float)#1}` where Nsight Compute
# writes `<(int)4, ..., std::array<char *, (unsigned long)2>>(int, T2, T3)` and `[lambda(float, float)
# (instance 1)]` for the same kernels.
_STYLE_WORDS = {"void", "int", "unsigned", "signed", "long", "short", "char", "bool", "const",
                "u", "ul", "l", "ll", "ull", "anonymous", "namespace", "unnamed", "instance"}


def kernel_signature(full_name: str, short_name: str) -> str:
    """The kernel's identity as both demanglers print it: the identifiers of its qualified name and template
    arguments, without anything in parentheses (parameter lists, which Nsight Compute abbreviates to `T1`,
    casts, lambda signatures) and without the words the demanglers differ in."""
    kept, depth = [], 0
    for char in full_name:
        depth += char == "("
        if depth == 0:
            kept.append(char)
        depth -= char == ")" and depth > 0
    # CUPTI numbers lambdas `#1` (Nsight Compute's `(instance 1)` went with the parentheses) and prints
    # booleans as words where Nsight Compute casts them: `(bool)1`
    name = re.sub(r"#\d+", "", "".join(kept)).replace("true", "1").replace("false", "0")
    start = name.find(short_name)
    if start < 0:
        return short_name
    end = start + len(short_name)
    if name[end:end + 1] == "<":  # through the matching ">" of the template arguments
        depth = 0
        for index in range(end, len(name)):
            depth += {"<": 1, ">": -1}.get(name[index], 0)
            if depth == 0:
                end = index + 1
                break
    words = re.findall(r"[A-Za-z_]\w*|\d+", name[:end])  # `3ul` -> "3", "ul" (a style word)
    return " ".join(w for w in words if w not in _STYLE_WORDS)


def problems(timeline: pd.DataFrame, signatures: pd.Series | None = None) -> pd.Series:
    """What each launch computes, as far as its counters are concerned: the kernel (signature), and for kernels
    launched by a framework op (cuBLAS, cuDNN and ATen kernels under `aten::*`) also that op and its input
    shapes, since their grid need not follow the shapes. Custom kernels (Triton, CUDA extensions) size their
    grids from the shapes, so their configuration is their problem; the duration check tests that."""
    library = timeline["launch_op"].fillna("").str.startswith("aten::")
    detail = "|" + timeline["launch_op"].fillna("") + "|" + timeline["launch_shapes"].fillna("")
    return (_signatures(timeline) if signatures is None else signatures) + detail.where(library, "")


# Pass 2 skips a further problem of a configuration that holds less than this share of the kernel time: chosen on
# the bundled H100 paper runs, where pass 2 profiled 201 launches for graph-mamba and 212 for mamba-vision (a
# profiled launch costs 0.4-0.6 s there), and skipping problems under 0.05 % each leaves 116 and 131, giving up
# at most 0.9 % of kernel time (under 0.1 % for the LM workloads). Those launches keep no counters.
PASS_2_MIN_SHARE = 0.0005
# No pass profiles a function (a kernel name) holding less than this share of the kernel time, but for the SSM
# kernels: a profiled launch costs about the same whatever its duration (7 replay passes, each restoring the
# process's memory: up to 33 GiB for the LM workloads), so the many elementwise functions that hold almost no
# time cost as much as the GEMMs. (Runs measured before the SSM kernels were exempt lacked counters for the
# `_chunk_cumsum_*` kernels, 0.07-0.16 % of their time; the bundled runs have been measured again since.)
# Chosen on the bundled H200 paper runs: 0.1 % leaves out 13-23 of 53-207 launch configurations of pass 1 and
# 0.12-0.49 % of the kernel time (0.05 %: 5-22 configurations, 0.09-0.33 %; 0.2 %: 17-25, 0.39-1.42 %).
PASS_1_MIN_SHARE = 0.001


def is_nccl(names: pd.Series) -> pd.Series:
    """The launches of NCCL kernels: no pass asks for them (Nsight Compute hangs replaying them,
    `ncu_argv.NOT_NCCL`)."""
    return names.str.startswith("nccl")


# A family: the launch configurations of one kernel instantiation (its signature) and tile (block, shared memory)
# that differ only in grid. Where the grid follows the data (a mixture of experts sizes each expert's GEMMs and
# elementwise kernels by the tokens routed to it), every expert is a configuration of its own: hf:granite-4.0-hybrid
# small has 1,207 configurations in 180 families, 19 of them holding 1,020. The families of a function worth it
# (`_worth_binning`) are not profiled configuration by configuration but at FAMILY_BINS grids spanning each (its
# smallest, its largest, and the bins of log-grid between), and lend to the rest with the work scaled by grid
# (`FAMILY_SCALED_UNITS`). Three: the smallest and the largest bound every lent launch (the lending interpolates,
# never extrapolates), and the one between is the held-out check of the lending (`family_errors`).
FAMILY_BINS = 3
FAMILY_KEY = ["kernel_name", "block_x", "block_y", "block_z", "shared_mem_bytes"]
# Counters that count work (bytes moved, instructions, tensor ops, waves of blocks) grow with the blocks a launch
# runs; rates, shares, hit rates and per-thread attributes do not, and are lent as measured.
FAMILY_SCALED_UNITS = ("bytes", "inst", "ops", "wavefronts", "waves")
SCALED_COLUMNS = [name for name, column in COUNTER_COLUMNS.items() if column.unit in FAMILY_SCALED_UNITS]
# A scaled lender shorter than this: its Nsight Compute duration exceeds its timeline duration by ncu's fixed
# per-launch overhead (up to 4.2 us on kernels under 10 us, `analysis.trust.counter_checks`' duration tolerance),
# which does not grow with the work, so a launch it lends to keeps that excess rather than its ratio. Lent by ratio,
# hf:granite-4.0-hybrid's expert copies of 3,000-4,800 blocks from one of 512 (3.0 us on the timeline, 5.2 under
# ncu: x1.76) were 4.8-8 us over their timeline durations and failed the check: 108 launches, 2.0 % of its time.
SHORT_LENDER_NS = 10_000
# What the held-out check compares: the work counters the roofline and the cache analyses stand on
HELD_OUT_COLUMNS = {"dram_error_pct": ["dram_read_bytes", "dram_write_bytes"], "l2_error_pct": ["l2_bytes"],
                    "inst_error_pct": ["warp_inst_executed"]}


@dataclass
class SamplingPlan:
    """Which launches each Nsight Compute pass measures, in launch order. Pass 1 (sampled): the first launch
    of each launch configuration of the functions profiled by configuration. Pass 2 (targeted): the first launch
    of each further problem holding at least PASS_2_MIN_SHARE of the kernel time where a configuration holds
    several, and for the functions with a family of many grids (`binned`), one launch in each of FAMILY_BINS grid
    bins of each of their families; asked for by function name and invocation number. Nsight Compute numbers the
    invocations of a function across all its launch configurations (seen on the H100: numbers computed per
    configuration picked launches of other configurations), so the numbers here are per function."""

    signatures: pd.Series  # each launch's `kernel_signature`
    problems: pd.Series
    ambiguous: list[str]  # configurations holding several problems
    targets: dict[str, list[int]]  # the targeted passes together: function name -> 1-based invocation numbers
    first_of_config: pd.Series
    invocation: pd.Series  # each launch's 1-based invocation number of its function
    too_small: pd.Series  # launches of a further problem too small for pass 2 (PASS_2_MIN_SHARE): not collected
    functions: list[str]  # the functions the passes profile: the SSM kernels, the others at PASS_1_MIN_SHARE
    minor: pd.Series  # launches of the other functions: not collected
    family: pd.Series  # each launch's family (`FAMILY_KEY` and signature, as words)
    binned: list[str]  # functions profiled at grid bins of their families, in the targeted pass only
    blocks: pd.Series  # each launch's grid size in blocks
    target_passes: list[dict[str, list[int]]]  # `targets` split into the passes that profile them (`_split_targets`)

    @classmethod
    def of(cls, timeline: pd.DataFrame, min_share: float = PASS_2_MIN_SHARE,
           function_share: float = PASS_1_MIN_SHARE, only: list[str] | None = None,
           bins: int | None = FAMILY_BINS) -> SamplingPlan:
        """The plan for `timeline`; no pass profiles a function under `function_share` of the kernel time (nor,
        with `only`, one it does not name), pass 2 skips further problems under `min_share` of it; families of
        more configurations than `bins` are profiled at that many grids (None: every configuration, as runs
        recorded before families were)."""
        signatures = _signatures(timeline)
        problem = problems(timeline, signatures)
        invocation = timeline.groupby("kernel_name", sort=False).cumcount() + 1
        kernel_time = timeline.groupby("kernel_name")["duration_ns"].sum()
        held = kernel_time >= function_share * max(kernel_time.sum(), 1)
        functions = sorted(kernel_time.index[held | kernel_time.index.map(is_fused_kernel)])  # the SSM kernels always
        if only is not None:
            functions = sorted(set(only) & set(kernel_time.index))
        minor = ~timeline["kernel_name"].isin(functions)
        asked = ~minor & ~is_nccl(timeline["kernel_name"])
        family = family_labels(timeline, signatures)
        blocks = timeline["grid_x"] * timeline["grid_y"] * timeline["grid_z"]
        config = _joined(timeline, CONFIG_KEY)
        binned = _worth_binning(timeline[asked], config[asked], family[asked], bins)
        in_bins = timeline["kernel_name"].isin(binned) & asked
        first = ~timeline.duplicated(CONFIG_KEY)
        frame = timeline[CONFIG_KEY].assign(problem=problem)
        several = frame.groupby(CONFIG_KEY, sort=False)["problem"].transform("nunique") > 1
        # every launch of a problem the first pass does not measure could represent it
        unmeasured = frame.groupby(CONFIG_KEY, sort=False)["problem"].transform("first") != frame["problem"]
        pair = frame["problem"] + "@" + config
        share = timeline.groupby(pair)["duration_ns"].transform("sum") / max(timeline["duration_ns"].sum(), 1)
        too_small = several & unmeasured & (share < min_share) & ~minor & ~in_bins
        further = several & unmeasured & ~too_small & asked & ~in_bins
        grid_bin = family + "#" + _grid_bins(family[in_bins], blocks[in_bins], bins or FAMILY_BINS).astype(str)
        reach = pd.concat([pair[further], grid_bin[in_bins]])  # (a problem, a family's grid bin) of each candidate
        candidates = pd.DataFrame({"kernel_name": timeline["kernel_name"][reach.index],
                                   "number": invocation[reach.index], "pair": reach})
        launched = invocation.groupby(timeline["kernel_name"]).max()
        target_passes = _split_targets(candidates, launched)
        targets = {name: numbers for wanted in target_passes for name, numbers in wanted.items()}
        labels = [_config_label(r) for r in timeline[several].drop_duplicates(CONFIG_KEY).to_dict("records")]
        return cls(signatures, problem, labels, targets, first, invocation, too_small, functions, minor, family,
                   binned, blocks, target_passes)

    @property
    def by_configuration(self) -> list[str]:
        """The functions pass 1 profiles configuration by configuration: all but the `binned` ones."""
        return [name for name in self.functions if name not in self.binned]

    def expected(self, timeline: pd.DataFrame, mode: str, targets: dict[str, list[int]] | None = None,
                 names: list[str] | None = None) -> pd.Index:
        """Positions (in `timeline`) of the launches a pass profiles, in launch order (of the kernels
        `names` only, where given)."""
        profiled = ~is_nccl(timeline["kernel_name"])
        if names is not None:
            profiled &= timeline["kernel_name"].isin(names)
        if targets:
            numbers = {n for wanted in targets.values() for n in wanted}  # one --kernel-id: the union
            profiled &= timeline["kernel_name"].isin(targets) & self.invocation.isin(numbers)
        elif mode == "sampled":
            profiled &= self.first_of_config
        return timeline.index[profiled]


def _worth_binning(timeline: pd.DataFrame, config: pd.Series, family: pd.Series, bins: int | None) -> list[str]:
    """The functions profiled at grid bins: those whose families need at most half as many launches at `bins` grids
    each as their configurations one by one. A binned function goes to the targeted passes, whose invocation numbers
    also profile the other functions named there, so binning that saves little costs launches: with every function
    holding a family of more than `bins` grids binned, the H100 mamba2-lm paper run needed 73 launches where
    configuration by configuration took 70, while hf:granite-4.0-hybrid small's 1,207 configurations need 99 bins."""
    if bins is None:
        return []
    per_family = config.groupby(family).nunique()
    function = timeline.groupby(family)["kernel_name"].first()
    needed = per_family.clip(upper=bins).groupby(function).sum()
    configurations = per_family.groupby(function).sum()
    return sorted(needed.index[2 * needed <= configurations])


def _joined(frame: pd.DataFrame, columns: list[str]) -> pd.Series:
    """Each row's `columns` as words joined by spaces (a key to group by), built column by column: a row-wise join
    took 0.9 s on hf:granite-4.0-hybrid small's 5,414 launches."""
    joined = frame[columns[0]].astype(str)
    for column in columns[1:]:
        joined = joined + " " + frame[column].astype(str)
    return joined


def family_labels(timeline: pd.DataFrame, signatures: pd.Series) -> pd.Series:
    """Each launch's family in words: its kernel's signature, block and shared memory (`FAMILY_KEY`)."""
    tile = _joined(timeline, FAMILY_KEY[1:])
    return timeline["kernel_name"] + " [" + signatures + "] block/smem " + tile


def _grid_bins(family: pd.Series, blocks: pd.Series, bins: int = FAMILY_BINS) -> pd.Series:
    """Each launch's grid bin within its family: 0 for the family's smallest grid, `bins - 1` for its largest,
    and between them equal ranges of log-grid (a family spans 1 to thousands of blocks)."""
    size = np.log(blocks.astype(float))
    low, high = size.groupby(family).transform("min"), size.groupby(family).transform("max")
    inner = 1 + np.floor((size - low) / (high - low).where(high > low, 1) * (bins - 2)).clip(0, bins - 3)
    return pd.Series(np.where(size == low, 0, np.where(size == high, bins - 1, inner)), index=family.index,
                     dtype="int64")


# `--counters focus`: the SSM layer's fused kernels and this many others, the longest by total time.
FOCUS_TOP = 5


def focus_kernels(timeline: pd.DataFrame, top: int = FOCUS_TOP) -> list[str]:
    """Short names of the kernels `--counters focus` measures: every fused SSM-layer kernel of the iteration
    (names holding a stem of `kernels.FUSED_KERNELS`) and the `top` others with the most timeline time. A
    sweep's regime map needs the SSM kernels' limiters and the big kernels' rates, not every elementwise
    kernel's: Nsight Compute's cost grows with the kernels it replays (about 0.4 s each at the paper preset)."""
    names = timeline["kernel_name"]
    fused = names.map(is_fused_kernel)
    others = (timeline[~fused & ~is_nccl(names)].groupby("kernel_name")["duration_ns"].sum()
              .sort_values(ascending=False).head(top).index)
    return sorted(set(names[fused]) | set(others))


def _cheapest_invocations(candidates: pd.DataFrame, invocations: pd.Series) -> dict[str, list[int]]:
    """Invocation numbers that reach every problem at least once (columns kernel_name, number, pair), profiling
    few launches. `invocations`: each function's number of launches in the iteration.

    One --kernel-id takes one set of numbers for all the named functions, so each number asked for profiles
    that invocation of every named function that has one: a low number costs a launch of each, a high one
    only of the functions launched that often. Greedy weighted set cover: the number that reaches the most
    problems not yet reached per launch it costs, the lowest on ties."""
    left = set(candidates["pair"])
    reach = {int(number): set(pairs) for number, pairs in candidates.groupby("number")["pair"]}
    named = invocations[invocations.index.isin(candidates["kernel_name"])].to_numpy()
    cost = {number: int((named >= number).sum()) for number in reach}
    chosen = []
    while left:
        number = max(reach, key=lambda n: (len(reach[n] & left) / cost[n], -n))
        chosen.append(number)
        left -= reach[number]
    picked = candidates[candidates["number"].isin(chosen)]
    return {name: sorted(set(group["number"].astype(int))) for name, group in picked.groupby("kernel_name")}


# One more targeted pass costs about as much as profiling this many launches more: its set-up once its preparation
# overlapped the pass before it, and the iteration under ncu (`counter_cost`), over the cost of a profiled launch.
PASS_IN_LAUNCHES = (AHEAD_SET_UP_S + ITERATION_UNDER_NCU_S) / SECONDS_PER_LAUNCH


def _split_targets(candidates: pd.DataFrame, launched: pd.Series) -> list[dict[str, list[int]]]:
    """The targeted passes over `candidates` (`_cheapest_invocations`' columns; `launched`: each function's launches).
    One --kernel-id applies the union of its numbers to every function it names, so a pass naming many functions
    profiles each at the others' numbers too: on hf:granite-4.0-hybrid small one pass for all profiled 396 launches
    to reach 99 grid bins. Each function starts in a pass of its own at its own numbers; the two passes whose
    merging adds the fewest launches are merged while that is fewer than one pass costs (PASS_IN_LAUNCHES); each
    merged pass then takes the numbers chosen for its functions together where those profile fewer launches."""

    def launches(group: dict[str, list[int]]) -> int:
        numbers = np.array(sorted({n for wanted in group.values() for n in wanted}))
        return int(sum((numbers <= launched[name]).sum() for name in group))

    groups = [{name: _cheapest_invocations(group, launched)[name]}
              for name, group in candidates.groupby("kernel_name", sort=True)]
    while len(groups) > 1:
        costs = [launches(group) for group in groups]
        extra, first, second = min((launches({**groups[i], **groups[j]}) - costs[i] - costs[j], i, j)
                                   for i in range(len(groups)) for j in range(i + 1, len(groups)))
        if extra >= PASS_IN_LAUNCHES:
            break
        groups[first] = {**groups[first], **groups.pop(second)}
    together = [_cheapest_invocations(candidates[candidates["kernel_name"].isin(group)], launched)
                for group in groups]
    return [joint if launches(joint) < launches(group) else group
            for group, joint in zip(groups, together, strict=True)]


def attach_counters(timeline: pd.DataFrame, passes: list[tuple[pd.DataFrame, pd.Index]],
                    plan: SamplingPlan) -> tuple[pd.DataFrame, dict]:
    """The timeline with its counter columns, `counter_status`, `counter_lender` and `counter_scale` filled from
    the reports, and notes for run.json. `passes`: (report rows in profiling order, the timeline positions that
    pass profiles, from `plan.expected`).

    Each report row is placed on the next expected launch of the same configuration and kernel signature
    (the child repeats the parent's iteration, so the orders agree; a row that fits no launch is named with its
    cause, `not_placed_cause`, never guessed). Placed rows make their launches `measured`; every other launch
    borrows from a measured launch of the same configuration and problem, or, in a family profiled at grid bins
    (`plan.binned`), from the measured launch of its family nearest in grid, its work counters scaled by the
    ratio of grids and its Nsight Compute duration by the ratio of timeline durations, or, from a lender under
    SHORT_LENDER_NS, by the lender's excess over its timeline duration (`lent`); or has no counters (`unmatched`)."""
    timeline = timeline.reset_index(drop=True)
    signatures = pd.Series(plan.signatures.to_numpy(), index=timeline.index)
    columns = list(COUNTER_COLUMNS)
    measured: dict[int, pd.Series] = {}
    unplaced: list[str] = []
    rows_read = 0
    for rows, expected in passes:
        placed, missed = _align(rows, timeline.loc[expected], signatures.loc[expected])
        for position, row in placed:
            measured.setdefault(position, row.reindex(columns))
        unplaced += [f"{label}: {not_placed_cause(row, timeline, signatures)}" for label, row in missed]
        rows_read += len(rows)
    joined = timeline.copy()
    own, lender = _lenders(timeline, plan, measured)
    scale = _scaled_lenders(timeline, plan, own, lender)
    values = pd.DataFrame.from_dict(measured, orient="index", columns=columns) if measured else None
    for column in columns:
        joined[column] = lender.map(values[column]) if values is not None else float("nan")
    joined[SCALED_COLUMNS] = joined[SCALED_COLUMNS].mul(scale.to_numpy(), axis=0)
    durations = timeline["duration_ns"].to_numpy(dtype=float)
    rescaled = (scale != 1).to_numpy()
    lender_rows = lender[rescaled].astype(int).to_numpy()
    joined.loc[rescaled, "ncu_duration_ns"] = lent_ncu_duration(
        joined.loc[rescaled, "ncu_duration_ns"].to_numpy(dtype=float), durations[lender_rows], durations[rescaled])
    joined["counter_scale"] = scale.to_numpy()
    joined["counter_lender"] = timeline["launch_idx"].reindex(lender).fillna(-1).astype("int64").to_numpy()
    unlent = lender.isna().to_numpy()
    skipped = plan.too_small.to_numpy() & unlent
    minor = plan.minor.to_numpy() & unlent
    never_asked = skipped | minor | is_nccl(timeline["kernel_name"]).to_numpy()
    joined["counter_status"] = np.select([own, lender.notna(), never_asked],
                                         ["measured", "lent", "not collected"], "unmatched")
    total = max(timeline["duration_ns"].sum(), 1)

    def left_out(launches: np.ndarray, share: float, **more) -> dict:
        return {"min_share": share, **more, "launches": int(launches.sum()),
                "time_fraction": float(timeline.loc[launches, "duration_ns"].sum() / total)}

    notes = {"configurations": int(timeline.groupby(CONFIG_KEY).ngroups), "launches_profiled": int(own.sum()),
             "ambiguous_configurations": plan.ambiguous, "targeted_invocations": plan.targets,
             "minor_functions": left_out(minor, PASS_1_MIN_SHARE,
                                         functions=int(timeline.loc[minor, "kernel_name"].nunique())),
             "too_small_for_pass_2": left_out(skipped, PASS_2_MIN_SHARE),
             "profiled_not_placed": sorted(set(unplaced)),
             "grid_match_pct": 100.0 * (rows_read - len(unplaced)) / rows_read if rows_read else None,
             "families": family_errors(joined, plan, measured)}
    return joined, notes


def lent_ncu_duration(lender_ncu_ns: np.ndarray, lender_ns: np.ndarray, taker_ns: np.ndarray) -> np.ndarray:
    """The Nsight Compute duration a launch of timeline duration `taker_ns` borrows with its scaled counters from a
    lender measured `lender_ncu_ns` under ncu and `lender_ns` on the timeline: the lender's excess kept where the
    lender is short (SHORT_LENDER_NS: ncu's fixed per-launch overhead), its ratio kept otherwise."""
    excess = taker_ns + (lender_ncu_ns - lender_ns)
    ratio = lender_ncu_ns * taker_ns / np.maximum(lender_ns, 1)
    return np.where(lender_ns < SHORT_LENDER_NS, excess, ratio)


def not_placed_cause(row: pd.Series, timeline: pd.DataFrame, signatures: pd.Series) -> str:
    """Why a profiled report row found no launch of the timeline: its kernel never ran in the traced iteration, or
    ran there only at other grids (the profiled iteration ran other sizes: tokens routed otherwise, data-dependent
    shapes), or ran there in this configuration but not among the launches the pass was to profile (another
    order, more launches)."""
    signature = kernel_signature(row["kernel_name_full"], row["kernel_name"])
    same_kernel = signatures == signature
    if not same_kernel.any():
        return "its kernel is not in the traced iteration"
    same_config = same_kernel & (timeline[CONFIG_KEY] == pd.Series(row[CONFIG_KEY].to_numpy(), index=CONFIG_KEY)
                                 ).all(axis=1)
    if not same_config.any():
        return "its grid is not in the traced iteration (the profiled iteration ran other sizes)"
    return "the traced iteration has it, but not where this pass expected it (launched in another order or more often)"


def _lenders(timeline: pd.DataFrame, plan: SamplingPlan, measured: dict) -> tuple[pd.Series, pd.Series]:
    """(whether each launch was measured itself, the position of the launch it takes its values from: its own,
    else the first measured launch of the same configuration and problem, else NaN)."""
    own = pd.Series(False, index=timeline.index)
    own[list(measured)] = True
    key = CONFIG_KEY + ["_problem"]
    keyed = timeline[CONFIG_KEY].assign(_problem=plan.problems.to_numpy(), _position=timeline.index)
    lenders = keyed[own].drop_duplicates(key).rename(columns={"_position": "_lender"})
    lender = keyed.merge(lenders, on=key, how="left")["_lender"]
    # positions as an array: pandas 3.0.0 (the GPU hosts' torch environment) refuses an Index on an all-True mask
    lender[own.to_numpy()] = timeline.index[own].to_numpy()
    return own, lender


def _scaled_lenders(timeline: pd.DataFrame, plan: SamplingPlan, own: pd.Series, lender: pd.Series) -> pd.Series:
    """Fill `lender` (in place) for the launches that found no measured launch of their configuration and problem:
    first the measured launch of the same configuration and kernel whose recorded work (`op_work.problem_work`:
    2MNK of a GEMM, else the elements its inputs broadcast to) is nearest; a launch whose shapes give no work (a
    convolution's layout transform, a sort) the first measured launch of its configuration, unscaled (the
    configuration fixes its grid, which such a kernel's work follows); then, in a binned family, the measured launch
    nearest in grid; each nearest in log scale, the larger on a tie. Returns each launch's `counter_scale`: its work
    or grid over its lender's for those, 1 for every other launch."""
    scale = pd.Series(1.0, index=timeline.index)
    pairs = list(zip(timeline["launch_op"].fillna(""), timeline["launch_shapes"].fillna(""), strict=True))
    works = {pair: problem_work(*pair) for pair in set(pairs)}
    work = np.log(np.array([works[pair] for pair in pairs], dtype=float).clip(min=1e-300))
    known = np.isfinite(work) & (work > -600)
    config = (_joined(timeline, CONFIG_KEY) + " " + plan.signatures).to_numpy()
    _lend_nearest(config, work, own.to_numpy() & known, lender.isna().to_numpy() & known, lender, scale)
    _lend_nearest(config, np.zeros(len(config)), own.to_numpy(), lender.isna().to_numpy() & ~known, lender, scale)
    binned = timeline["kernel_name"].isin(plan.binned).to_numpy()
    blocks = np.log(plan.blocks.to_numpy(dtype=float))
    _lend_nearest(plan.family.to_numpy(), blocks, own.to_numpy() & binned, lender.isna().to_numpy() & binned,
                  lender, scale)
    return scale


def _lend_nearest(groups: np.ndarray, size: np.ndarray, donors: np.ndarray, takers: np.ndarray, lender: pd.Series,
                  scale: pd.Series) -> None:
    """Each taker's lender (in place): the donor of its group whose log `size` is nearest; its scale exp(size
    difference)."""
    frame = pd.DataFrame({"group": groups, "size": size})
    for name, group in frame[donors].groupby("group"):
        ordered = group.sort_values("size", kind="stable").drop_duplicates("size", keep="first")
        wanting = np.flatnonzero(takers & (groups == name))
        if not len(wanting):
            continue
        sizes = ordered["size"].to_numpy()
        right = np.clip(np.searchsorted(sizes, size[wanting]), 0, len(sizes) - 1)
        left = np.clip(right - 1, 0, len(sizes) - 1)
        nearest = np.where(np.abs(sizes[left] - size[wanting]) < np.abs(sizes[right] - size[wanting]), left, right)
        chosen = ordered.index.to_numpy()[nearest]
        lender.iloc[wanting] = chosen
        scale.iloc[wanting] = np.exp(size[wanting] - size[chosen])


def family_errors(joined: pd.DataFrame, plan: SamplingPlan, measured: dict) -> list[dict]:
    """The held-out check of lending by grid, per binned family: each measured launch strictly inside its family's
    measured grids is lent to as if it had not been measured (from the nearest other measured grid, scaled) and
    compared with what it measured, for the work counters of `HELD_OUT_COLUMNS` (median |lent / measured - 1|, %).
    Also the family's configurations, launches, share of kernel time and how many of its launches were lent."""
    binned = joined["kernel_name"].isin(plan.binned).to_numpy()
    if not binned.any():
        return []
    total = max(joined["duration_ns"].sum(), 1)
    size = pd.Series(np.log(plan.blocks.to_numpy(dtype=float)), index=joined.index)
    rows = []
    for name, members in joined[binned].groupby(plan.family[binned], sort=False):
        mine = [position for position in members.index if position in measured]
        grids = size[mine]
        held = [p for p in mine if grids.min() < size[p] < grids.max()]
        errors: dict[str, list[float]] = {label: [] for label in HELD_OUT_COLUMNS}
        for position in held:
            others = grids[(grids != size[position])]
            lender = (others - size[position]).abs().idxmin()
            ratio = float(np.exp(size[position] - size[lender]))
            for label, columns in HELD_OUT_COLUMNS.items():
                truth = sum(float(measured[position][c]) for c in columns)
                lent = ratio * sum(float(measured[lender][c]) for c in columns)
                if truth > 0 and np.isfinite(truth) and np.isfinite(lent):
                    errors[label].append(abs(lent / truth - 1))
        rows.append({"family": name, "kernel_name": members["kernel_name"].iloc[0],
                     "configurations": int(members[CONFIG_KEY].drop_duplicates().shape[0]),
                     "launches": len(members), "time_fraction": float(members["duration_ns"].sum() / total),
                     "measured": len(mine), "lent": int((members["counter_status"] == "lent").sum()),
                     "held_out": len(held),
                     **{label: (100 * float(np.median(values)) if values else None)
                        for label, values in errors.items()}})
    return sorted(rows, key=lambda row: -row["time_fraction"])


def stall_targets(timeline: pd.DataFrame, always: Callable[[str], bool]) -> dict[str, list[int]]:
    """The functions the warp-stall pass measures, each at its first invocation: those that together take
    STALL_TIME_SHARE of the kernel time (longest first, at most STALL_FUNCTIONS) and every function `always`
    names (the SSM kernels). One invocation number for all keeps the pass exact: ncu's --kernel-id applies
    one set of numbers to every named function."""
    launches = timeline[~is_nccl(timeline["kernel_name"])]
    by_function = launches.groupby("kernel_name")["duration_ns"].sum().sort_values(ascending=False, kind="stable")
    before = by_function.cumsum().shift(fill_value=0) / max(by_function.sum(), 1)
    chosen = set(by_function.index[before < STALL_TIME_SHARE][:STALL_FUNCTIONS])
    chosen |= {name for name in by_function.index if always(name)}
    return {name: [1] for name in sorted(chosen)}


def attach_stalls(kernels: pd.DataFrame, rows: pd.DataFrame, expected: pd.Index,
                  plan: SamplingPlan) -> tuple[pd.DataFrame, dict]:
    """`kernels` (positionally the timeline of `plan`) with the warp-stall columns from the stall pass's report
    `rows` (profiling order) placed on the `expected` launches as `attach_counters` places counters, and lent
    to the launches of the same configuration and problem (`stall_lender`); notes for run.json."""
    kernels = kernels.reset_index(drop=True)
    signatures = pd.Series(plan.signatures.to_numpy(), index=kernels.index)
    placed, unplaced = _align(rows, kernels.loc[expected], signatures.loc[expected])
    columns = [c for c in STALL_COLUMNS if c != "stall_lender"]
    measured = {position: row.reindex(columns) for position, row in placed}
    own, lender = _lenders(kernels, plan, measured)
    values = pd.DataFrame.from_dict(measured, orient="index", columns=columns) if measured else None
    out = kernels.copy()
    for column in columns:
        out[column] = lender.map(values[column]) if values is not None else float("nan")
    out["stall_lender"] = kernels["launch_idx"].reindex(lender).to_numpy(dtype=float)
    total = kernels["duration_ns"].sum()
    notes = {"functions": sorted(set(kernels.loc[expected, "kernel_name"])), "launches_profiled": int(own.sum()),
             "time_fraction": float(kernels.loc[lender.notna().to_numpy(), "duration_ns"].sum() / total)
             if total else 0.0,
             "profiled_not_placed": sorted({f"{label}: {not_placed_cause(row, kernels, signatures)}"
                                            for label, row in unplaced})}
    return out, notes


def _align(rows: pd.DataFrame, expected: pd.DataFrame, signatures: pd.Series) -> tuple[list, list]:
    """Pair report rows (profiling order) with expected launches (launch order): each row with the next
    expected launch of its configuration and signature. Returns ([(timeline position, row)], [(label, row)] of
    the rows placed nowhere)."""
    wanted = [(tuple(values), signature) for values, signature in
              zip(expected[CONFIG_KEY].itertuples(index=False), signatures, strict=True)]
    positions = list(expected.index)
    placed, unplaced, start = [], [], 0
    for _, row in rows.iterrows():
        identity = (tuple(row[CONFIG_KEY]), kernel_signature(row["kernel_name_full"], row["kernel_name"]))
        hit = next((k for k in range(start, len(wanted)) if wanted[k] == identity), None)
        if hit is None:
            unplaced.append((_config_label(row), row))
            continue
        placed.append((positions[hit], row))
        start = hit + 1
    return placed, unplaced


def _signatures(kernels: pd.DataFrame) -> pd.Series:
    pairs = list(zip(kernels["kernel_name_full"], kernels["kernel_name"], strict=True))
    lookup = {pair: kernel_signature(*pair) for pair in set(pairs)}
    return pd.Series([lookup[pair] for pair in pairs], index=kernels.index)


def _config_label(row) -> str:
    return f"{row['kernel_name']} {config_label(row)} smem {row['shared_mem_bytes']}"
