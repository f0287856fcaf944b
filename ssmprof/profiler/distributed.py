"""Multi-GPU runs (`--tp N --dp M`) as torchrun jobs: every rank is a torchrun worker running this module.

    python -m torch.distributed.run ... -m ssmprof.profiler.distributed JOB_JSON

A rank reads its job (`schema.RankJob`), takes RANK, LOCAL_RANK and WORLD_SIZE from the environment torchrun
gives it, joins the process group through `env://` (NCCL on GPUs, gloo on the CPU), builds its part of the
model (`workloads.parallel`) and runs the harness: `train` (timed steps), `timeline` (and the profiled
iteration under torch.profiler, its table written as `<job>.rank-<r>.parquet`), `host` (and the steps the host
sampler reads: `harness.sampled_steps`), `counters` (one step: the iteration Nsight Compute profiles) or
`numerics`. A rank named in the job's `ncu_ranks` starts itself again under Nsight Compute (the pass `ncu_pass`)
and waits: the other ranks run plain. Every file a rank writes goes to the job's folder (`scratch`), which must be
shared by every node; the ranks wait for each other before they exit, so that once any node's agent returns, every
rank's files are there. A failed job is one line naming the first rank to fail (`launch`).

One torchrun agent runs per node (`Launch`): on one host a single agent with a free local port; on several
(or under `srun`), one per node, all naming node 0's rendezvous endpoint. The same `ssmprof profile` command
runs on every node; node 0 merges the ranks' tables into the run directory.

`profile_parallel` is one profiled run over all ranks: every rank's timeline, then the sampled steps in a job of
their own (a rank that dies while sampled costs the host section alone, `sampled_hosts`), then Nsight Compute on each
chosen rank in turn (`ncu_ranks`) while the others run without it: Nsight Compute hangs replaying NCCL
kernels, so it profiles every kernel but those (`ncu_argv.NOT_NCCL`), and NCCL kernels keep timeline-only rows. The
ranks' tables are merged into one run directory with a `rank` column; run.json `parallel` records the world
size, TP / DP degrees, sequence parallelism, nodes, every rank's harness numbers, the topology
(`nvidia-smi topo -m`) and the NCCL version.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch

from ssmprof import schema
from ssmprof.errors import InvalidConfig, NoGpu, SsmprofError
from ssmprof.hardware import link_for, spec_for
from ssmprof.profiler.harness import STAGES, RunResult
from ssmprof.schema import RankJob, RankResult, RankRun

if TYPE_CHECKING:  # collect is imported where it is used: a rank process never needs it
    from ssmprof.profiler.profile_run import ProfileSettings

MODES = ("train", "timeline", "host", "counters", "numerics")
# The modes whose ranks also time their step as one CUDA graph where the job asks (`RankJob.cuda_graphs`): a counter
# pass replays one eager step under Nsight Compute, and a numerics check compares one forward and backward.
GRAPHED_MODES = ("train", "timeline")
# Set in the process a rank starts under Nsight Compute: that one runs the rank itself instead of wrapping again.
UNDER_NCU_ENV = "SSMPROF_UNDER_NCU"


class RankFailed(SsmprofError):
    pass


# How long a node whose agent finished waits for other nodes' rank results to appear in the shared folder, and
# node 0 for the other nodes to be done with that folder before it removes it.
OTHER_NODES_WAIT_S = 60
# NVLink multicast (NVLS) off in NCCL, PyTorch's symmetric memory and NVSHMEM, whatever the caller's environment
# says: on the shared multi-GPU hosts a program using it can put every GPU of the host out of service.
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@dataclasses.dataclass(frozen=True)
class Launch:
    """How this process's torchrun agent joins the job: `nnodes` agents in all, this one node `node_rank`, all
    meeting at `endpoint` (node 0's host:port; None on one host: a free port of 127.0.0.1), `job_id` naming the
    rendezvous and the shared folder of the ranks' files (the same on every node, e.g. Slurm's job id)."""

    nnodes: int = 1
    node_rank: int = 0
    endpoint: str | None = None
    job_id: str = "ssmprof"

    @property
    def leader(self) -> bool:
        return self.node_rank == 0

    def check(self, world_size: int) -> None:
        if self.nnodes < 1 or not 0 <= self.node_rank < self.nnodes:
            raise InvalidConfig(f"--node-rank must be from 0 to {self.nnodes - 1}, got {self.node_rank}")
        if world_size % self.nnodes:
            raise InvalidConfig(f"{world_size} ranks (--tp x --dp) do not split evenly over {self.nnodes} nodes")
        if self.nnodes > 1 and not self.endpoint:
            raise InvalidConfig("several nodes meet at one rendezvous: give --rdzv-endpoint HOST:PORT (node 0's)")
        # torchrun waits minutes for a rendezvous it cannot reach, then fails with its own exception's name
        host, _, port = (self.endpoint or "").rpartition(":")
        if self.nnodes > 1 and not (host and port.isdigit()):
            raise InvalidConfig(f"--rdzv-endpoint must be HOST:PORT (node 0's), got '{self.endpoint}'")


def job_file(job: RankJob, name: str) -> Path:
    return Path(job.scratch) / f"{name}.json"


def result_file(scratch: Path, name: str, rank: int) -> Path:
    return Path(scratch) / f"{name}.rank-{rank}.json"


def table_file(scratch: Path, name: str, rank: int) -> Path:
    return Path(scratch) / f"{name}.rank-{rank}.parquet"


def rank_main(argv: list[str]) -> int:
    """One rank of the job in `argv[0]`, as torchrun starts it; its result (or the line it failed with) is
    written to `<job>.rank-<r>.json` beside the job."""
    path = Path(argv[0])
    job = schema.read_document(RankJob, path)
    rank = int(os.environ["RANK"])
    if rank in job.ncu_ranks and UNDER_NCU_ENV not in os.environ:
        return _under_ncu(job, path, rank)
    try:
        written = _run_rank(job, path.stem, rank)
    except SsmprofError as exc:
        written = schema.make_document(RankResult, rank=rank, node=platform.node(), error=str(exc),
                                       failed_at=time.time())
    schema.write_document(written, result_file(Path(job.scratch), path.stem, rank))
    return 0 if written.error is None else 1


def _run_rank(job: RankJob, name: str, rank: int) -> RankResult:
    import torch.distributed as dist

    from ssmprof.kernels import plan_kernels
    from ssmprof.profiler import autotune
    from ssmprof.profiler.harness import run_training
    from ssmprof.profiler.markers import NvtxMarker
    from ssmprof.profiler.timeline import TimelineCapture, cpu_table
    from ssmprof.workloads.parallel import Parallelism, make_groups, numerics
    from ssmprof.workloads.registry import get_workload

    cuda = job.device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    # The ranks beside the one Nsight Compute replays wait in their collectives for as long as it takes: far past
    # the default 10-minute watchdog on a paper preset.
    dist.init_process_group("nccl" if cuda else "gloo", init_method="env://", timeout=dt.timedelta(hours=2))
    out = Path(job.scratch)
    who = {"rank": rank, "node": platform.node(), "node_rank": int(os.environ.get("GROUP_RANK", 0))}
    try:
        workload = get_workload(job.workload)
        cfg = workload.config(job.preset, job.overrides)
        plan = plan_kernels(workload.kernel_ops(cfg), job.device, job.allow_fallback, cfg.dtype)
        if job.autotune:
            autotune.pin(schema.read_document(schema.AutotunePins, Path(job.autotune)).choices)
        groups = make_groups(Parallelism(job.tp, job.dp, job.sequence_parallel))
        if job.mode == "numerics":
            checked = numerics(workload, cfg, plan, groups, torch.device(job.device))
            dist.barrier()
            return schema.make_document(RankResult, **who, numerics=checked)
        capture = TimelineCapture(cuda) if job.mode == "timeline" else None
        steps = 1 if job.mode == "counters" else job.steps
        result = run_training(workload, job.preset, cfg, plan, steps, job.warmup, NvtxMarker(),
                              progress=lambda stage, done, total: _mark_stage(out, rank, stage, done),
                              capture=capture, groups=groups,
                              timing=capture.record_timing if capture is not None and cuda else None,
                              find_syncs=job.mode in ("timeline", "host"), sample_host=job.mode == "host",
                              cuda_graphs=job.cuda_graphs and job.mode in GRAPHED_MODES)
        timing = None
        if capture is not None:
            table, timing = capture.table(agreed_iteration) if cuda else (cpu_table(capture.trace), None)
            schema.write_frame(table.assign(rank=rank), table_file(out, name, rank))
            if job.keep_trace:  # per-rank Kineto traces, as HolisticTraceAnalysis reads them
                schema.write_trace(capture.trace, out / f"trace-rank{rank}.json.gz")
        dist.barrier()  # every rank's files are written before any rank (and so any node's agent) ends
        return schema.make_document(RankResult, **who, tp_rank=groups.tp_rank, dp_rank=groups.dp_rank,
                                    result=dataclasses.asdict(result), timing=timing or None,
                                    triton_autotune=autotune.snapshot() if cuda else {})
    finally:
        dist.destroy_process_group()


def agreed_iteration(spans: list[float]) -> int:
    """The timing iteration every rank keeps (`timeline.timed_table`'s `choose`): the one whose slowest rank's
    span is the median, so that the ranks' tables describe one and the same step of the job."""
    import torch.distributed as dist

    from ssmprof.profiler.timeline import median_index

    every: list[list[float] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(every, spans)
    joined = [rank for rank in every if rank]
    slowest = [max(rank[i] for rank in joined) for i in range(len(joined[0]))] if joined else []
    return median_index(slowest)


def _under_ncu(job: RankJob, path: Path, rank: int) -> int:
    """Run this rank again under Nsight Compute (the job's `ncu_pass`), with torchrun's environment, and wait:
    the rank inside writes the result; a failure of Nsight Compute itself is written here."""
    from ssmprof.profiler.counters import CounterCollectionError, NcuPass

    chosen = job.ncu_pass or {}
    command = [sys.executable, "-m", "ssmprof.profiler.distributed", str(path)]
    try:
        NcuPass(command, Path(chosen["report"]), chosen["mode"], chosen["metrics"], chosen.get("targets"),
                chosen.get("names"), env={UNDER_NCU_ENV: "1"}).finish(chosen["timeout_s"])
    except CounterCollectionError as exc:
        failed = schema.make_document(RankResult, rank=rank, node=platform.node(), error=str(exc))
        schema.write_document(failed, result_file(Path(job.scratch), path.stem, rank))
        return 1
    return 0


def check_devices(device: str, ranks: int) -> None:
    """Refuse, before anything starts, more ranks on this host than the GPUs it has, and GPU ranks where this torch
    has no NCCL (every rank would fail at its first collective)."""
    if device == "cuda" and torch.cuda.device_count() < ranks:
        raise NoGpu(f"{ranks} ranks (--tp x --dp) need {ranks} GPUs; {torch.cuda.device_count()} visible")
    if device == "cuda" and not torch.distributed.is_nccl_available():
        raise NoGpu("this torch has no NCCL: ranks on GPUs need it (gloo ranks run with --device cpu)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_command(job_path: Path, launch: Launch, nproc: int, endpoint: str) -> list[str]:
    """One node's torchrun agent for the job in `job_path`: `nproc` workers, the c10d rendezvous at `endpoint`
    (hosted by node 0's agent), no restarts (a failed rank is a failed run)."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(launch.nnodes),
            "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
            "--rdzv-id", f"{launch.job_id}-{job_path.stem}", "--rdzv-conf", f"is_host={int(launch.leader)}",
            "--max-restarts", "0", "-m", "ssmprof.profiler.distributed", str(job_path)]


def launch(job: RankJob, name: str, timeout_s: float, where: Launch = Launch()) -> list[RankResult]:
    """Run this node's part of `job` (named `name`: its files' prefix) as a torchrun job to its end; returns every
    rank's result, in rank order (all nodes', from the shared folder). A failed rank stops the job and is one
    `RankFailed` line (the rank's own message where it wrote one)."""
    where.check(job.world_size)
    job_path = schema.write_document(job, job_file(job, name))
    endpoint = where.endpoint or f"127.0.0.1:{_free_port()}"
    command = torchrun_command(job_path, where, job.world_size // where.nnodes, endpoint)
    tail: deque[str] = deque(maxlen=40)
    agent = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                             env={**os.environ, **NO_MULTICAST_ENV})
    output = agent.stdout
    assert output is not None  # opened with stdout=PIPE
    reader = threading.Thread(target=lambda: tail.extend(line.rstrip() for line in output), daemon=True)
    reader.start()
    try:
        code = agent.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RankFailed(f"the ranks did not finish in {timeout_s:.0f} s{_behind(Path(job.scratch), job.world_size)}") \
            from None
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    reader.join(timeout=10)
    results = _results(job, name, wait_s=OTHER_NODES_WAIT_S if code == 0 and where.nnodes > 1 else 0)
    # the first rank to fail is the cause: the others' errors are often its echo (a collective that lost its peer)
    missing = [rank for rank, r in results.items() if r is None]
    first, ended = _root_cause(tail)
    if first in missing:
        raise RankFailed(f"rank {first} {ended} before writing its result")
    failed = [r for r in results.values() if r is not None and r.error]
    if failed:
        first_failed = min(failed, key=lambda r: (r.failed_at or math.inf, r.rank))
        raise RankFailed(f"rank {first_failed.rank} failed: {first_failed.error}")
    if code != 0 or missing:
        raise RankFailed(f"rank {missing[0] if missing else '?'} wrote no result: {_last_line(tail)}")
    return [result for rank in range(job.world_size) if (result := results[rank]) is not None]


def _stage_file(scratch: Path, rank: int) -> Path:
    """Where a rank writes the harness stage it last reached (`harness.Progress`), for `_behind`."""
    return scratch / f"stage-rank{rank}.txt"


def _mark_stage(scratch: Path, rank: int, stage: str, done: int) -> None:
    """Record the stage a rank entered (once, at its first step: a file write in every timed step would be host
    time inside the steps it times)."""
    if done == 1:
        schema.write_stage(_stage_file(scratch, rank), stage)


def _behind(scratch: Path, world_size: int) -> str:
    """The ranks that stopped short of the others' harness stage, in words (": rank 1 stopped at warm-up, the
    others reached timed steps"), "" where every rank reached the same one: a rank that never reaches the marked
    iteration leaves the others waiting in a collective until the timeout."""
    order = ("", *STAGES)
    stages = {rank: schema.read_stage(_stage_file(scratch, rank)) for rank in range(world_size)}
    furthest = max(stages.values(), key=lambda stage: order.index(stage) if stage in order else len(order))
    late = [rank for rank, stage in stages.items() if stage != furthest]
    if not late:
        return ""
    where = stages[late[0]] or "its start"
    return f": rank {late[0]} stopped at {where}, the others reached {furthest}"


def _results(job: RankJob, name: str, wait_s: float) -> dict[int, RankResult | None]:
    """Every rank's result (None where it wrote none), waiting up to `wait_s` for missing ones: a shared
    filesystem can show another host's new file late, and a finished job must not read as a failed rank."""
    _wait_for(lambda: all(result_file(Path(job.scratch), name, rank).is_file() for rank in range(job.world_size)),
              wait_s)
    return {rank: _result(job, name, rank) for rank in range(job.world_size)}


def _result(job: RankJob, name: str, rank: int) -> RankResult | None:
    path = result_file(Path(job.scratch), name, rank)
    return schema.read_document(RankResult, path) if path.is_file() else None


def _root_cause(lines) -> tuple[int | None, str]:
    """The rank torchrun's failure summary names as the first to fail and how it ended ("ended with exit code 7",
    "was killed by SIGKILL"); (None, "") where the output has no summary. Why: a rank that dies (a signal,
    `os._exit`) writes nothing itself, and the ranks that fail after it (torchrun stops them, or their collectives
    lose it) are not the cause."""
    text = "\n".join(lines)
    cause = re.search(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)[^\n]*?\(?(SIG[A-Z]+)?\)?\s*$", text,
                      re.DOTALL | re.MULTILINE)
    if cause is None:
        return None, ""
    rank, code, signal = cause.groups()
    return int(rank), f"was killed by {signal}" if int(code) < 0 and signal else f"ended with exit code {code}"


def _last_line(lines) -> str:
    kept = [line for line in lines if line.strip()]
    errors = [line for line in kept if line.startswith("error:") or "Error" in line]
    return (errors or kept or ["no output"])[-1].removeprefix("error: ")


def harness_of(result: RankResult) -> RankRun:
    """A rank's harness result; a rank that wrote none (a numerics check, or a failure) is one clear error."""
    if result.result is None:
        raise RankFailed(f"rank {result.rank} wrote no harness result{': ' + result.error if result.error else ''}")
    return result.result


def check_same_gpus(results: list[RankResult]) -> None:
    """Refuse a run whose ranks computed on different GPU models: one rank's kernel times would describe
    another GPU than the others', and the late rank would be the slower chip."""
    first = harness_of(results[0]).gpu.get("name")
    other = next((r for r in results if harness_of(r).gpu.get("name") != first), None)
    if other is not None:
        raise RankFailed(f"rank {other.rank} ran on {harness_of(other).gpu.get('name')}, rank {results[0].rank} on "
                         f"{first}: the ranks of one run must use one GPU model")


def merged_result(results: list[RankResult]) -> RunResult:
    """One result for the run: rank 0's, with each step as long as its slowest rank (a TP step waits for all), and
    each CUDA-graph replay likewise (`--cuda-graphs`: the replays carry the collectives, so the ranks replay in
    step; a rank that timed none leaves the run without graphed steps rather than with some ranks' alone)."""
    fields = {f.name for f in dataclasses.fields(RunResult)}
    result = RunResult(**{k: v for k, v in harness_of(results[0]).model_dump().items() if k in fields})
    result.step_times_ms = slowest_steps([harness_of(r).step_times_ms for r in results])
    graphed = [harness_of(r).graphed_step_times_ms for r in results]
    result.graphed_step_times_ms = slowest_steps([g for g in graphed if g]) if all(graphed) else None
    return result


def slowest_steps(per_rank: list[list[float]]) -> list[float]:
    """Step i of the job as its slowest rank's step i: a step that holds collectives ends on every rank only once
    the last rank is done. The ranks time the same number of steps (a mismatch is a ValueError, not a guess)."""
    return [max(steps) for steps in zip(*per_rank, strict=True)]


def parallel_section(job: RankJob, results: list[RankResult], ncu_ranks: list[int], nnodes: int = 1) -> dict:
    """run.json `parallel`: the split, the nodes, every rank's harness numbers, topology and NCCL version;
    `counters_rank`: the rank whose kernels the analyses describe (the first with counters)."""
    return {
        "world_size": job.world_size, "tp": job.tp, "dp": job.dp, "sequence_parallel": job.sequence_parallel,
        "backend": "nccl" if job.device == "cuda" else "gloo", "nnodes": nnodes,
        "counters_rank": ncu_ranks[0] if ncu_ranks else None, "counters_ranks": ncu_ranks,
        "ranks": [{"rank": r.rank, "node": r.node, "node_rank": r.node_rank, "tp_rank": r.tp_rank, "dp_rank": r.dp_rank,
                   "step_ms": statistics.median(harness_of(r).step_times_ms), **_graphed_ms(harness_of(r)),
                   "final_loss": harness_of(r).final_loss,
                   "peak_memory_bytes": harness_of(r).peak_memory_bytes, "gpu": harness_of(r).gpu.get("name"),
                   "gpu_sharing": harness_of(r).gpu_sharing, "process": harness_of(r).process,
                   "host_time": harness_of(r).host_time} for r in results],
        "topology": (topo := topology() if job.device == "cuda" else None),
        "link": _link(harness_of(results[0]).gpu.get("name"), topo),
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if job.device == "cuda" else None,
    }


def _graphed_ms(run: RankRun) -> dict[str, float]:
    """A rank's median CUDA-graph replay (`graphed_step_ms`), where it timed them (`--cuda-graphs`); nothing
    otherwise, so runs without graphs keep the entries they always had."""
    return {"graphed_step_ms": statistics.median(run.graphed_step_times_ms)} if run.graphed_step_times_ms else {}


def _link(gpu_name: str | None, topo: str | None) -> dict | None:
    """The datasheet link between the ranks' GPUs (`links.link_for`), None on the CPU."""
    spec = spec_for(gpu_name) if gpu_name else None
    link = link_for(spec.key if spec else None, topo)
    return dataclasses.asdict(link) if link else None


def topology() -> str | None:
    """`nvidia-smi topo -m` as printed (the links between the GPUs: NV18, PIX, SYS, ...)."""
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return None
    done = subprocess.run([nvidia_smi, "topo", "-m"], capture_output=True, text=True, timeout=30, check=False)
    return done.stdout if done.returncode == 0 else None


@contextmanager
def ranks_folder(out: Path | None, where: Launch):
    """Where the ranks write: a private temporary folder on one host; on several, `out/.ranks-<job id>`, which
    every node sees at the same path (a shared filesystem) and node 0 removes at the end, once every other node
    has said it is done with it (a `node-<n>.done` file; at most `OTHER_NODES_WAIT_S`): the other nodes read all
    ranks' files after their own agent ends, which can be after node 0 merged the run."""
    if where.nnodes == 1:
        with tempfile.TemporaryDirectory() as temporary:
            yield Path(temporary)
        return
    folder = schema.make_folder(Path(out or ".") / f".ranks-{where.job_id}")
    try:
        yield folder
    finally:
        if where.leader:
            _wait_for(lambda: all((folder / f"node-{n}.done").exists() for n in range(1, where.nnodes)),
                      OTHER_NODES_WAIT_S)
            schema.remove_folder(folder)
        else:
            schema.signal_file(folder / f"node-{where.node_rank}.done")


def _wait_for(condition: Callable[[], bool], wait_s: float) -> None:
    """Poll `condition` every half second until it holds or `wait_s` passes."""
    deadline = time.monotonic() + wait_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.5)


def train_parallel(job: RankJob, timeout_s: float = 3600) -> tuple[RunResult, dict]:
    """`ssmprof run --tp N --dp M`: timed steps on every rank; the merged result and run.json's `parallel`."""
    check_devices(job.device, job.world_size)
    with ranks_folder(None, Launch()) as scratch:
        results = launch(job.model_copy(update={"mode": "train", "scratch": str(scratch)}), "train", timeout_s)
    return merged_result(results), parallel_section(job, results, [])


def check_numerics(job: RankJob, timeout_s: float = 1800) -> list[dict]:
    """Every rank's `workloads.parallel.numerics` (the parallel model vs the single-GPU model, same weights)."""
    check_devices(job.device, job.world_size)
    with ranks_folder(None, Launch()) as scratch:
        results = launch(job.model_copy(update={"mode": "numerics", "scratch": str(scratch)}), "numerics", timeout_s)
    return [{**(r.numerics or {}), "rank": r.rank} for r in results]


def sampled_hosts(job: RankJob, results: list[RankResult], timeout_s: float, where: Launch) -> list[RankResult]:
    """`results` with each rank's `host_time` taken from a job of its own (mode "host": warm-up, the timed steps, one
    step that finds the syncs, then `harness.sampled_steps`). Why a job of its own: a rank that dies while sampled
    (the sampler in its process, or anything else) makes torchrun end every rank, and in the timeline's job that
    would take the run with it; here it costs only the host section, which every rank then marks missing with the
    line the job failed with, and the run keeps its timeline and counters."""
    try:
        sampled = launch(job.model_copy(update={"mode": "host"}), "host", timeout_s, where)
        hosts = [harness_of(result).host_time for result in sampled]
    except RankFailed as exc:
        hosts = [{"missing": f"the sampled steps' job failed ({exc})"}] * len(results)
    return [result.model_copy(update={"result": harness_of(result).model_copy(update={"host_time": host})})
            for result, host in zip(results, hosts, strict=True)]


@dataclasses.dataclass
class RankPass:
    """A counter pass of a parallel run (`profile_run.StartPass`): at its turn, the whole job launched once more in
    counters mode, rank `rank` under Nsight Compute writing `report`, the others beside it, never ahead."""

    job: RankJob
    where: Launch
    rank: int
    timeout_s: float
    report: Path
    mode: str
    metrics: list[str]
    targets: dict | None
    names: list[str] | None
    ahead: bool = False

    def finish(self, on_kernel) -> float:
        began = time.perf_counter()
        chosen = {"report": str(self.report), "mode": self.mode, "metrics": self.metrics, "targets": self.targets,
                  "names": self.names, "timeout_s": self.timeout_s}
        job = self.job.model_copy(update={"mode": "counters", "ncu_ranks": (self.rank,), "ncu_pass": chosen})
        launch(job, f"counters-rank{self.rank}-{self.report.stem}", self.timeout_s, self.where)
        return time.perf_counter() - began

    def cancel(self) -> None:
        """Nothing runs before its turn."""


@dataclasses.dataclass(frozen=True)
class RankPasses:
    """The counter passes of rank `rank` of a parallel run, started as `profile_run.collect_counters` asks (`start`,
    a `profile_run.StartPass`): each a `RankPass` of `job` (its Triton choices pinned) at its turn."""

    job: RankJob
    where: Launch
    rank: int
    timeout_s: float

    def start(self, report: Path, mode: str, metrics: list[str], targets, names, ahead: bool) -> RankPass:
        return RankPass(self.job, self.where, self.rank, self.timeout_s, report, mode, metrics, targets, names,
                        ahead)


def rank_counters(job: RankJob, where: Launch, tables: dict[int, pd.DataFrame], results: list[RankResult],
                  settings: ProfileSettings, check) -> tuple[dict, dict, dict[str, Path]]:
    """Counters for each rank of `settings.ncu_ranks` in turn (`profile_run.collect_counters` on its timeline, each
    pass the job launched with that rank under Nsight Compute); `tables` gets the joined rows. Returns the
    counter collector notes, the checks (of the first such rank) and the reports (by the name each keeps in the
    run)."""
    from ssmprof.profiler.profile_run import collect_counters

    notes: dict[str, Any] = {}
    checks: dict[str, Any] = {}
    reports: dict[str, Path] = {}
    ncu_ranks = list(settings.ncu_ranks)
    for rank in ncu_ranks:
        folder = schema.make_folder(Path(job.scratch) / f"counters-rank{rank}")
        pins = schema.write_autotune_pins(results[rank].triton_autotune, folder)
        pinned = job.model_copy(update={"autotune": str(pins)})
        passes = RankPasses(pinned, where, rank, settings.ncu_timeout_s)
        tables[rank], found, checked, written = collect_counters(
            schema.conform_kernels(tables[rank]), settings.counters, harness_of(results[rank]).gpu, folder,
            passes.start, check, lambda stage, done, total: None, harness_of(results[rank]).peak_memory_bytes or 0.0,
            budget_s=settings.budget_s, parallel_job=True)
        notes = notes or {**found, "rank": rank, "ranks": ncu_ranks}
        checks = checks or checked
        reports.update({f"rank{rank}-{path.name}": path for path in written})
    return notes, checks, reports


def profile_parallel(job: RankJob, settings: ProfileSettings,
                     check: Callable[[pd.DataFrame, str], tuple[pd.DataFrame, dict]], timeout_s: float = 3600,
                     where: Launch = Launch()) -> Path | None:
    """`ssmprof profile --tp N`: every rank's timeline, Nsight Compute on the ranks `settings.ncu_ranks` (GPU,
    counters not "none"), merged into one run directory under `settings.out` by node 0 (None on the other
    nodes), named `settings.name`, else for its split (`pass_gpus`, `replay` and `ncu_cache` apply to single-GPU
    runs only: a rank's passes flush the caches, as Nsight Compute does by default).
    Nothing is written if any rank or collector fails."""
    from ssmprof.profiler.profile_run import run_info

    out, counters, ncu_ranks, keep_report = settings.out, settings.counters, settings.ncu_ranks, settings.keep_report
    where.check(job.world_size)
    check_devices(job.device, job.world_size // where.nnodes)
    bad = [rank for rank in ncu_ranks if not 0 <= rank < job.world_size]
    if bad:
        raise SsmprofError(f"--ncu-rank must be a rank from 0 to {job.world_size - 1}, got {bad[0]}")
    started = time.perf_counter()
    with ranks_folder(out, where) as scratch:
        job = job.model_copy(update={"scratch": str(scratch)})
        results = launch(job.model_copy(update={"mode": "timeline", "keep_trace": keep_report}), "timeline",
                         timeout_s, where)
        check_same_gpus(results)
        sampling = time.perf_counter()
        results = sampled_hosts(job, results, timeout_s, where)
        sampled_job_s = time.perf_counter() - sampling
        tables = {rank: schema.read_frame(table_file(scratch, "timeline", rank)) for rank in range(job.world_size)}
        result = merged_result(results)
        collectors: dict[str, dict[str, Any]] = {"harness": {"wall_s": time.perf_counter() - started,
                                                             "sampled_job_s": sampled_job_s},
                      # every rank kept the same timing iteration (`agreed_iteration`): rank 0's record stands for all
                      "timeline": {"tool": "torch.profiler", "ranks": job.world_size,
                                   "timing": results[0].timing.model_dump() if results[0].timing else None},
                      "counters": {"mode": counters if job.device == "cuda" else "none"}}
        checks: dict[str, Any] = {}
        reports: dict[str, Path] = {}
        profiled: list[int] = []
        if job.device == "cuda" and counters != "none" and ncu_ranks:
            notes, checks, reports = rank_counters(job, where, tables, results, settings, check)
            collectors["counters"].update(notes)
            profiled = list(ncu_ranks)
        if not where.leader:
            return None
        kernels = schema.conform_kernels(pd.concat([schema.conform_kernels(tables[rank]) for rank in sorted(tables)],
                                                   ignore_index=True))
        parallel = parallel_section(job, results, profiled, where.nnodes)
        # coverage of the rank the kernel analyses describe (the first with counters, else rank 0)
        described = kernels[kernels["rank"] == (profiled[0] if profiled else 0)]
        info = run_info(result, job.overrides, collectors, described, results[0].triton_autotune, checks, parallel)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        name = settings.name or (f"{job.workload}-{job.preset}-tp{job.tp}" + (f"-dp{job.dp}" if job.dp > 1 else "")
                                 + f"-{stamp}")
        extra = {}
        if keep_report:
            extra = {**reports, **{path.name: path for path in sorted(scratch.glob("trace-rank*.json.gz"))}}
        return schema.write_run(Path(out) / name, info, kernels, extra_files=extra)


if __name__ == "__main__":
    raise SystemExit(rank_main(sys.argv[1:]))
