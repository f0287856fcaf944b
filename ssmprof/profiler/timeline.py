"""Timeline collector: torch.profiler (Kineto/CUPTI) over the profiled iteration, one row per kernel launch.

Cheap (one traced iteration) and complete: every launch with its duration, stream, grid and block, the
framework op that launched it, and its phase. The phase comes from the harness's `ssmprof/<phase>`
record_function ranges, matched by *time* rather than by thread: autograd launches backward kernels
from its own thread while the main thread sits inside the `backward` range, so a kernel belongs to the
phase range that contains the host-side launch call (cudaLaunchKernel / cuLaunchKernel), whatever thread
made it. Kernels launched outside every range are `other`. The layer (`layer`, `layer_kind`) comes the same
way from the `ssmprof/layer/<i>/<kind>` ranges a parallel model opens around each mixer, forward and backward.

Collectives: an NCCL kernel's row says which collective it performs and its size (`collective`,
`message_bytes`, `group_size`), from the arguments torch.profiler records for it (or else its launching
c10d op's input shapes and dtype). On the CPU (gloo) there are no kernels: `cpu_table` makes rows of the
innermost aten ops (the compute) and of each c10d collective, timed by the gloo work that carried it out.

Two captures, because what names a launch costs what times it: recording every host op with its input shapes
(`TimelineCapture`, the *detail* pass) slows the host by microseconds a launch, and a step of thousands of
launches then leaves the GPU waiting (traced iterations 33-71 % slower than the timed steps on fresh H100s,
docs/history.md). So the detail pass only names the launches; their times come from `TimingCapture`: CUDA
activity alone, over a few pipelined iterations after one that absorbs the profiler's start, joined to the
detail pass by launch order (`timed_table`). The iteration whose kernel span is the median of those is kept.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import math
import os
import re
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ssmprof import schema
from ssmprof.profiler.markers import NVTX_DOMAIN, PHASES
from ssmprof.schema import KERNEL_COLUMNS, PARALLEL_COLUMNS

_PHASE_LABELS = {f"{NVTX_DOMAIN}/{phase}": phase for phase in PHASES}
LAYER_PREFIX = f"{NVTX_DOMAIN}/layer/"  # `workloads.parallel.LAYER_RANGE`: "ssmprof/layer/<index>/<kind>"
TABLE_COLUMNS = [*KERNEL_COLUMNS, *PARALLEL_COLUMNS]
_LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


# Iterations the timing pass keeps, after one more that absorbs the profiler's start and fills the GPU's queue as the
# timed steps fill it: odd, so that one of them has the median kernel span; five, because a host-bound step's spans
# spread as its timed steps do (graph-mamba paper on an H100: 52-59 ms timed, three spans 64-82 ms).
TIMING_ITERATIONS = 5
# torch.profiler's warning when a profile is started again, printed among the progress lines: each capture here is
# one profiled window, and its events are exported before the next starts, so nothing it warns of is lost.
_CYCLE_WARNING = r"Warning: Profiler clears events at the end of each cycle"
# Kineto's level above all it logs: on the CPU it writes "USDT: ... profiler_start" / "profiler_stop" lines to stderr
# at every capture (USDT, level 5, its highest; KINETO_LOG_LEVEL is read when the profiler first starts).
_KINETO_QUIET = "6"


@contextlib.contextmanager
def _quiet_profiler(cuda: bool):
    """Around starting and stopping torch.profiler: without its cycle warning and, on the CPU, without kineto's
    USDT lines (a level the user set is kept; on the GPU kineto's errors, CUPTI's among them, stay visible)."""
    if not cuda:
        os.environ.setdefault("KINETO_LOG_LEVEL", _KINETO_QUIET)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_CYCLE_WARNING, category=UserWarning)
        yield


def median_index(spans: list[float]) -> int:
    """The index of the median of an odd number of spans (the upper median of an even one; 0 of none)."""
    return int(np.argsort(spans)[len(spans) // 2]) if spans else 0


class TimelineCapture:
    """Context manager around the profiled iteration (the *detail* pass: host ops with their input shapes, CUDA
    activity where `cuda`); `trace` holds its Chrome-trace dict afterwards. On the GPU, `record_timing` then times
    the same step again with CUDA activity alone (`timing_trace`), and `table()` joins the two (`timed_table`)."""

    def __init__(self, cuda: bool, timing_iterations: int = TIMING_ITERATIONS):
        activities = [torch.profiler.ProfilerActivity.CPU]
        if cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.cuda, self._activities = cuda, activities
        self.timing_iterations = timing_iterations
        self.trace: dict = {}
        self.timing_trace: dict = {}
        self.wall_s = 0.0

    def __enter__(self):
        self._started = time.perf_counter()
        # Input shapes name the problem a library kernel solves: cuBLAS's persistent GEMMs launch one grid for
        # every shape, so (name, grid, block) alone cannot say which GEMM a launch is.
        self._profile = torch.profiler.profile(activities=self._activities, record_shapes=True)
        with _quiet_profiler(self.cuda):
            self._profile.__enter__()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
        with _quiet_profiler(self.cuda):
            self._profile.__exit__(*exc)
        if exc[0] is None:
            self.trace = _exported(self._profile)
        self.wall_s += time.perf_counter() - self._started
        return False

    def record_timing(self, step: Callable[[], object]) -> None:
        """Run `step` 1 + `timing_iterations` times back to back inside `timing_window`, as the timed steps run:
        the host queues each step while the GPU runs the one before."""
        with self.timing_window():
            for _ in range(1 + self.timing_iterations):
                step()

    @contextlib.contextmanager
    def timing_window(self):
        """CUDA activity alone over what runs inside (1 + `timing_iterations` steps): the host records nothing of
        its own, so it launches at the pace of the timed steps; `timing_trace` holds the trace afterwards."""
        started = time.perf_counter()
        torch.cuda.synchronize()
        # No external correlation either: the join is by launch order, and tagging every op with its correlation
        # id slowed host-bound steps (graph-mamba paper on an H100: spans 64-82 ms against 45-50 ms without it).
        quiet = torch._C._profiler._ExperimentalConfig(disable_external_correlation=True)
        profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA], experimental_config=quiet)
        with _quiet_profiler(cuda=True):
            profile.__enter__()
        try:
            yield
            torch.cuda.synchronize()
        finally:
            with _quiet_profiler(cuda=True):
                profile.__exit__(None, None, None)
        self.timing_trace = _exported(profile)
        self.wall_s += time.perf_counter() - started

    def table(self, choose: Callable[[list[float]], int] = median_index) -> tuple[pd.DataFrame, dict]:
        """The kernel table of the profiled iteration and run.json's `collectors.timeline.timing` (`timed_table`);
        the detail pass alone where no timing pass ran."""
        detail = kernel_table(self.trace)
        if not self.timing_trace:
            return detail, {}
        return timed_table(detail, self.timing_trace, self.timing_iterations, choose)


def _join_refusal(kernels: list[dict], runs: list[list[dict]], names: list[str], iterations: int) -> str:
    """Why the timing pass's iterations cannot stand for the detail pass ("" where they can): another number of
    launches, or another kernel at some launch."""
    if not names or len(kernels) != (1 + iterations) * len(names):
        return (f"not joined: the timing pass ran {len(kernels)} kernels in {1 + iterations} steps, the detail pass "
                f"{len(names)} in one")
    for number, run in enumerate(runs, start=1):
        moved = next((i for i, (kernel, name) in enumerate(zip(run, names, strict=True)) if kernel["name"] != name),
                     None)
        if moved is not None:
            return (f"not joined: timing step {number} launched {run[moved]['name'][:60]} as launch {moved}, the "
                    f"detail pass {names[moved][:60]}")
    return ""


def _exported(profile: torch.profiler.profile) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        profile.export_chrome_trace(str(path))
        return schema.read_trace(path)


def span_ms(starts: np.ndarray, ends: np.ndarray) -> float:
    """First start to last end, in ms, of times in ns."""
    return float(ends.max() - starts.min()) / 1e6 if len(starts) else 0.0


def timed_table(detail: pd.DataFrame, timing_trace: dict, iterations: int,
                choose: Callable[[list[float]], int] = median_index) -> tuple[pd.DataFrame, dict]:
    """The detail pass's rows with the times of one timing-pass iteration. The timing trace's kernels in launch
    order (CUDA correlation ids grow with every launch, whatever thread made it) are cut into 1 + `iterations`
    runs of `len(detail)` launches; the first is dropped (it absorbed the profiler's start), and of the others
    the one `choose` picks from their kernel spans is kept (the median; the ranks of a parallel run agree on
    one, `distributed.agreed_iteration`). Joined only where every launch of every kept run has the
    detail row's kernel: a step that launches other kernels is not the same iteration, and the detail times stay,
    with the reason in `joined`. Returns (table, summary: iterations, each one's span, the kept one, the detail
    pass's own span, and `joined`)."""
    events = timing_trace.get("traceEvents", [])
    kernels = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"),
                     key=lambda e: (e.get("args", {}).get("correlation", 0), e["ts"]))
    launches = len(detail)
    summary: dict = {"iterations": iterations, "spans_ms": [], "kept": None, "joined": "",
                     "detail_span_ms": span_ms(detail["start_ns"].to_numpy(),
                                               (detail["start_ns"] + detail["duration_ns"]).to_numpy())}
    runs = [kernels[i * launches:(i + 1) * launches] for i in range(1, 1 + iterations)]
    summary["joined"] = _join_refusal(kernels, runs, detail["kernel_name_full"].tolist(), iterations) or "joined"
    joined = summary["joined"] == "joined"
    starts = [np.array([k["ts"] * 1e3 for k in run]) for run in runs] if joined else []
    ends = [np.array([(k["ts"] + k.get("dur", 0)) * 1e3 for k in run]) for run in runs] if joined else []
    spans = [span_ms(s, e) for s, e in zip(starts, ends, strict=True)]
    kept = choose(spans)  # called on every rank, joined or not: the ranks of a job agree through it
    if not joined:
        return detail, summary
    summary.update(spans_ms=spans, kept=kept)
    first = starts[kept].min()
    timed = detail.assign(start_ns=np.round(starts[kept] - first).astype("int64"),
                          duration_ns=np.round(ends[kept] - starts[kept]).astype("int64"))
    return timed, summary


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


def phase_at(ranges: list[tuple[float, float, str]], ts: float, outside: str = "other") -> str:
    i = bisect.bisect_right([start for start, _, _ in ranges], ts) - 1
    if i >= 0 and ranges[i][0] <= ts <= ranges[i][1]:
        return ranges[i][2]
    return outside


def layer_ranges(events: list[dict]) -> list[tuple[float, float, str]]:
    """(start, end, "<index>/<kind>") of every layer range on the host (they never nest), sorted by start.
    Host ranges only, as for the phases: a GPU trace also has each range's `gpu_user_annotation` copy, at the
    time its kernels ran, milliseconds behind the host; matched against launch times, those copies put a
    launch in a later layer (on 2 H200s the per-layer collective counts went 0 to 4 for a true 1: docs/history.md)."""
    return sorted((e["ts"], e["ts"] + e.get("dur", 0), e["name"][len(LAYER_PREFIX):]) for e in events
                  if e.get("cat") == "user_annotation" and e.get("name", "").startswith(LAYER_PREFIX))


def layer_at(ranges: list[tuple[float, float, str]], ts: float) -> tuple[int, str]:
    label = phase_at(ranges, ts, "")
    if not label:
        return -1, ""
    index, _, kind = label.partition("/")
    return int(index), kind


_COLLECTIVE_WORDS = (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
                     ("broadcast", "broadcast"), ("alltoall", "all_to_all"), ("barrier", "barrier"))
DTYPE_BYTES = {"float": 4, "float32": 4, "double": 8, "float64": 8, "bfloat16": 2, "half": 2, "float16": 2,
               "bf16": 2, "fp16": 2, "fp32": 4, "int": 4, "long int": 8, "int64": 8, "int32": 4}


def collective_of(name: str) -> str:
    """The collective a kernel or c10d op name performs ("" if none): ncclDevKernel_AllReduce_Sum_bf16_RING_LL,
    c10d::allreduce_, c10d::_reduce_scatter_base_, gloo:all_gather, ..."""
    folded = name.lower().replace("_", "")
    return next((collective for word, collective in _COLLECTIVE_WORDS if word in folded), "")


def _dtype_bytes(dtype: str) -> int:
    return DTYPE_BYTES.get(dtype.lower().removeprefix("c10::"), -1)


def collective_size(kernel_args: dict, op_args: dict) -> tuple[int, int]:
    """(message bytes as NCCL-tests counts them, group size) of a collective: from the kernel's own recorded
    arguments where torch.profiler gives them, else from its c10d op's input shapes and dtype."""
    recorded = next((args for args in (kernel_args, op_args) if "In msg nelems" in args), None)
    if recorded is not None:  # record_param_comms' arguments, on the NCCL kernel or its launching op
        elements = max(int(recorded.get("In msg nelems", 0)), int(recorded.get("Out msg nelems", 0)))
        size = _dtype_bytes(str(recorded.get("dtype", "")))
        return (elements * size if size > 0 else -1), int(recorded.get("Group size", -1))
    dims, types = op_args.get("Input Dims", []), op_args.get("Input type", [])
    counts = []  # elements of each tensor argument; a tensor list counts as the sum of its tensors
    for shape, dtype in zip(dims, types, strict=False):
        if shape and isinstance(shape[0], list):
            counts.append((sum(math.prod(s) for s in shape), dtype))
        elif shape:
            counts.append((math.prod(shape), dtype))
    if not counts:
        return -1, -1
    elements, dtype = max(counts)
    size = _dtype_bytes(dtype if dtype != "TensorList" else "float")
    # all-gather / reduce-scatter: the larger tensor is the smaller times the group
    group = max(c for c, _ in counts) // min(c for c, _ in counts) if len(counts) > 1 and min(counts)[0] else -1
    return (elements * size if size > 0 else -1), group


def kernel_table(trace: dict) -> pd.DataFrame:
    """One row per kernel in the trace, in launch order, with the contract's identity/context/time columns."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    ranges = phase_ranges(events)
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in _LAUNCH_CATEGORIES and "correlation" in e.get("args", {})}
    ops = {e["args"]["External id"]: (e["name"], _shapes(e["args"]), e["args"]) for e in events
           if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    layers = layer_ranges(events)
    kernels = sorted((e for e in events if e.get("cat") == "kernel"),
                     key=lambda e: ((launches.get(e["args"].get("correlation")) or e)["ts"], e["ts"]))
    rows = []
    first_start = min((k["ts"] for k in kernels), default=0.0)
    for index, kernel in enumerate(kernels):
        args = kernel["args"]
        launch = launches.get(args.get("correlation"))
        op, shapes, op_args = ops.get(launch["args"].get("External id"), ("", "", {})) if launch else ("", "", {})
        grid, block = args.get("grid", [0, 0, 0]), args.get("block", [0, 0, 0])
        launched = launch["ts"] if launch else kernel["ts"]
        collective = collective_of(kernel["name"]) if kernel["name"].lower().startswith("nccl") else ""
        message, group = collective_size(args, op_args) if collective else (-1, -1)
        rows.append({
            "launch_idx": index,
            "kernel_name": short_kernel_name(kernel["name"]),
            "kernel_name_full": kernel["name"],
            # A kernel whose launch call was not recorded is placed by its own start (later than its launch).
            "phase": phase_at(ranges, launched),
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
            "rank": 0,
            **dict(zip(("layer", "layer_kind"), layer_at(layers, launched), strict=True)),
            "collective": collective, "message_bytes": message, "group_size": group,
        })
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


# aten ops that move no data and compute nothing (views, metadata, allocation): not rows of a CPU table.
_NO_WORK = re.compile(r"^aten::(view|_unsafe_view|as_strided|empty|empty_strided|detach|t|transpose|reshape|"
                      r"slice|select|unsqueeze|squeeze|expand|permute|split|split_with_sizes|chunk|narrow|alias|"
                      r"unflatten|flatten|lift_fresh|resolve_conj|resolve_neg|_reshape_alias|unbind|numpy_T|"
                      r"view_as|result_type)$|^detach$")


def cpu_table(trace: dict) -> pd.DataFrame:
    """The CPU run's stand-in for a kernel table: one row per innermost aten op that does work (its thread as
    `stream`), and one per c10d collective, timed by the gloo work that carried it out (gloo runs each
    collective on its own thread after the c10d op returns; the i-th c10d op of the trace is the i-th gloo
    work), in start order, with the same context columns as `kernel_table`."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    ranges, layers = phase_ranges(events), layer_ranges(events)
    ops = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: (e["tid"], e["ts"], -e.get("dur", 0)))
    works = sorted((e for e in events if e.get("name", "").startswith("gloo:")), key=lambda e: e["ts"])
    calls = sorted((e for e in ops if e["name"].startswith("c10d::") and collective_of(e["name"])),
                   key=lambda e: e["ts"])
    rows = []
    for i, call in enumerate(calls):
        work = works[i] if len(works) == len(calls) else call
        message, group = collective_size({}, call.get("args", {}))
        rows.append(_cpu_row(work["name"], work, call, ranges, layers, collective_of(call["name"]), message, group))
    for i, op in enumerate(ops):
        following = ops[i + 1] if i + 1 < len(ops) else None
        nested = following is not None and following["tid"] == op["tid"] and following["ts"] < op["ts"] + op["dur"]
        if nested or _NO_WORK.match(op["name"]) or op["name"].startswith(("c10d::", "record_param_comms")):
            continue
        rows.append(_cpu_row(op["name"], op, op, ranges, layers, "", -1, -1))
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    if table.empty:
        return table
    first = table["start_ns"].min()
    table = table.sort_values(["start_ns", "stream"], kind="stable").reset_index(drop=True)
    return table.assign(start_ns=table["start_ns"] - first, launch_idx=range(len(table)))


def _cpu_row(name: str, timed: dict, called: dict, ranges, layers, collective: str, message: int, group: int) -> dict:
    layer, kind = layer_at(layers, called["ts"])
    return {
        "launch_idx": 0, "kernel_name": short_kernel_name(name), "kernel_name_full": name,
        "phase": phase_at(ranges, called["ts"]), "launch_op": called["name"],
        "launch_shapes": _shapes(called.get("args", {})), "stream": timed.get("tid", -1),
        "grid_x": 0, "grid_y": 0, "grid_z": 0, "block_x": 0, "block_y": 0, "block_z": 0, "shared_mem_bytes": -1,
        "start_ns": round(timed["ts"] * 1e3), "duration_ns": round(timed.get("dur", 0) * 1e3),
        "counter_status": "not collected", "counter_lender": -1, "rank": 0, "layer": layer, "layer_kind": kind,
        "collective": collective, "message_bytes": message, "group_size": group,
    }


def _shapes(op_args: dict) -> str:
    """The op's recorded input shapes as compact JSON ("" when shapes were not recorded)."""
    dims = op_args.get("Input Dims")
    return json.dumps(dims, separators=(",", ":")) if dims is not None else ""
