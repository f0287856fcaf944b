#!/usr/bin/env bash
# `make gpu-check`: everything the GPU host has to show, logs and JSON under build/gpu-check, a table last.
# One device call is limited to 10 minutes and the kernel build takes about 8 of them, so the work
# comes in stages that a warm host chains (build outputs stay in ./build, which is ignored):
#   scripts/gpu_check.sh build   install from ./wheelhouse and build the kernels; meanwhile the idle GPU
#                                runs what needs no extension (transformer baseline and its sequence
#                                sweep; mamba2-lm on the fallback path, which warms the Triton cache);
#                                then fused-vs-reference layer tests
#   scripts/gpu_check.sh runs    mamba2-lm vs MambaLMHeadModel benchmark, the workloads that need the
#                                extensions, the Mamba-2 half of the sweep, summary table
#   scripts/gpu_check.sh extra   paper presets of the selective-scan workloads, a real OOM
#   scripts/gpu_check.sh profiler calibrate, a profile with counters (the tests/data fixture), the CLI
#                                GPU tests (run, profile, calibrate), the suite at small presets
#   scripts/gpu_check.sh         all of them
set -uo pipefail
# Everything goes to build/gpu-check (kept while the host stays warm); on the lent device host, where
# $OUT brings files back but only a few, each stage ends by packing that folder into one archive there.
LOGS=build/gpu-check
mkdir -p "$LOGS"
pack() { [[ -n ${OUT:-} && $OUT != "$LOGS" ]] && tar czf "$OUT/gpu-check-$stage.tgz" -C build gpu-check; }
trap pack EXIT
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR="$PWD/build/triton-cache"
stage=${1:-all}
BIN=.venv/bin
LENGTHS=1024,4096,16384
log() { echo "[$(date +%T)] $*"; }
ssmrun() {  # ssmrun WORKLOAD PRESET [extra args]: one run, JSON + log kept
  local name=$1 preset=$2
  shift 2
  log "ssmprof run $name --preset $preset $*"
  $BIN/ssmprof run "$name" --preset "$preset" --json "$LOGS/run-$name-$preset.json" "$@" 2>&1 \
    | tee -a "$LOGS/runs.log" | grep -E "step time|throughput|peak|error" || true
}

if [[ $stage == build || $stage == all ]]; then
  # The kernel build is the long pole: start it with the host interpreter while `make install` runs;
  # `make kernels` afterwards only finds the finished build and puts it on the venv's import path.
  log "kernel build (background) + install"
  (time PYTHONPATH="$PWD" python3 -m ssmprof.kernel_build) >"$LOGS/kernels.log" 2>&1 &
  kernels_pid=$!
  make install WHEELHOUSE=wheelhouse EXTRAS= >"$LOGS/install.log" 2>&1 || { tail -40 "$LOGS/install.log"; exit 1; }
  $BIN/ssmprof run mamba2-lm --preset small --allow-fallback --steps 5 \
    --json "$LOGS/fallback-mamba2-lm-small.json" >>"$LOGS/fallback.log" 2>&1 || log "fallback run failed"
  ssmrun transformer small
  ssmrun transformer paper
  log "sequence sweep, transformer half"
  $BIN/python benchmarks/seq_sweep.py --models transformer --lengths $LENGTHS --json "$LOGS/sweep-transformer.json" \
    >"$LOGS/sweep-transformer.log" 2>&1 || tail -5 "$LOGS/sweep-transformer.log"
  wait $kernels_pid
  kernels_rc=$?
  tail -4 "$LOGS/kernels.log"
  [[ $kernels_rc == 0 ]] || exit 1
  make kernels
  log "GPU layer tests (fused vs reference)"
  $BIN/python -m pytest -q -p no:warnings tests/test_layers_gpu.py -k "300 or mamba1 or norm or attention" 2>&1 \
    | tee "$LOGS/gpu-layer-tests.log" | tail -4
fi

if [[ $stage == runs || $stage == all ]]; then
  log "benchmark: mamba2-lm vs MambaLMHeadModel"
  $BIN/python benchmarks/bench_lm_vs_mamba_ssm.py --preset small --rounds 8 --json "$LOGS/bench-small.json" 2>&1 \
    | tee "$LOGS/bench.log" | tail -5
  for name in mamba1-lm mamba-vision graph-mamba; do ssmrun $name small; done
  log "sequence sweep, Mamba-2 half"
  $BIN/python benchmarks/seq_sweep.py --models mamba2-lm --lengths $LENGTHS --merge "$LOGS/sweep-transformer.json" \
    --json "$LOGS/sweep.json" 2>&1 | tee "$LOGS/sweep.log" | tail -9
  $BIN/python scripts/summarize_runs.py "$LOGS"
fi

if [[ $stage == extra || $stage == all ]]; then
  for name in mamba1-lm mamba-vision graph-mamba; do ssmrun $name paper; done
  log "out of memory, on purpose"
  $BIN/ssmprof run mamba2-lm --preset paper --batch-size 256 --steps 1 --warmup 0 2>&1 | tail -3
  echo "exit code $?"
  $BIN/python scripts/summarize_runs.py "$LOGS"
fi

if [[ $stage == profiler || $stage == all ]]; then
  log "calibrate"
  $BIN/ssmprof calibrate --out "$LOGS/device-profile.json" --keep-report "$LOGS/calibrate.ncu-rep" 2>&1 | tail -14
  log "profile (timeline + sampled ncu counters) into a run directory"
  # Also the fixture for tests/data (parquet + run.json, no .ncu-rep).
  $BIN/ssmprof profile mamba2-lm --preset small --out "$LOGS/runs" 2>&1 | tail -2
  $BIN/python -c "import json,glob; d=json.load(open(sorted(glob.glob('$LOGS/runs/*/run.json'))[-1])); \
print(d['coverage'], d['collectors'])"
  $BIN/python -m pytest -q -p no:warnings tests/test_run_gpu.py 2>&1 | tee "$LOGS/gpu-run-tests.log" | tail -4
  log "suite (small presets, sampled counters)"
  (time $BIN/ssmprof suite --preset small --out "$LOGS/suite") 2>&1 | tail -4
fi
