#!/usr/bin/env bash
# Why one rank of `ssmprof profile mamba2-lm --preset paper --tp 4` launches slowly (tests/data/tp4-h100-late-rank-cause).
# Runs on a multi-GPU device host (the `run` tool), from the repository root there, over a HEAD snapshot and a
# wheelhouse carried in build/carry-lr/ (snap.tar.xz, wheelhouse/, kernels.tar.xz.*, optionally triton-lr.tar.xz):
#   bash scripts/late_rank_probe.sh diag     two TP=4 profiles watched by scripts/late_rank_watch.py (py-spy of every
#                                            rank, every thread's CPU time, GPU utilization, per-rank Kineto traces of
#                                            the profiled iteration and of the timing pass), then TP=2 on GPUs 0,1
#   bash scripts/late_rank_probe.sh ab       `ssmprof run --tp 4` as it is and with each remedy in LR_AB (NAME=ENV;...)
#   bash scripts/late_rank_probe.sh confirm  is every rank host-bound? TP=4 as it is; TP=4 with its step captured as
#                                            one CUDA graph (patched here: LR_GRAPHS=1 lets a --tp rank capture and
#                                            replay its step, NCCL collectives inside); TP=4 at batch 8 (GPU work x4)
#                                            profiled; TP=4 and TP=1 at seq-len 512 (GPU work /8: the step is the
#                                            host's time); TP=2 on GPUs 0,1 as it is and graphed
# Results: one archive per run under $OUT (build/late-rank/out off the device host); a summary table last.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
CARRY=$REPO/build/carry-lr
LR=${LR_ROOT:-/root/lr}
RES=${OUT:-$REPO/build/late-rank/out}
LIMIT=${LR_LIMIT_S:-570}
PLAN=${1:-diag}
W=$LR/build/late-rank
WATCH="python3 $REPO/scripts/late_rank_watch.py"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
log() { echo "[$(date +%T) +${SECONDS}s] $*"; }
left() { echo $((LIMIT - SECONDS)); }
mkdir -p "$RES"

setup() {
  rm -rf "$LR" && mkdir -p "$LR" "$W" /root/bin
  tar xJf "$CARRY/snap.tar.xz" -C "$LR" || exit 1
  cd "$LR" || exit 1
  log "install (HEAD $(cat "$CARRY/snap.rev" 2>/dev/null))"
  python3 -m pip install -q --no-index --find-links "$CARRY/wheelhouse" nvtx plotly pydantic 2>&1 | tail -2
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | tail -2
  MAMBA_FORCE_BUILD=TRUE MAMBA_SKIP_CUDA_BUILD=TRUE CAUSAL_CONV1D_FORCE_BUILD=TRUE CAUSAL_CONV1D_SKIP_CUDA_BUILD=TRUE \
    python3 -m pip install -q --no-index --find-links "$CARRY/wheelhouse" --no-deps --no-build-isolation \
    --no-binary mamba-ssm,causal-conv1d "mamba-ssm==2.3.2.post1" "causal-conv1d==1.7.0" 2>&1 | tail -2
  cat "$CARRY"/kernels.tar.xz.* | xz -d | tar xf -
  WHEELHOUSE="$CARRY/wheelhouse" python3 -m ssmprof.kernel_build 2>&1 | tail -1
  python3 - "$CARRY"/wheelhouse/py_spy-*.whl <<'EOF'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next(n for n in z.namelist() if n.endswith("/scripts/py-spy"))
    open("/root/bin/py-spy", "wb").write(z.read(name))
os.chmod("/root/bin/py-spy", 0o755)
EOF
  $WATCH site "$LR/lrsite"
  if [[ -f $CARRY/triton-lr.tar.xz ]]; then xz -d <"$CARRY/triton-lr.tar.xz" | tar xf - -C "$LR"; fi
  log "triton cache: $(find "$LR/build/triton-cache" -type f 2>/dev/null | wc -l) files"
  export TRITON_CACHE_DIR=$LR/build/triton-cache
  # also keep each rank's timing-pass trace (CUDA activity with its runtime launch calls; the steps as timed)
  python3 - <<'EOF'
from pathlib import Path
p = Path("ssmprof/profiler/distributed.py")
s = p.read_text()
old = '                schema.write_trace(capture.trace, out / f"trace-rank{rank}.json.gz")\n'
assert old in s
s = s.replace(old, old + '                schema.write_trace(capture.timing_trace, out / f"trace-rank{rank}-timing.json.gz")\n')
p.write_text(s)
EOF
  python3 -c "import sitecustomize; print('system sitecustomize:', sitecustomize.__file__)" 2>&1 | tail -1
  /root/bin/py-spy --version
  nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
  lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA)" ; cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null
  # LR_GRAPHS=1: a --tp rank also captures its step as one CUDA graph and times its replays (`--cuda-graphs`, which
  # ssmprof refuses for --tp/--dp runs); nothing changes without it
  python3 - <<'EOF'
from pathlib import Path
p = Path("ssmprof/profiler/harness.py")
s = p.read_text()
old = "    if parallel:\n"
assert old in s
p.write_text(s.replace(old, "    if parallel and not __import__('os').environ.get('LR_GRAPHS'):\n", 1))
p = Path("ssmprof/profiler/distributed.py")
s = p.read_text()
old = "find_syncs=capture is not None)"
assert old in s
p.write_text(s.replace(old, "find_syncs=capture is not None,\n"
                       "                              cuda_graphs=job.mode == 'train' and bool(os.environ.get('LR_GRAPHS')))"))
EOF
  log "setup done"
}

prof() {  # prof NAME LIMIT_S [ssmprof profile args]: one unwatched profile, late-rank rows printed
  local name=$1 lim=$2
  shift 2
  local d=$W/$name
  mkdir -p "$d"
  log "profile $name: $*"
  (time timeout "$lim" ssmprof profile mamba2-lm --preset paper --counters none --out "$d/runs" --name run "$@") \
    >"$d/profile.log" 2>&1
  log "profile $name rc $?"
  [[ -f $d/runs/run/run.json ]] && late "$d/runs/run" | tee "$d/late.txt"
  tail -3 "$d/profile.log"
  tar czf "$RES/$name.tgz" -C "$W" "$name"
}

late() {  # late DIR: ssmprof's own late-rank row and per-rank busy/gaps for the run directory DIR
  python3 - "$1" <<'EOF'
import sys
from ssmprof.pipeline.loading import load_run
try:
    from ssmprof.analysis.step.ranks import late_rank, rank_busy
except ImportError:
    from ssmprof.analysis.ranks import late_rank, rank_busy
run = load_run(sys.argv[1])
row = late_rank(run.kernels, run.info)
busy = rank_busy(run.kernels)
print(busy.round(2).to_csv(index=False))
print(row.drop(columns=["cause"], errors="ignore").round(2).to_csv(index=False))
print("steps", [round(t, 1) for t in run.info.harness.step_times_ms])
EOF
}

probe() {  # probe NAME NRANKS LIMIT_S [ssmprof profile args]: one watched profile, packed into $RES/NAME.tgz
  local name=$1 n=$2 lim=$3
  shift 3
  local d=$W/$name
  mkdir -p "$d/site"
  $WATCH watch "$d/watch" --ranks "$n" --py-spy /root/bin/py-spy --window-s 8 --delay-s 2 --gil-s 3 \
    --wait-s "$lim" &
  local wpid=$!
  log "profile $name: $*"
  (time LR_PROBE=1 LR_DIR="$d/site" PYTHONPATH="$LR/lrsite" timeout "$lim" ssmprof profile mamba2-lm --preset paper \
    --counters none --keep-report --out "$d/runs" --name run "$@") >"$d/profile.log" 2>&1
  log "profile $name rc $? ($(grep real "$d/profile.log"))"
  for _ in $(seq 60); do kill -0 $wpid 2>/dev/null || break; sleep 1; done
  kill $wpid 2>/dev/null
  cat "$d/watch/watch.log" 2>/dev/null | cut -c1-300
  if [[ -f $d/runs/run/run.json ]]; then
    late "$d/runs/run" >"$d/late.txt" 2>&1
    cat "$d/late.txt"
    $WATCH traces "$d/runs/run" >"$d/traces.csv" 2>&1
    python3 -c "import csv,sys; [print({k: v for k, v in r.items() if v}) for r in csv.DictReader(open(sys.argv[1])) if r['what'] in ('gaps',) or r['what'].startswith('thread')]" "$d/traces.csv" | cut -c1-420
  fi
  $WATCH pyspy "$d/watch" >"$d/pyspy-summary.txt" 2>&1
  grep -A8 "pyspy-rank" "$d/pyspy-summary.txt" | cut -c1-200 | head -60
  tail -5 "$d/profile.log"
  # the detail traces (host ops, shapes) stay here: too large to send back; their summary is in traces.csv
  tar czf "$RES/$name.tgz" -C "$W" --exclude='trace-rank?.json.gz' "$name"
  if (($(stat -c %s "$RES/$name.tgz") > 15000000)); then  # $OUT brings back files of 16 MB at most
    tar czf "$RES/$name.tgz" -C "$W" --exclude='trace-rank*.json.gz' "$name"
  fi
  ls -la "$RES/$name.tgz"
}

abrun() {  # abrun NAME TP LIMIT_S ENV...: `ssmprof run` with extra environment (AB_ARGS: extra options), step times kept
  local name=$1 tp=$2 lim=$3
  shift 3
  local d=$W/ab
  mkdir -p "$d/site-$name"
  log "run $name (tp $tp) $*"
  (time env "$@" LR_PROBE=1 LR_DIR="$d/site-$name" PYTHONPATH="$LR/lrsite" timeout "$lim" ssmprof run mamba2-lm \
    --preset paper --tp "$tp" --steps "${AB_STEPS:-40}" ${AB_ARGS:-} --json "$d/$name.json") >"$d/$name.log" 2>&1
  python3 -c "
import json, statistics, sys
r = json.load(open(sys.argv[1]))
r = r.get('result', r)
line = [sys.argv[2]]
for key in ('step_times_ms', 'graphed_step_times_ms'):
    t = r.get(key)
    if t:
        q = statistics.quantiles(t, n=4)
        line.append(f'{key} median {statistics.median(t):.1f} p25 {q[0]:.1f} p75 {q[2]:.1f} min {min(t):.1f} max {max(t):.1f} n {len(t)}')
print(' | '.join(line))
" "$d/$name.json" "$name" 2>&1 | tail -1 | tee -a "$d/summary.txt"
  grep -iE "error|refus|Traceback" "$d/$name.log" | tail -3
}

setup
if [[ $PLAN == diag ]]; then
  probe tp4-a 4 260 --tp 4 --steps 120
  if [[ ! -s $W/tp4-a/watch/pyspy-rank0.txt ]]; then  # py-spy could not attach: sample from inside (sitecustomize)
    log "no py-spy record: LR_SAMPLE=1 from here on"
    export LR_SAMPLE=1
  fi
  if (($(left) > 120)); then probe tp4-b 4 $(($(left) - 60)) --tp 4 --steps 120; fi
  if (($(left) > 150)); then CUDA_VISIBLE_DEVICES=0,1 probe tp2-a 2 $(($(left) - 40)) --tp 2 --steps 120; fi
fi
if [[ $PLAN == ab ]]; then
  IFS=';' read -ra remedies <<<"${LR_AB:-}"
  for round in 1 2; do
    abrun "base-$round" 4 150
    for remedy in "${remedies[@]}"; do
      [[ -n $remedy ]] || continue
      (($(left) > 90)) || break
      abrun "${remedy%%=*}-$round" 4 150 ${remedy#*=}
    done
  done
  tar czf "$RES/ab.tgz" -C "$W" ab
  cat "$W/ab/summary.txt"
fi
if [[ $PLAN == confirm ]]; then
  export AB_STEPS=30
  abrun tp4-base 4 120
  abrun tp4-graphs 4 150 LR_GRAPHS=1
  (($(left) > 100)) && prof tp4-batch8 100 --tp 4 --batch-size 8 --steps 10
  (($(left) > 70)) && AB_ARGS="--seq-len 512" abrun tp4-seq512 4 80
  (($(left) > 90)) && AB_ARGS="--seq-len 512" abrun tp1-seq512 1 100
  (($(left) > 70)) && CUDA_VISIBLE_DEVICES=0,1 abrun tp2-base 2 80
  (($(left) > 80)) && CUDA_VISIBLE_DEVICES=0,1 abrun tp2-graphs 2 90 LR_GRAPHS=1
  (($(left) > 70)) && abrun tp4-graphs-2 4 80 LR_GRAPHS=1
  tar czf "$RES/confirm.tgz" -C "$W" ab
  cat "$W/ab/summary.txt"
fi
# compiled Triton kernels and autotuning for a later call (cubin + json only)
tar cf - -C "$LR" --exclude='*.llir' --exclude='*.ptx' --exclude='*.ttgir' --exclude='*.ttir' --exclude='*.source' \
  build/triton-cache 2>/dev/null | xz -T0 -6 >"$RES/triton-lr.tar.xz"
ls -la "$RES"
log "end"
