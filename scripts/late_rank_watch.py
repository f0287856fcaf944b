"""Watch the ranks of a multi-GPU ssmprof run and say where a late rank's host time goes (stdlib only).

Run by scripts/late_rank_probe.sh on a GPU host, beside an `ssmprof run|profile ... --tp N`:

    python3 scripts/late_rank_watch.py watch OUTDIR --ranks 4 --py-spy /root/bin/py-spy
        waits for the N rank processes (`ssmprof.profiler.distributed`) to reach their timed steps (their stage
        files), then over a window of steady steps: every thread's CPU time, faults and context switches from
        /proc at its start and end, `py-spy record` (all threads, idle samples too) and a `--gil` record of each
        rank, the GPUs' utilization and SM clock, the busiest threads of the host, each rank's environment,
        affinity and memory policy; then `py-spy dump --native` of each rank. Everything under OUTDIR.
    python3 scripts/late_rank_watch.py traces RUNDIR [RUNDIR ...]
        per rank trace (`trace-rank*.json.gz`, Kineto): each kernel's launch call (runtime/driver event, same
        correlation id) against its GPU start: how much of each gap before a kernel the host's launch call was
        late (it began after the GPU had run dry) and how much the GPU took after the call began; the host's own
        time between launch calls, and the time inside runtime calls by name. CSV on stdout.
    python3 scripts/late_rank_watch.py pyspy OUTDIR
        the py-spy records of a watch, summarized per rank and thread (samples, top frames).
    python3 scripts/late_rank_watch.py site DIR
        writes DIR/sitecustomize.py: with LR_PROBE=1 in a rank's environment it times every garbage collection
        and, on SIGUSR1, writes the rank's Python threads, trace/profile hooks and GC counts (LR_DIR); LR_GC=off
        disables the collector; LR_SAMPLE=1 samples the main thread's stack from an ITIMER_PROF handler (where
        py-spy cannot attach).
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RANK_MODULE = "ssmprof.profiler.distributed"
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
GPU_CATS = ("kernel", "gpu_memset", "gpu_memcpy")
ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
            "CUDA_DEVICE_MAX_CONNECTIONS", "PYTHONHASHSEED", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "LR_GC", "LR_PROBE")


def rank_processes() -> dict[int, int]:
    """RANK -> pid of every running rank process (not its torchrun agent)."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if not any(RANK_MODULE.encode() == a for a in argv) or any(b"torch.distributed.run" in a for a in argv):
                continue
            env = environ(int(entry.name))
        except OSError:
            continue
        if "RANK" in env:
            found[int(env["RANK"])] = int(entry.name)
    return found


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    pairs = (item.decode(errors="replace").partition("=") for item in raw if b"=" in item)
    return {key: value for key, _, value in pairs}


def job_scratch(pid: int) -> Path | None:
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    return Path(argv[-1]).parent if argv and argv[-1].endswith(".json") else None


def stage(scratch: Path | None, rank: int) -> str:
    if scratch is None:
        return ""
    path = scratch / f"stage-rank{rank}.txt"
    try:
        return path.read_text()
    except OSError:
        return ""


def threads(pid: int) -> list[dict[str, Any]]:
    """Every thread of `pid`: name, CPU time (user, system, s), faults, last CPU, context switches, run-queue wait."""
    tick = os.sysconf("SC_CLK_TCK")
    rows = []
    for task in sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda p: int(p.name)):
        try:
            stat = (task / "stat").read_text()
            status = (task / "status").read_text()
        except OSError:
            continue
        try:
            sched = (task / "schedstat").read_text().split()
        except OSError:
            sched = ["0", "0", "0"]
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()  # fields[0] is field 3 (state)
        switches = dict(re.findall(r"^(voluntary_ctxt_switches|nonvoluntary_ctxt_switches):\s+(\d+)", status, re.M))
        rows.append({"tid": int(task.name), "comm": comm, "state": fields[0],
                     "utime_s": int(fields[11]) / tick, "stime_s": int(fields[12]) / tick,
                     "minflt": int(fields[7]), "majflt": int(fields[9]), "cpu": int(fields[36]),
                     "vcs": int(switches.get("voluntary_ctxt_switches", 0)),
                     "nvcs": int(switches.get("nonvoluntary_ctxt_switches", 0)),
                     "run_ns": int(sched[0]), "wait_ns": int(sched[1]), "slices": int(sched[2])})
    return rows


def thread_deltas(before: dict[int, list[dict]], after: dict[int, list[dict]], window_s: float) -> list[dict]:
    rows = []
    for rank, now in after.items():
        was = {row["tid"]: row for row in before.get(rank, [])}
        for row in now:
            old = was.get(row["tid"])
            if old is None:
                continue
            cpu = row["utime_s"] - old["utime_s"] + row["stime_s"] - old["stime_s"]
            rows.append({"rank": rank, "tid": row["tid"], "comm": row["comm"], "window_s": round(window_s, 2),
                         "cpu_s": round(cpu, 3), "cpu_pct": round(100 * cpu / window_s, 1),
                         "user_s": round(row["utime_s"] - old["utime_s"], 3),
                         "sys_s": round(row["stime_s"] - old["stime_s"], 3),
                         "run_pct": round(100 * (row["run_ns"] - old["run_ns"]) / 1e9 / window_s, 1),
                         "runq_wait_ms": round((row["wait_ns"] - old["wait_ns"]) / 1e6, 2),
                         "minflt": row["minflt"] - old["minflt"], "majflt": row["majflt"] - old["majflt"],
                         "vcs": row["vcs"] - old["vcs"], "nvcs": row["nvcs"] - old["nvcs"],
                         "slices": row["slices"] - old["slices"], "last_cpu": row["cpu"]})
    return rows


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        path.write_text("")
        return
    keys: list[str] = []
    for row in rows:
        keys += [key for key in row if key not in keys]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def run_quiet(command: list[str], timeout: float) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        return done.stdout + done.stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{command[0]} failed: {exc}"


def watch(out: Path, ranks: int, py_spy: str, window_s: float, delay_s: float, wait_s: float, gil_s: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    log = (out / "watch.log").open("a")

    def say(text: str) -> None:
        log.write(f"{time.strftime('%H:%M:%S')} {text}\n")
        log.flush()

    deadline = time.monotonic() + wait_s
    procs: dict[int, int] = {}
    while time.monotonic() < deadline:
        procs = rank_processes()
        if len(procs) == ranks:
            scratch = job_scratch(next(iter(procs.values())))
            if all(stage(scratch, rank) == "timed steps" for rank in procs):
                break
        time.sleep(0.25)
    else:
        say(f"gave up: ranks {sorted(procs)} never all reached timed steps")
        return
    say(f"ranks at timed steps: {procs}")
    time.sleep(delay_s)
    info = {}
    for rank, pid in procs.items():
        env = environ(pid)
        status = Path(f"/proc/{pid}/status").read_text()
        allowed = dict(re.findall(r"^(Cpus_allowed_list|Mems_allowed_list):\s+(\S+)", status, re.M))
        info[rank] = {"pid": pid, "env": {k: env.get(k) for k in ENV_KEYS},
                      "nccl_env": {k: v for k, v in env.items() if k.startswith(("NCCL", "TORCH_NCCL", "CUDA"))},
                      **allowed, "numa_maps_policies": numa_policies(pid)}
    (out / "ranks.json").write_text(json.dumps(info, indent=1))
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,index,utilization.gpu,clocks.sm,power.draw",
                            "--format=csv,noheader", "-lms", "250"], stdout=(out / "gpu.csv").open("w"),
                           stderr=subprocess.DEVNULL)
    before = {rank: threads(pid) for rank, pid in procs.items()}
    started = time.monotonic()
    records = [subprocess.Popen([py_spy, "record", "--pid", str(pid), "--nonblocking", "--threads", "--idle",
                                 "-r", "200", "-d", str(int(window_s)), "-f", "raw", "-o",
                                 str(out / f"pyspy-rank{rank}.txt")], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for rank, pid in procs.items()]
    time.sleep(window_s / 2)
    (out / "top-threads.txt").write_text(run_quiet(["ps", "-eLo", "pid,tid,psr,pcpu,stat,comm", "--sort=-pcpu"], 10))
    for proc in records:
        text = proc.communicate(timeout=window_s + 60)[0]
        say(f"py-spy record: {text.strip()[-600:]}")
    after = {rank: threads(pid) for rank, pid in procs.items()}
    elapsed = time.monotonic() - started
    write_csv(out / "threads.csv", thread_deltas(before, after, elapsed))
    say(f"threads window {elapsed:.1f} s; still in timed steps: "
        f"{[stage(job_scratch(pid), rank) for rank, pid in procs.items()]}")
    if gil_s > 0:
        gil = [subprocess.Popen([py_spy, "record", "--pid", str(pid), "--nonblocking", "--threads", "--gil",
                                 "-r", "200", "-d", str(int(gil_s)), "-f", "raw", "-o",
                                 str(out / f"pyspy-gil-rank{rank}.txt")], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for rank, pid in procs.items()]
        for proc in gil:
            say(f"py-spy --gil: {proc.communicate(timeout=gil_s + 60)[0].strip()[-300:]}")
    for rank, pid in procs.items():
        try:
            os.kill(pid, 10)  # SIGUSR1: the sitecustomize probe writes the rank's Python threads and hooks
        except OSError as exc:
            say(f"SIGUSR1 to rank {rank}: {exc}")
    for round_ in range(2):
        for rank, pid in procs.items():
            text = run_quiet([py_spy, "dump", "--native", "--pid", str(pid)], 30)
            with (out / f"dump-native-rank{rank}.txt").open("a") as handle:
                handle.write(f"=== round {round_} {time.strftime('%H:%M:%S')}\n{text}\n")
        time.sleep(0.7)
    smi.terminate()
    say("done")


def numa_policies(pid: int) -> dict[str, int]:
    try:
        lines = Path(f"/proc/{pid}/numa_maps").read_text().splitlines()
    except OSError:
        return {}
    return dict(collections.Counter(line.split()[1] for line in lines if len(line.split()) > 1))


def trace_rows(path: Path) -> list[dict[str, Any]]:
    """Host-vs-GPU split of the gaps between one trace's kernels, per main launching thread and in all."""
    with gzip.open(path, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    calls = {}
    runtime_by_name: dict[str, float] = collections.defaultdict(float)
    runtime_count: collections.Counter[str] = collections.Counter()
    host_events = []
    for event in events:
        if event.get("ph") != "X":
            continue
        cat = event.get("cat", "")
        if cat in LAUNCH_CATS:
            host_events.append(event)
            runtime_by_name[event["name"]] += float(event.get("dur", 0))
            runtime_count[event["name"]] += 1
            corr = event.get("args", {}).get("correlation")
            if corr is not None:
                calls[corr] = event
    gpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS), key=lambda e: float(e["ts"]))
    reach = None
    gaps, host_parts, gpu_parts, call_durs = [], [], [], []
    late_launch = early_launch = unmatched = 0
    for event in gpu:
        start, end = float(event["ts"]), float(event["ts"]) + float(event.get("dur", 0))
        call = calls.get(event.get("args", {}).get("correlation"))
        if reach is not None and start > reach:
            gap = start - reach
            gaps.append(gap)
            if call is None:
                unmatched += 1
            else:
                began = float(call["ts"])
                host = min(gap, max(0.0, began - reach))
                host_parts.append(host)
                gpu_parts.append(gap - host)
                call_durs.append(float(call.get("dur", 0)))
                if began > reach:
                    late_launch += 1
                else:
                    early_launch += 1
        reach = end if reach is None else max(reach, end)
    # host time between consecutive launch-type calls on each thread (the framework's own time per launch)
    by_tid: dict[Any, list[dict]] = collections.defaultdict(list)
    for event in host_events:
        by_tid[event.get("tid")].append(event)
    between = {}
    for tid, mine in by_tid.items():
        mine.sort(key=lambda e: float(e["ts"]))
        spaces = [float(b["ts"]) - float(a["ts"]) - float(a.get("dur", 0))
                  for a, b in zip(mine[:-1], mine[1:], strict=True)]
        inside = sum(float(e.get("dur", 0)) for e in mine)
        span = float(mine[-1]["ts"]) + float(mine[-1].get("dur", 0)) - float(mine[0]["ts"]) if mine else 0.0
        between[tid] = (len(mine), span, inside, spaces)
    rank = re.search(r"rank(\d+)", path.name)
    base = {"trace": path.name, "rank": int(rank.group(1)) if rank else -1, "kernels": len(gpu)}
    rows = [{**base, "what": "gaps", "n": len(gaps), "median_gap_us": med(gaps), "total_gap_ms": sum(gaps) / 1e3,
             "host_late_ms": sum(host_parts) / 1e3, "gpu_after_call_ms": sum(gpu_parts) / 1e3,
             "median_host_part_us": med(host_parts), "median_gpu_part_us": med(gpu_parts),
             "launch_began_after_gpu_idle": late_launch, "launch_began_before_gpu_idle": early_launch,
             "unmatched": unmatched, "median_call_us_before_gap": med(call_durs)}]
    for tid, (count, span, inside, spaces) in sorted(between.items(), key=lambda kv: -kv[1][0])[:3]:
        rows.append({**base, "what": f"thread {tid}", "n": count, "span_ms": span / 1e3, "in_calls_ms": inside / 1e3,
                     "between_calls_ms": sum(spaces) / 1e3, "median_between_us": med(spaces),
                     "p90_between_us": quantile(spaces, 0.9), "max_between_ms": max(spaces, default=0) / 1e3})
    for name, total in sorted(runtime_by_name.items(), key=lambda kv: -kv[1])[:8]:
        rows.append({**base, "what": f"call {name}", "n": runtime_count[name], "in_calls_ms": total / 1e3,
                     "median_call_us": None})
    return rows


def med(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def traces(folders: list[Path]) -> None:
    rows = []
    for folder in folders:
        for path in sorted(folder.glob("trace-rank*.json.gz")):
            try:
                rows += [{"run": folder.name, **row} for row in trace_rows(path)]
            except (OSError, ValueError, KeyError) as exc:
                rows.append({"run": folder.name, "trace": path.name, "what": f"failed: {exc}"})
    keys: list[str] = []
    for row in rows:
        keys += [key for key in row if key not in keys]
    writer = csv.DictWriter(sys.stdout, fieldnames=keys)
    writer.writeheader()
    writer.writerows(rows)


FRAME = re.compile(r"^(?P<func>.*?) \((?P<where>[^()]*)\)$")


def pyspy_summary(out: Path, top: int = 12) -> None:
    for path in sorted(out.glob("pyspy*-rank*.txt")):
        per_thread: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        totals: collections.Counter[str] = collections.Counter()
        for line in path.read_text(errors="replace").splitlines():
            stack, _, number = line.rpartition(" ")
            if not number.isdigit():
                continue
            frames = stack.split(";")
            thread = next((f for f in frames if f.startswith("thread")), "?")
            code = [f for f in frames if not f.startswith(("thread", "process"))]
            totals[thread] += int(number)
            leaf = code[-1] if code else "(no python frame)"
            per_thread[thread][leaf] += int(number)
        print(f"== {path.name}")
        for thread, total in totals.most_common():
            print(f"  {thread}: {total} samples")
            for leaf, count in per_thread[thread].most_common(top if total == max(totals.values()) else 3):
                print(f"      {100 * count / total:5.1f}%  {leaf[:150]}")


SITE = r'''
import os as _os
import sys as _sys


def _chain():  # the sitecustomize this one shadows, if any, runs first
    here = _os.path.dirname(_os.path.abspath(__file__))
    for entry in _sys.path:
        path = _os.path.join(entry or ".", "sitecustomize.py")
        if _os.path.abspath(entry or ".") != here and _os.path.isfile(path):
            try:
                with open(path) as handle:
                    exec(compile(handle.read(), path, "exec"), {"__name__": "_chained_sitecustomize", "__file__": path})
            except Exception as exc:  # noqa: BLE001
                print(f"chained sitecustomize {path} failed: {exc}", file=_sys.stderr)
            return


_chain()
if _os.environ.get("LR_PROBE"):
    try:
        _argv = open("/proc/self/cmdline", "rb").read().split(b"\0")
    except OSError:
        _argv = []
    if any(a == b"ssmprof.profiler.distributed" for a in _argv):
        import atexit as _atexit
        import gc as _gc
        import json as _json
        import signal as _signal
        import threading as _threading
        import time as _time

        _dir = _os.environ.get("LR_DIR", "/tmp")
        _rank = _os.environ.get("RANK", "x")
        _gcstat = {0: [0, 0.0, 0.0], 1: [0, 0.0, 0.0], 2: [0, 0.0, 0.0]}
        _gcbig = []
        _t = [0.0]

        def _on_gc(phase, info):
            if phase == "start":
                _t[0] = _time.perf_counter()
                return
            took = _time.perf_counter() - _t[0]
            entry = _gcstat[info["generation"]]
            entry[0] += 1
            entry[1] += took
            entry[2] = max(entry[2], took)
            if took > 0.002 and len(_gcbig) < 500:
                _gcbig.append([round(_time.time(), 3), info["generation"], round(took * 1e3, 2), info["collected"]])

        _gc.callbacks.append(_on_gc)
        if _os.environ.get("LR_GC") == "off":
            _gc.disable()
        _samples = {}
        if _os.environ.get("LR_SAMPLE"):
            import traceback as _tb

            def _sample(signum, frame):
                key = ";".join(f"{f.name} ({f.filename}:{f.lineno})" for f in _tb.extract_stack(frame)[-25:])
                _samples[key] = _samples.get(key, 0) + 1

            _signal.signal(_signal.SIGPROF, _sample)
            _signal.setitimer(_signal.ITIMER_PROF, 0.005, 0.005)

        def _snapshot(signum=None, frame=None, name="usr1"):
            data = {"rank": _rank, "pid": _os.getpid(), "when": _time.time(),
                    "threads": [[t.name, t.ident, getattr(t, "native_id", None), t.daemon]
                                for t in _threading.enumerate()],
                    "gettrace": repr(_sys.gettrace()), "getprofile": repr(_sys.getprofile()),
                    "threading_trace": repr(getattr(_threading, "_trace_hook", None)),
                    "threading_profile": repr(getattr(_threading, "_profile_hook", None)),
                    "gc_enabled": _gc.isenabled(), "gc_count": _gc.get_count(), "gc_threshold": _gc.get_threshold(),
                    "gc_stat": _gcstat, "gc_over_2ms": _gcbig, "switchinterval": _sys.getswitchinterval(),
                    "affinity": sorted(_os.sched_getaffinity(0)), "frames_now": len(_sys._current_frames())}
            if name == "usr1":
                data["gc_objects"] = len(_gc.get_objects())
            if _samples:
                data["samples"] = sorted(_samples.items(), key=lambda kv: -kv[1])[:400]
            with open(f"{_dir}/site-rank{_rank}-{_os.getpid()}-{name}.json", "w") as handle:
                _json.dump(data, handle)

        _signal.signal(_signal.SIGUSR1, _snapshot)
        def _at_exit():
            if _samples:
                _signal.setitimer(_signal.ITIMER_PROF, 0, 0)
            _snapshot(name="exit")

        _atexit.register(_at_exit)
'''


def site(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITE.lstrip())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("watch")
    w.add_argument("out", type=Path)
    w.add_argument("--ranks", type=int, default=4)
    w.add_argument("--py-spy", default="py-spy")
    w.add_argument("--window-s", type=float, default=8.0)
    w.add_argument("--delay-s", type=float, default=2.0)
    w.add_argument("--wait-s", type=float, default=400.0)
    w.add_argument("--gil-s", type=float, default=3.0)
    t = sub.add_parser("traces")
    t.add_argument("folders", type=Path, nargs="+")
    p = sub.add_parser("pyspy")
    p.add_argument("out", type=Path)
    s = sub.add_parser("site")
    s.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.command == "watch":
        watch(args.out, args.ranks, args.py_spy, args.window_s, args.delay_s, args.wait_s, args.gil_s)
    elif args.command == "traces":
        traces(args.folders)
    elif args.command == "pyspy":
        pyspy_summary(args.out)
    else:
        site(args.folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
