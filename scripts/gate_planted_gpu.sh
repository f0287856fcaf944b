#!/usr/bin/env bash
# The gate on regressions the committed fixtures do not plant (#34), on one GPU in about 5 minutes: three clean
# `mamba2-lm --preset small --counters none` runs make a baseline file and a history; then a fourth clean run,
# one with every launch synchronous (CUDA_LAUNCH_BLOCKING=1: the host slower, the kernels unchanged) and one
# beside a bf16 GEMM loop (scripts/gemm_loop.py) are each gated against the history's rolling baseline and the
# baseline file. Expected: the clean run passes; the synchronous one fails on step time / host wait; the one
# beside the GEMMs fails naming the shared GPU. Everything under the folder given (default $OUT, else
# runs/gate-planted): run directories, history/, baseline.json, per gated run its summary (.md), JUnit (.xml),
# Bencher metrics (.bmf.json) and exit code; gate-planted.txt last, the table.
#   scripts/gate_planted_gpu.sh [FOLDER]      (BIN: folder of the ssmprof and python commands, default .venv/bin)
set -uo pipefail
folder=${1:-${OUT:-runs/gate-planted}}
BIN=${BIN:-.venv/bin}
mkdir -p "$folder"
log() { echo "[$(date +%T)] $*"; }
profile() {  # profile LABEL [env]: one run directory, $folder/LABEL/<run>
  local label=$1
  shift
  log "profile $label"
  env "$@" "$BIN/ssmprof" profile mamba2-lm --preset small --steps 5 --counters none --out "$folder/$label" 2>&1 | tail -1
}
run_of() { ls -d "$folder/$1"/*/ | head -1; }
gate() {  # gate LABEL: against the history (rolling baseline of the clean runs) and against the baseline file
  local label=$1 run
  run=$(run_of "$label")
  "$BIN/ssmprof" regress "$run" --history "$folder/history" --last 3 --no-append --summary "$folder/$label.md" \
    --junit "$folder/$label.xml" --metrics "$folder/$label.bmf.json" >/dev/null 2>&1
  echo $? >"$folder/$label.exit"
  "$BIN/ssmprof" regress "$run" --baseline "$folder/baseline.json" --summary "$folder/$label.file.md" >/dev/null 2>&1
  echo $? >"$folder/$label.file.exit"
}
for i in 1 2 3; do
  profile "clean-$i"
done
"$BIN/ssmprof" history "$folder/history" --out "$folder" $(for i in 1 2 3; do echo --add "$(run_of clean-$i)"; done) | tail -2
"$BIN/ssmprof" baseline $(run_of clean-1) $(run_of clean-2) $(run_of clean-3) -o "$folder/baseline.json"
profile clean-4
profile launch-blocking CUDA_LAUNCH_BLOCKING=1
"$BIN/python" scripts/gemm_loop.py 150 &
gemm=$!
sleep 8  # the GEMM loop started and busy
profile shared-gpu
kill "$gemm" 2>/dev/null
wait "$gemm" 2>/dev/null
for label in clean-4 launch-blocking shared-gpu; do
  gate "$label"
done
{
  echo "| run | step ms | GPU shared | gate (history) | gate (baseline file) | failed checks (history) |"
  echo "|---|---|---|---|---|---|"
  for label in clean-1 clean-2 clean-3 clean-4 launch-blocking shared-gpu; do
    run=$(run_of "$label")
    facts=$("$BIN/python" -c "import json,sys; d=json.load(open(sys.argv[1])); s=d.get('gpu_sharing') or {}; \
print(round(d['harness']['step_ms'], 1), '|', s.get('shared'), s.get('max_other_processes'), s.get('sm_utilization_pct'))" \
      "$run/run.json")
    failed=$(grep -E '\| FAIL \|$' "$folder/$label.md" 2>/dev/null | cut -d'|' -f2,3,4 | tr '\n' ';' | cut -c1-300)
    echo "| $label | $facts | exit $(cat "$folder/$label.exit" 2>/dev/null || echo -) | exit $(cat "$folder/$label.file.exit" 2>/dev/null || echo -) | ${failed:-none} |"
  done
} | tee "$folder/gate-planted.txt"
