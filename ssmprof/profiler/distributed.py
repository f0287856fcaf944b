"""Multi-GPU runs (`--tp N --dp M`): one process per rank, launched from here, each a `RankJob`.

    python -m ssmprof.profiler.distributed JOB_JSON [--rank R]

A rank reads its job, joins the process group (NCCL on GPUs, gloo on the CPU; rank from `--rank` or, under
torchrun, from RANK / LOCAL_RANK), builds its part of the model (`workloads.parallel`) and runs the
harness: `train` (timed steps), `timeline` (and the profiled iteration under torch.profiler, its table
written as `rank-<r>.parquet`) or `counters` (one step: the iteration Nsight Compute profiles).

`profile_parallel` is one profiled run over all ranks: every rank's timeline, then Nsight Compute on one
rank only (`ncu_rank`) while the others run without it: Nsight Compute hangs replaying NCCL kernels, so
it profiles every kernel but those (`ncu.NOT_NCCL`), and NCCL kernels keep timeline-only rows. The ranks'
tables are merged into one run directory with a `rank` column; run.json `parallel` records the world
size, TP / DP degrees, sequence parallelism, every rank's harness numbers, the topology
(`nvidia-smi topo -m`) and the NCCL version.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gzip
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch

from ssmprof import schema
from ssmprof.errors import NoGpu, SsmprofError
from ssmprof.profiler.harness import RunResult

MODES = ("train", "timeline", "counters", "numerics")


class RankFailed(SsmprofError):
    pass


# NVLink multicast (NVLS) off in NCCL, PyTorch's symmetric memory and NVSHMEM, whatever the caller's environment
# says: on the shared multi-GPU hosts a program using it can put every GPU of the host out of service.
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@dataclasses.dataclass(frozen=True)
class RankJob:
    workload: str
    preset: str
    overrides: dict
    warmup: int
    steps: int
    tp: int
    dp: int
    sequence_parallel: bool
    device: str  # "cuda" or "cpu"
    mode: str  # one of MODES (numerics: `workloads.parallel.numerics`, no training)
    scratch: str  # folder the ranks write their results into
    port: int = 0
    allow_fallback: bool = False
    autotune: str | None = None  # Triton autotuning choices to pin (the counters pass repeats the timeline's)
    keep_trace: bool = False  # timeline mode: also write the rank's raw torch.profiler trace (trace-rank<r>.json.gz)

    @property
    def world_size(self) -> int:
        return self.tp * self.dp


def rank_main(argv: list[str]) -> int:
    import torch.distributed as dist

    from ssmprof.kernels import plan_kernels
    from ssmprof.profiler import autotune
    from ssmprof.profiler.harness import run_training
    from ssmprof.profiler.markers import NvtxMarker
    from ssmprof.profiler.timeline import TimelineCapture, cpu_table, kernel_table
    from ssmprof.workloads.parallel import Parallelism, make_groups, numerics
    from ssmprof.workloads.registry import get_workload

    job = RankJob(**json.loads(Path(argv[0]).read_text()))
    rank = int(argv[argv.index("--rank") + 1]) if "--rank" in argv else int(os.environ["RANK"])
    cuda = job.device == "cuda"
    if cuda:
        torch.cuda.set_device(device_index(argv, rank))
    # The ranks beside the one Nsight Compute replays wait in their collectives for as long as it takes: far past
    # the default 10-minute watchdog on a paper preset.
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{job.port}", rank=rank,
                            world_size=job.world_size, timeout=dt.timedelta(hours=2))
    out = Path(job.scratch)
    try:
        workload = get_workload(job.workload)
        cfg = workload.config(job.preset, job.overrides)
        plan = plan_kernels(workload.kernel_ops(cfg), job.device, job.allow_fallback, cfg.dtype)
        if job.autotune:
            autotune.pin(json.loads(Path(job.autotune).read_text()))
        groups = make_groups(Parallelism(job.tp, job.dp, job.sequence_parallel))
        if job.mode == "numerics":
            checked = numerics(workload, cfg, plan, groups, torch.device(job.device))
            (out / f"rank-{rank}.json").write_text(json.dumps({**checked, "rank": rank}))
            return 0
        capture = TimelineCapture(cuda) if job.mode == "timeline" else None
        steps = 1 if job.mode == "counters" else job.steps
        result = run_training(workload, job.preset, cfg, plan, steps, job.warmup, NvtxMarker(), capture=capture,
                              groups=groups)
        if capture is not None:
            table = kernel_table(capture.trace) if cuda else cpu_table(capture.trace)
            table.assign(rank=rank).to_parquet(out / f"rank-{rank}.parquet", index=False)
            if job.keep_trace:  # per-rank Kineto traces, as HolisticTraceAnalysis reads them
                with gzip.open(out / f"trace-rank{rank}.json.gz", "wt") as f:
                    json.dump(capture.trace, f)
        extra = {"rank": rank, "tp_rank": groups.tp_rank, "dp_rank": groups.dp_rank,
                 "triton_autotune": autotune.snapshot() if cuda else {}}
        (out / f"rank-{rank}.json").write_text(json.dumps({**dataclasses.asdict(result), **extra}))
    except SsmprofError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        dist.destroy_process_group()
    return 0


def device_index(argv: list[str], rank: int) -> int:
    """The GPU of a rank. Launched by `launch` (`--rank`, one host): the GPU numbered as the rank, whatever the
    environment says, since the rank Nsight Compute wraps inherits the parent's, where a LOCAL_RANK of an outer
    launcher may stand. Under torchrun: LOCAL_RANK."""
    return rank if "--rank" in argv else int(os.environ.get("LOCAL_RANK", rank))


def check_devices(device: str, world_size: int) -> None:
    """Refuse, before anything starts, a world larger than the GPUs this host has."""
    if device == "cuda" and torch.cuda.device_count() < world_size:
        raise NoGpu(f"{world_size} ranks (--tp x --dp) need {world_size} GPUs; {torch.cuda.device_count()} visible")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_command(job_path: Path, rank: int) -> list[str]:
    return [sys.executable, "-m", "ssmprof.profiler.distributed", str(job_path), "--rank", str(rank)]


def launch(job: RankJob, timeout_s: float, wrapped: Callable[[list[str]], float] | None = None,
           wrapped_rank: int = 0) -> tuple[list[dict], float | None]:
    """Run every rank of `job` to its end; returns their results (in rank order) and, where `wrapped` runs one
    rank (`wrapped_rank`, e.g. under Nsight Compute) in this thread, what it returned. A failed rank stops
    the others and is one `RankFailed` line (its last message)."""
    scratch = Path(job.scratch)
    job = dataclasses.replace(job, port=_free_port())
    job_path = scratch / f"job-{job.mode}.json"
    job_path.write_text(json.dumps(dataclasses.asdict(job)))
    procs: dict[int, subprocess.Popen] = {}
    os.environ.update(NO_MULTICAST_ENV)  # also for the rank `wrapped` starts (Nsight Compute's child)
    logs = {rank: scratch / f"rank-{rank}-{job.mode}.log" for rank in range(job.world_size)}
    wrapped_value = None
    try:
        for rank in range(job.world_size):
            if wrapped is not None and rank == wrapped_rank:
                continue
            with open(logs[rank], "w") as log:
                procs[rank] = subprocess.Popen(rank_command(job_path, rank), stdout=log, stderr=subprocess.STDOUT,
                                               env={**os.environ, "LOCAL_RANK": str(rank)})
        if wrapped is not None:
            wrapped_value = wrapped(rank_command(job_path, wrapped_rank))
        deadline = time.monotonic() + timeout_s
        for rank, proc in procs.items():
            try:
                code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise RankFailed(f"rank {rank} did not finish in {timeout_s:.0f} s") from None
            if code != 0:
                raise RankFailed(f"rank {rank} failed: {_last_line(logs[rank])}")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    results = []
    for rank in range(job.world_size):
        path = scratch / f"rank-{rank}.json"
        if not path.is_file():
            raise RankFailed(f"rank {rank} wrote no result: {_last_line(logs[rank])}")
        results.append(json.loads(path.read_text()))
    return results, wrapped_value


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()] if log.is_file() else []
    errors = [line for line in lines if line.startswith("error:") or "Error" in line]
    return (errors or lines or ["no output"])[-1].removeprefix("error: ")


def merged_result(results: list[dict]) -> RunResult:
    """One result for the run: rank 0's, with each step as long as its slowest rank (a TP step waits for all)."""
    fields = {f.name for f in dataclasses.fields(RunResult)}
    result = RunResult(**{k: v for k, v in results[0].items() if k in fields})
    result.step_times_ms = [max(steps) for steps in zip(*(r["step_times_ms"] for r in results), strict=True)]
    return result


def parallel_section(job: RankJob, results: list[dict], ncu_rank: int | None) -> dict:
    """run.json `parallel`: the split, every rank's harness numbers, topology and NCCL version."""
    return {
        "world_size": job.world_size, "tp": job.tp, "dp": job.dp, "sequence_parallel": job.sequence_parallel,
        "backend": "nccl" if job.device == "cuda" else "gloo", "counters_rank": ncu_rank,
        "ranks": [{"rank": r["rank"], "tp_rank": r["tp_rank"], "dp_rank": r["dp_rank"],
                   "step_ms": statistics.median(r["step_times_ms"]), "final_loss": r["final_loss"],
                   "peak_memory_bytes": r["peak_memory_bytes"]} for r in results],
        "topology": (topo := topology() if job.device == "cuda" else None),
        "link": _link(results[0]["gpu"].get("name"), topo),
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if job.device == "cuda" else None,
    }


def _link(gpu_name: str | None, topo: str | None) -> dict | None:
    """The datasheet link between the ranks' GPUs (`links.link_for`), None on the CPU."""
    from ssmprof.profiler.gpu_specs import spec_for
    from ssmprof.profiler.links import link_for

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


def train_parallel(job: RankJob, timeout_s: float = 3600) -> tuple[RunResult, dict]:
    """`ssmprof run --tp N --dp M`: timed steps on every rank; the merged result and run.json's `parallel`."""
    check_devices(job.device, job.world_size)
    with tempfile.TemporaryDirectory() as scratch:
        results, _ = launch(dataclasses.replace(job, mode="train", scratch=scratch), timeout_s)
    return merged_result(results), parallel_section(job, results, None)


def check_numerics(job: RankJob, timeout_s: float = 1800) -> list[dict]:
    """Every rank's `workloads.parallel.numerics` (the parallel model vs the single-GPU model, same weights)."""
    check_devices(job.device, job.world_size)
    with tempfile.TemporaryDirectory() as scratch:
        results, _ = launch(dataclasses.replace(job, mode="numerics", scratch=scratch), timeout_s)
    return results


def profile_parallel(job: RankJob, out: Path, counters: str, ncu_rank: int, ncu_timeout_s: float,
                     check: Callable[[pd.DataFrame, str], tuple[pd.DataFrame, dict]],
                     keep_report: bool = False, timeout_s: float = 3600) -> Path:
    """`ssmprof profile --tp N`: every rank's timeline, Nsight Compute on rank `ncu_rank` (GPU, counters not
    "none"), merged into one run directory under `out`. Nothing is written if any rank or collector fails."""
    from ssmprof.analysis.communication import one_rank
    from ssmprof.profiler.collect import collect_counters, run_info
    from ssmprof.profiler.counters import run_ncu

    check_devices(job.device, job.world_size)
    if not 0 <= ncu_rank < job.world_size:
        raise SsmprofError(f"--ncu-rank must be a rank from 0 to {job.world_size - 1}, got {ncu_rank}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        results, _ = launch(dataclasses.replace(job, mode="timeline", scratch=folder, keep_trace=keep_report),
                            timeout_s)
        tables = [pd.read_parquet(scratch / f"rank-{rank}.parquet") for rank in range(job.world_size)]
        result = merged_result(results)
        collectors = {"harness": {"wall_s": time.perf_counter() - started},
                      "timeline": {"tool": "torch.profiler", "ranks": job.world_size},
                      "counters": {"mode": counters if job.device == "cuda" else "none"}}
        checks: dict = {}
        if job.device == "cuda" and counters != "none":
            choices = scratch / "autotune.json"
            choices.write_text(json.dumps(results[ncu_rank]["triton_autotune"]))
            counters_job = dataclasses.replace(job, mode="counters", scratch=folder, autotune=str(choices))

            class Pass:  # all ranks launched at its turn (a rank under ncu, the others beside it), never ahead
                def __init__(self, report: Path, mode: str, metrics: list[str], targets, names, ahead: bool):
                    self.report, self.mode, self.options = report, mode, {"metrics": metrics, "targets": targets,
                                                                          "names": names}

                def finish(self, on_kernel) -> float:
                    _, wall = launch(counters_job, ncu_timeout_s, wrapped_rank=ncu_rank,
                                     wrapped=lambda argv: run_ncu(argv, self.report, self.mode, ncu_timeout_s,
                                                                  on_kernel, **self.options))
                    return wall

                def cancel(self) -> None:
                    pass

            tables[ncu_rank], notes, checks, _ = collect_counters(
                schema.conform_kernels(tables[ncu_rank]), counters, result.gpu, scratch, Pass, check,
                lambda stage, done, total: None, results[ncu_rank]["peak_memory_bytes"] or 0.0)
            collectors["counters"].update({**notes, "rank": ncu_rank})
        kernels = schema.conform_kernels(pd.concat([schema.conform_kernels(t) for t in tables], ignore_index=True))
        if job.device != "cuda":
            result.gpu = {"name": "cpu"}
        parallel = parallel_section(job, results, ncu_rank if collectors["counters"].get("tool") else None)
        # coverage of the rank the kernel analyses describe (`communication.one_rank`), not of every GPU's kernels
        described = schema.RunInfo.model_construct(parallel=schema.ParallelSection.model_validate(parallel))
        info = run_info(result, job.overrides, collectors, one_rank(kernels, described),
                        results[0]["triton_autotune"])
        info["checks"] = checks
        info["parallel"] = parallel
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        name = f"{job.workload}-{job.preset}-tp{job.tp}" + (f"-dp{job.dp}" if job.dp > 1 else "") + f"-{stamp}"
        extra = {}
        if keep_report:
            kept = [*scratch.glob("*.ncu-rep"), *scratch.glob("trace-rank*.json.gz")]
            extra = {path.name: path for path in sorted(kept)}
        return schema.write_run(Path(out) / name, info, kernels, extra_files=extra)


if __name__ == "__main__":
    raise SystemExit(rank_main(sys.argv[1:]))
