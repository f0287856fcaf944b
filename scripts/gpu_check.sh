#!/usr/bin/env bash
# `make gpu-check`: everything the GPU host has to show, logs and JSON under $OUT, a table last.
# One device call is limited to 10 minutes, so the work comes in stages that a warm host chains:
#   scripts/gpu_check.sh build      install from ./wheelhouse; build kernels; meanwhile warm Triton on
#                                   the fallback path and run the baselines that need no extension
#   scripts/gpu_check.sh tests      GPU tests, mamba2-lm vs MambaLMHeadModel benchmark, OOM check, Mamba-1
#   scripts/gpu_check.sh suite      vision + graph workloads, sequence sweep, summary table
#   scripts/gpu_check.sh            all three
# Build outputs stay in ./build (ignored), so later stages on the same warm host reuse kernels and the
# Triton cache.
set -uo pipefail
OUT=${OUT:-build/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR="$PWD/build/triton-cache"
stage=${1:-all}
BIN=.venv/bin
log() { echo "[$(date +%T)] $*"; }
ssmrun() {  # ssmrun WORKLOAD PRESET [extra args]: one run, JSON + log kept
  local name=$1 preset=$2
  shift 2
  log "ssmprof run $name --preset $preset $*"
  $BIN/ssmprof run "$name" --preset "$preset" --json "$OUT/run-$name-$preset.json" "$@" 2>&1 \
    | tee -a "$OUT/runs.log" | grep -E "step time|throughput|peak|error" || true
}

if [[ $stage == build || $stage == all ]]; then
  log "install"
  make install WHEELHOUSE=wheelhouse EXTRAS= >"$OUT/install.log" 2>&1 || { tail -40 "$OUT/install.log"; exit 1; }
  log "make kernels (background)"
  (time make kernels) >"$OUT/kernels.log" 2>&1 &
  kernels_pid=$!
  # The GPU is idle while nvcc runs: run what needs no extension (Triton SSD chain on the fallback
  # path warms the Triton cache for the fused runs; the transformer uses no Mamba extension).
  for preset in small paper; do
    $BIN/ssmprof run mamba2-lm --preset "$preset" --allow-fallback --steps 5 \
      --json "$OUT/fallback-mamba2-lm-$preset.json" >>"$OUT/fallback.log" 2>&1 || log "fallback $preset failed"
  done
  ssmrun transformer small
  ssmrun transformer paper
  wait $kernels_pid
  kernels_rc=$?
  tail -4 "$OUT/kernels.log"
  [[ $kernels_rc == 0 ]] || exit 1
fi

if [[ $stage == tests || $stage == all ]]; then
  $BIN/ssmprof doctor | grep -E "causal|selective|sdpa"
  log "GPU tests"
  $BIN/python -m pytest -m gpu -q -p no:warnings tests 2>&1 | tee "$OUT/gpu-tests.log" | tail -8
  log "benchmark: mamba2-lm vs MambaLMHeadModel"
  $BIN/python benchmarks/bench_lm_vs_mamba_ssm.py --preset small --json "$OUT/bench-small.json" 2>&1 \
    | tee "$OUT/bench.log" | tail -5
  $BIN/python benchmarks/bench_lm_vs_mamba_ssm.py --preset paper --layers 4 --rounds 6 \
    --json "$OUT/bench-paper4.json" 2>&1 | tee -a "$OUT/bench.log" | tail -5
  log "out of memory, on purpose"
  $BIN/ssmprof run mamba2-lm --preset paper --batch-size 256 --steps 1 --warmup 0 2>&1 | tail -3
  echo "exit code $?"
  ssmrun mamba1-lm small
  ssmrun mamba1-lm paper
fi

if [[ $stage == suite || $stage == all ]]; then
  for name in mamba-vision graph-mamba; do
    ssmrun $name small
    ssmrun $name paper
  done
  log "sequence sweep"
  $BIN/python benchmarks/seq_sweep.py --json "$OUT/seq-sweep.json" 2>&1 | tee "$OUT/seq-sweep.log" | tail -9
  $BIN/python scripts/summarize_runs.py "$OUT"
fi
