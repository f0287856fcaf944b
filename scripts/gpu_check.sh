#!/usr/bin/env bash
# `make gpu-check`: everything the GPU host has to show, in one script, logs and JSON under $OUT.
#   scripts/gpu_check.sh build     install from ./wheelhouse, build kernels (warming Triton meanwhile)
#   scripts/gpu_check.sh measure   GPU tests, runs of every workload/preset, benchmark, summary table
#   scripts/gpu_check.sh           both
# Build outputs stay in ./build (ignored), so a `measure` right after a `build` on the same warm host
# reuses the kernels and the Triton cache.
set -uo pipefail
OUT=${OUT:-build/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR="$PWD/build/triton-cache"
stage=${1:-all}
log() { echo "[$(date +%T)] $*"; }
BIN=.venv/bin

if [[ $stage == build || $stage == all ]]; then
  log "install"
  make install WHEELHOUSE=wheelhouse EXTRAS= >"$OUT/install.log" 2>&1 || { tail -40 "$OUT/install.log"; exit 1; }
  tail -16 "$OUT/install.log"
  log "make kernels (background) + Triton warm-up on the fallback path (same SSD kernels)"
  (time make kernels) >"$OUT/kernels.log" 2>&1 &
  kernels_pid=$!
  for preset in small paper; do
    $BIN/ssmprof run mamba2-lm --preset "$preset" --allow-fallback --steps 5 \
      --json "$OUT/fallback-mamba2-lm-$preset.json" >>"$OUT/fallback.log" 2>&1 || log "fallback $preset failed"
  done
  wait $kernels_pid
  kernels_rc=$?
  tail -5 "$OUT/kernels.log"
  ls -la build/kernels/*/*/*.so 2>/dev/null
  [[ $kernels_rc == 0 ]] || exit 1
fi

if [[ $stage == measure || $stage == all ]]; then
  $BIN/ssmprof doctor
  log "GPU tests"
  $BIN/python -m pytest -m gpu -q tests 2>&1 | tee "$OUT/gpu-tests.log" | tail -15
  for run in "mamba2-lm small" "hybrid small" "mamba2-lm paper" "hybrid paper"; do
    set -- $run
    log "ssmprof run $1 --preset $2"
    $BIN/ssmprof run "$1" --preset "$2" --json "$OUT/run-$1-$2.json" 2>&1 | tee -a "$OUT/runs.log" | tail -14
  done
  log "benchmark: mamba2-lm vs MambaLMHeadModel"
  $BIN/python benchmarks/bench_lm_vs_mamba_ssm.py --preset small --json "$OUT/bench-small.json" 2>&1 \
    | tee "$OUT/bench.log" | tail -8
  $BIN/python scripts/summarize_runs.py "$OUT"
fi
