#!/usr/bin/env bash
# `make gpu-check`: everything the GPU host has to show, logs and JSON under build/gpu-check, a table last.
# One device call is limited to 10 minutes and the kernel build takes about 7 of them, so the work comes
# in stages. The `build` stage sends the built extensions and the Triton cache back ($OUT); carried back
# in build/carry/, they let any later stage start on a fresh host of the same architecture (sm_90: H100
# and H200) without rebuilding:
#   scripts/gpu_check.sh build     install and build the kernels; meanwhile the GPU checks the profiler on
#                                  what needs no extension (calibrate, a fallback-path profile); then the
#                                  fused mamba2-lm small profile (the tests/data fixture)
#   scripts/gpu_check.sh runs      mamba2-lm vs MambaLMHeadModel benchmark, the other workloads at small
#   scripts/gpu_check.sh profile   mamba2-lm profiles (small: the fixture; paper), the small iteration under a
#                                  naive `ncu --set full` (cost comparison), a real OOM
#   scripts/gpu_check.sh sweep-seq    `ssmprof sweep` of mamba2-lm, hybrid and transformer over sequence length
#   scripts/gpu_check.sh sweep-chunk  `ssmprof sweep` of mamba2-lm over d_state x chunk_size (SWEEP_COUNTERS=none:
#                                  step times only, a third of the time a point); each sweep stage
#                                  resumes the sweep an earlier call left unfinished (run it again until the
#                                  log says "0 pending"); bundle with scripts/bundle_sweep.sh
#   scripts/gpu_check.sh suite     `ssmprof suite --preset paper` (timed; the paper presets of every workload,
#                                  with counters; SUITE_WORKLOADS=a,b for a part; SUITE_TIMEOUT defaults to
#                                  what the call has left); sends the Triton cache back (triton-cache.tar.xz.*,
#                                  autotuning kept on a host of the same GPU)
#   scripts/gpu_check.sh regress   the gate's held-back set: reruns of mamba2-lm small and regressions planted
#                                  the way they happen (chunk size, autotuning cache, lost fusion, cuBLAS
#                                  workspace), each gated; bundle with scripts/bundle_regress.sh
#   scripts/gpu_check.sh oom       a real GPU out-of-memory: one line, exit 1
#   scripts/gpu_check.sh ncu-cost  what a profiled launch costs: replay passes per metric family (NCU_COST_ONLY=REGEX:
#                                  only the cuts it matches; with
#                                  NCU_COST_HOLDS=1 the wall time of 20 launches holding 0-45 GiB), ncu_pass_cost.py
#   scripts/gpu_check.sh ncu-rules  Nsight Compute's guided analysis (rule results) of the 14 SSD kernels of the H100
#                                  mamba2-lm paper iteration beside ssmprof's verdicts of the same launches,
#                                  scripts/ncu_rules.py (about 2-3 minutes after `restore`)
#   scripts/gpu_check.sh mimo-carry  (here, not on the host) TileLang's wheels packed for a later call: carry
#                                  build/carry-mimo on a warm host; restore installs them
#   scripts/gpu_check.sh next      Mamba-3 and Gated DeltaNet: the fused-vs-reference GPU tests (SISO Triton, MIMO
#                                  TileLang, fla), MIMO and the hybrid's ssm_layer=mamba3|gdn at small, then
#                                  `ssmprof suite --preset paper` of mamba3-lm, gdn-lm, gdn-hybrid with counters
#                                  (NEXT_WORKLOADS=a,b for a part), each run's provenance checked to be fused;
#                                  NEXT_PARTS=tests,small,suite picks parts (all of them take more than one call)
#   scripts/gpu_check.sh tp        (nvidia-h200-x2; TP=4 / TP=8 on -x4 / -x8) tensor parallelism: the TP model vs
#                                  the single-GPU model (gpu-marked tests, bf16), then mamba2-lm (counters on
#                                  rank 0), hybrid and mamba1-lm paper at --tp $TP (timeline only unless
#                                  TP_COUNTERS=sampled), one report with the communication sections;
#                                  TP_PARTS=numerics,profiles and TP_WORKLOADS=a,b pick parts
#   scripts/gpu_check.sh tp-claim  the claim and scaling: mamba2-lm vs mamba1-lm paper at --tp $TP without
#                                  sequence parallelism (all-reduces per layer), and the three single-GPU runs
set -uo pipefail
LOGS=build/gpu-check
mkdir -p "$LOGS"
stage=${1:-all}
pack() {  # on the lent device host $OUT brings back only a few files: one archive per stage
  [[ -n ${OUT:-} && $OUT != "$LOGS" ]] || return 0
  tar czf "$OUT/gpu-check-$stage.tgz" -C build gpu-check
  if [[ $stage == build ]]; then
    ls build/kernels/*/*/*.so >/dev/null 2>&1 && tar cf - build/kernels/*/*/*.so | xz -T0 -6 | split -b 15M - "$OUT/kernels.tar.xz."
    tar cf - build/triton-cache | xz -T0 -6 >"$OUT/triton-cache.tar.xz"
    ls -la "$OUT"
  fi
  if [[ ($stage == suite || $stage == sweep-* || $stage == next) && -d build/triton-cache ]]; then
    # compiled kernels and autotuning choices of the paper shapes (cold, they cost minutes a workload on a
    # fresh host), marked with the GPU that chose them; at most 5 parts of 15 MB, else none
    nvidia-smi --query-gpu=name --format=csv,noheader | head -1 >build/triton-cache/.gpu
    # a cache hit reads a kernel's .json and .cubin only (Triton 3.6's CompiledKernel): the IR and PTX beside them
    # are six times their size, room the 64 MiB transfer needs for the wheelhouse and the kernels
    tar cf - --exclude='*.llir' --exclude='*.ptx' --exclude='*.ttgir' --exclude='*.ttir' --exclude='*.source' \
      build/triton-cache | xz -T0 -9 | split -b 15M - "$OUT/triton-cache.tar.xz."
    if (( $(ls "$OUT"/triton-cache.tar.xz.* | wc -l) > 5 )); then rm -f "$OUT"/triton-cache.tar.xz.*; fi
  fi
}
trap pack EXIT
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR="$PWD/build/triton-cache"
BIN=.venv/bin
log() { echo "[$(date +%T)] $*"; }
# Seconds a stage may still spend before the device call's 600 s end, keeping PACK_MARGIN_S for sending the
# results and the Triton cache back (a suite cut by the call's end sent back neither, 2026-11-23). By default the
# margin follows the cache: `xz -9` packs up to 192 MB as one block, on one core, about 3 MB a second (61 MB: 20 s);
# a cache grown by fla's kernels was cut by the call's end with a fixed 45 s margin (2026-11-24).
pack_margin() { local mb; mb=$(du -sm build/triton-cache 2>/dev/null | cut -f1); echo $(( 30 + ${mb:-0} / 3 )); }
left_for_work() { echo $(( ${CALL_LIMIT_S:-595} - SECONDS - ${PACK_MARGIN_S:-$(pack_margin)} )); }
ssmrun() {  # ssmrun WORKLOAD PRESET [extra args]: one run, JSON + log kept
  local name=$1 preset=$2
  shift 2
  log "ssmprof run $name --preset $preset $*"
  $BIN/ssmprof run "$name" --preset "$preset" --json "$LOGS/run-$name-$preset.json" "$@" 2>&1 \
    | tee -a "$LOGS/runs.log" | grep -E "step time|throughput|peak|error" || true
}
profile() {  # profile LIMIT_S WORKLOAD [args]: one run directory under $LOGS/runs, coverage printed
  local limit=$1
  shift
  log "ssmprof profile $*"
  (time timeout "$limit" $BIN/ssmprof profile "$@" --out "$LOGS/runs") >>"$LOGS/profile.log" 2>&1
  echo "exit $?"; tail -3 "$LOGS/profile.log"
  $BIN/python -c "import json,glob,os; d=json.load(open(max(glob.glob('$LOGS/runs/*/run.json'), key=os.path.getmtime))); \
print(d['workload']['name'], d['workload']['preset'], d['coverage'], {k: round(v.get('wall_s', 0), 1) for k, v in d['collectors'].items()}); \
print('pass wall s', d['collectors']['counters'].get('pass_wall_s'), 'apart', [{k: round(v, 1) for k, v in p.items()} for p in d['collectors']['counters'].get('pass_seconds', [])], 'replay', d['collectors']['counters'].get('pass_replay'), 'stall checks', d.get('checks', {}).get('stalls'))"
}
restore() {  # a fresh host: install, and unpack what an earlier `build` stage sent back
  # The carried Triton cache first, and judged by its marker (.gpu, written when a suite sends it back), not by the
  # folder: a cache carried to the H100 went unused, the one sent back holding only that call's own kernels, so the
  # folder was there before the unpack (most likely made during `make install`, with TRITON_CACHE_DIR exported).
  if [[ ! -f build/triton-cache/.gpu ]] && ls build/carry/triton-cache.tar.xz* >/dev/null 2>&1; then
    cat build/carry/triton-cache.tar.xz* | xz -d | tar xf -
    log "unpacked the carried Triton cache: $(find build/triton-cache -type f | wc -l) files, from $(cat build/triton-cache/.gpu)"
    # autotuning choices belong to the GPU that made them: kept only on the same GPU
    if [[ "$(cat build/triton-cache/.gpu 2>/dev/null)" != "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" ]]; then
      find build/triton-cache -name '*.autotune.json' -delete
    fi
  fi
  if [[ ! -x $BIN/ssmprof ]]; then
    log "install"
    make install WHEELHOUSE=wheelhouse >"$LOGS/install.log" 2>&1 || { tail -40 "$LOGS/install.log"; exit 1; }
  fi
  if ! ls build/kernels/*/selective_scan_cuda/selective_scan_cuda.so >/dev/null 2>&1 && ls build/carry/kernels.tar.xz.* >/dev/null 2>&1; then
    log "unpack carried kernels"; cat build/carry/kernels.tar.xz.* | xz -d | tar xf -
  fi
  make kernels 2>&1 | tail -1
  # TileLang (Mamba-3 MIMO; Gated DeltaNet's backward on Hopper with Triton 3.6, fla #640): its wheels are 77 MB, too
  # big to travel beside the wheelhouse and the kernels in one 64 MiB transfer, so a later call on the warm host
  # brings them as the wheels' contents, xz-compressed (41 MB, `scripts/gpu_check.sh mimo-carry` makes
  # build/carry-mimo/), zipped back into wheels here
  if [[ -f build/carry-mimo/mimo.tar.xz ]] && ! $BIN/python -c "import tilelang" 2>/dev/null; then
    log "install TileLang from the carried wheels"
    rm -rf build/mimo-unpacked && mkdir -p build/mimo-unpacked wheelhouse-mimo
    xz -d <build/carry-mimo/mimo.tar.xz | tar xf - -C build/mimo-unpacked
    for wheel in build/mimo-unpacked/*.whl; do
      $BIN/python -c "import shutil, sys; shutil.make_archive(sys.argv[2], 'zip', sys.argv[1]); \
import os; os.rename(sys.argv[2] + '.zip', sys.argv[2])" "$wheel" "wheelhouse-mimo/$(basename "$wheel")"
    done
    $BIN/pip install -q --no-index --find-links wheelhouse --find-links wheelhouse-mimo --no-build-isolation -e ".[mimo]" \
      2>&1 | tail -3
    $BIN/python -c "import tilelang; print('tilelang', tilelang.__version__)" 2>&1 | tail -1
  fi
}

if [[ $stage == mimo-carry ]]; then  # here, not on the GPU host: the TileLang wheels' contents for a later call
  [[ -d wheelhouse-mimo ]] || make wheelhouse-mimo
  rm -rf build/mimo-unpacked build/carry-mimo && mkdir -p build/mimo-unpacked build/carry-mimo
  for wheel in wheelhouse-mimo/*.whl; do unzip -q "$wheel" -d "build/mimo-unpacked/$(basename "$wheel")"; done
  tar cf - -C build/mimo-unpacked . | xz -T0 -9 >build/carry-mimo/mimo.tar.xz
  ls -la build/carry-mimo
  exit 0
fi

if [[ $stage == build ]]; then
  # The kernel build is the long pole: start it with the host interpreter while `make install` runs.
  log "kernel build (background) + install"
  (time PYTHONPATH="$PWD" python3 -m ssmprof.kernel_build) >"$LOGS/kernels.log" 2>&1 &
  kernels_pid=$!
  make install WHEELHOUSE=wheelhouse >"$LOGS/install.log" 2>&1 || { tail -40 "$LOGS/install.log"; exit 1; }
  log "calibrate"
  timeout 200 $BIN/ssmprof calibrate --out "$LOGS/device-profile.json" --keep-report "$LOGS/calibrate.ncu-rep" 2>&1 \
    | tee "$LOGS/calibrate.log" | tail -16
  ls -la "$LOGS/calibrate.ncu-rep"
  profile 240 mamba2-lm --preset small --allow-fallback --steps 5
  wait $kernels_pid
  kernels_rc=$?
  tail -4 "$LOGS/kernels.log"
  [[ $kernels_rc == 0 ]] || exit 1
  make kernels
  profile 200 mamba2-lm --preset small
fi

if [[ $stage == tracing ]]; then  # issue #40: the traced iteration against the timed steps, every suite workload
  restore
  for name in ${TRACING_WORKLOADS:-mamba2-lm hybrid transformer mamba1-lm graph-mamba mamba-vision}; do
    profile "$(( $(left_for_work) > 60 ? $(left_for_work) : 60 ))" "$name" --preset paper --counters none --steps 10 \
      | head -1
  done
  $BIN/python benchmarks/bench_tracing.py "$LOGS/runs" | tee "$LOGS/tracing.md"
fi

if [[ $stage == runs || $stage == all ]]; then
  restore
  log "benchmark: mamba2-lm vs MambaLMHeadModel"
  $BIN/python benchmarks/bench_lm_vs_mamba_ssm.py --preset small --rounds 8 --json "$LOGS/bench-small.json" 2>&1 \
    | tee "$LOGS/bench.log" | tail -5
  for name in mamba1-lm mamba-vision graph-mamba; do ssmrun $name small; done
  $BIN/python scripts/summarize_runs.py "$LOGS"
fi

if [[ $stage == profile || $stage == all ]]; then
  restore
  profile 200 mamba2-lm --preset small
  profile 240 mamba2-lm --preset paper --steps 5
  log "naive: the same small iteration under ncu --set full (cost comparison, capped at 120 s)"
  (time timeout 120 ncu --profile-from-start off --nvtx --clock-control none --set full \
    --kernel-name 'regex:^(?!nccl)' --export build/full.ncu-rep --force-overwrite \
    $BIN/python -m ssmprof.profiler.ncu_child mamba2-lm small '{}' 3) >"$LOGS/ncu-full.log" 2>&1
  echo "exit $? kernels profiled: $(grep -c '==PROF== Profiling' "$LOGS/ncu-full.log")"; tail -4 "$LOGS/ncu-full.log"
fi

# Sweeps (issue #17): the regime maps, one per GPU kind, paper width. Costs from the bundled H100 runs'
# run.json: a paper step is 0.2 s (mamba2-lm 214 ms at 8192 tokens), warm-up + 5 timed steps + the timeline
# about 3 s once Triton's autotuning is paid; cold autotuning was 147 s for mamba2-lm (paid once per
# autotuning key in a sweep's process, and not at all with a carried Triton cache of the same GPU); sampled
# counters took 110 s (pass 1 70 s, of which ~20 s child start and warm-up; pass 2 39 s). `focus` counters
# (pass 1 on the SSM kernels and the 5 longest others, ~15 of ~150 configurations, no pass 2) are estimated
# at ~30 s a point. seq: 3 workloads x 5 lengths at batch 1 (2k..32k tokens a step: attention's cost per
# token grows 16x, the crossover falls inside; 32k x 14 layers fits 80 GB at batch 1) = 15 points x ~35 s
# ~ 9 min. chunk: d_state x chunk_size 3 x 3 at the preset's shape = 9 points x (~35 s + autotuning of each
# new (d_state, chunk) key, ~30 s from a warm compile cache) ~ 10 min. Either may need a second call:
# the stage resumes (the manifest is rewritten atomically after every point, so a sweep stopped by timeout
# is whole up to its last point).
sweep_stage() {  # sweep_stage NAME ARGS...: a sweep into $LOGS/sweeps/NAME, resumed where one is there
  local name=$1
  shift
  local folder="$LOGS/sweeps/$name"
  local resume=""
  [[ -f $folder/sweep.json ]] && resume=--resume
  log "ssmprof sweep $* $resume"
  (time timeout --signal=INT --kill-after=20 ${SWEEP_TIMEOUT:-530} $BIN/ssmprof sweep "$@" --out "$folder" $resume \
    ${SWEEP_COUNTERS:+--counters $SWEEP_COUNTERS}) \
    2>&1 | tee -a "$LOGS/sweep-$name.log" | grep -E "^\[|sweep of|written|real|error"
  $BIN/python -c "import json; m=json.load(open('$folder/sweep.json')); s=[p['status'].split(':')[0] for p in m['points']]; \
print('$name:', {k: s.count(k) for k in ('complete', 'failed', 'pending')}, round(m['wall_s']), 's')"
  [[ -f $folder/sweep-report.html ]] || $BIN/ssmprof report "$folder" -o "$folder/sweep-report.html" --csv "$folder/sweep-csv"
  $BIN/ssmprof report "$folder" --format md | head -30
}

if [[ $stage == sweep-seq ]]; then
  restore
  sweep_stage seq_len mamba2-lm hybrid transformer --preset paper --set batch_size=1 \
    --vary seq_len=2048,4096,8192,16384,32768
fi

if [[ $stage == sweep-chunk ]]; then
  restore
  sweep_stage d_state-chunk_size mamba2-lm --preset paper --vary d_state=64,128,256 --vary chunk_size=64,128,256
fi

if [[ $stage == suite || $stage == all ]]; then
  # SUITE_WORKLOADS picks a part of the suite. On the H200 (2026-11-23) a fresh host's call held mamba2-lm and the
  # hybrid (319 s, 97 s of it cold Triton autotuning), a warm host's the transformer, mamba1-lm and graph-mamba (327 s)
  restore
  log "suite --preset paper ${SUITE_WORKLOADS:+--workloads $SUITE_WORKLOADS}, sampled counters"
  (time timeout "${SUITE_TIMEOUT:-$(left_for_work)}" $BIN/ssmprof suite --preset paper --out "$LOGS/suite" \
    ${SUITE_WORKLOADS:+--workloads $SUITE_WORKLOADS}) \
    2>&1 | tee "$LOGS/suite.log" | grep -E "preset|suite of|real|error"
  for run in "$LOGS"/suite/*/run.json; do
    $BIN/python -c "import json; d=json.load(open('$run')); h=d['harness']; print(d['workload']['name'], \
round(h['step_ms'], 2), 'ms', round(h['throughput']), d['harness']['unit'], round(h['peak_memory_bytes'] / 2**30, 2), \
'GiB', {k: round(v.get('wall_s', 0)) for k, v in d['collectors'].items()}, 'host launch us', \
d['collectors']['harness'].get('host_launch_us'), d['provenance']); \
print('  passes', [{k: round(v, 1) for k, v in p.items()} for p in d['collectors']['counters'].get('pass_seconds', [])], \
'replay', d['collectors']['counters'].get('pass_replay'))"
  done
fi

if [[ $stage == regress || $stage == all ]]; then
  # Issue #13's held-back set: the gate's thresholds were chosen on the committed H200 reruns; here, on another
  # host, REGRESS_RERUNS clean reruns of mamba2-lm small (timeline; REGRESS_COUNTERS=sampled adds counters) and
  # regressions planted the way they happen, none by editing ssmprof: a worse chunk size (a config change), a
  # Triton autotuning choice that is not the best (an edited autotuning cache, as a stale or foreign cache would
  # hold), a lost fusion (causal-conv1d's extension unimportable, the torch conv behind --allow-fallback), and
  # cuBLAS without workspace (CUBLAS_WORKSPACE_CONFIG=:0:0, as deterministic-mode recipes set it). Reruns 1-4
  # make the baseline; every other run is gated with the default thresholds. Bundle: scripts/bundle_regress.sh.
  restore
  folder=$LOGS/regress
  rerun() {  # rerun LABEL [env and args]: one run directory under $folder/LABEL
    local label=$1
    shift
    log "regress: $label"
    env "$@" $BIN/ssmprof profile mamba2-lm --preset small --steps 5 --counters "${REGRESS_COUNTERS:-none}" \
      --out "$folder/$label" ${PLANT_ARGS:-} 2>&1 | tail -1
  }
  for i in $(seq 1 "${REGRESS_RERUNS:-8}"); do
    (( SECONDS < ${REGRESS_UNTIL:-9999} )) || break
    rerun "rerun-$i"
  done
  PLANT_ARGS="--set chunk_size=64" rerun planted-chunk64
  # the autotuning cache of the hottest forward SSD kernel, its timings edited so the median config wins
  rm -rf build/triton-cache-planted && cp -r build/triton-cache build/triton-cache-planted
  $BIN/python - build/triton-cache-planted <<'PY'
import json, pathlib, sys
for path in pathlib.Path(sys.argv[1]).rglob("_chunk_scan_fwd_kernel.autotune.json"):
    data = json.loads(path.read_text())
    timed = sorted((t[0] if isinstance(t, list) else t, i) for i, (_, t) in enumerate(data["configs_timings"])
                   if (t[0] if isinstance(t, list) else t) != float("inf"))
    best, median = timed[0], timed[len(timed) // 2]
    data["configs_timings"][median[1]][1] = [best[0] / 2] * 3 if isinstance(data["configs_timings"][median[1]][1], list) else best[0] / 2
    path.write_text(json.dumps(data))
    print(f"planted {path.name} key {data['key']}: config {median[1]} ({median[0] / best[0]:.2f}x the best's benchmark)")
PY
  rerun planted-autotune TRITON_CACHE_DIR="$PWD/build/triton-cache-planted"
  mkdir -p build/plant-unfused && echo 'raise ImportError("planted: the fused conv is withheld")' \
    >build/plant-unfused/causal_conv1d_cuda.py
  PLANT_ARGS="--allow-fallback" rerun planted-unfused-conv PYTHONPATH="$PWD/build/plant-unfused"
  rerun planted-cublas-no-workspace CUBLAS_WORKSPACE_CONFIG=:0:0
  runs() { ls -d "$folder"/$1/*/ 2>/dev/null; }
  $BIN/ssmprof baseline $(runs rerun-1) $(runs rerun-2) $(runs rerun-3) $(runs rerun-4) -o "$folder/baseline.json"
  for label in $(ls "$folder" | grep -vE '^(rerun-[1-4]|baseline.json|.*\.md)$'); do
    $BIN/ssmprof regress $(runs "$label") --baseline "$folder/baseline.json" --allow-different-config \
      --summary "$folder/$label.md" >/dev/null 2>&1
    echo "gate $label: exit $?; $(grep -m3 -iE 'fail|regress|config changed' "$folder/$label.md" | tr '\n' ' ' | cut -c1-300)"
  done
fi

if [[ $stage == next || $stage == all ]]; then
  # The SSMs trained now (issue #17 parts 3-4). Their kernels JIT-compile at first use (Triton autotuning of the
  # SISO and fla kernels, TileLang's nvcc build of MIMO): minutes on a fresh host, cached in build/ afterwards.
  # All of it does not fit one call (2026-11-23, H200: the GPU tests and MIMO small took 8 of its 10 minutes, MIMO
  # small 3.6 of them, 2 compiling and 5.1 s a step): NEXT_PARTS picks parts (tests, small, suite; default all of
  # them, in that order), each logged to a file and each cut at what the call has left.
  restore
  export TILELANG_CACHE_DIR="$PWD/build/tilelang-cache"
  parts=",${NEXT_PARTS:-tests,small,suite},"
  $BIN/ssmprof doctor 2>&1 | grep -Ei "tilelang|fla|mamba_ssm|triton" || true
  if [[ $parts == *,tests,* ]]; then
    log "GPU tests: Mamba-3 (SISO, MIMO) and fla's gated delta rule against our references"
    timeout "$(left_for_work)" $BIN/python -m pytest -q -m gpu tests/test_layers_gpu.py -k "mamba3 or fla" \
      >"$LOGS/next-tests.log" 2>&1
    tail -6 "$LOGS/next-tests.log"
  fi
  if [[ $parts == *,small,* ]]; then
    for variant in "mamba3-lm mimo=true" "hybrid ssm_layer=mamba3" "hybrid ssm_layer=gdn"; do
      set -- $variant
      log "ssmprof run $1 --preset small --set $2 (3 steps: MIMO takes seconds a step)"
      timeout "$(left_for_work)" $BIN/ssmprof run "$1" --preset small --set "$2" --steps 3 --warmup 1 \
        --json "$LOGS/next-run-$1-${2/=/-}.json" >>"$LOGS/runs.log" 2>&1
      grep -E "step time|error" "$LOGS/runs.log" | tail -2
    done
  fi
  if [[ $parts == *,suite,* ]]; then
    log "suite --preset paper of the new workloads, sampled counters"
    (time timeout "${SUITE_TIMEOUT:-$(left_for_work)}" $BIN/ssmprof suite --preset paper --out "$LOGS/next" \
      --workloads ${NEXT_WORKLOADS:-mamba3-lm,gdn-lm,gdn-hybrid}) >"$LOGS/next.log" 2>&1
    grep -E "preset|suite of|real|error" "$LOGS/next.log"
  fi
  # provenance: each run on its fused kernels (no torch-reference, no fallback), as run.json recorded it
  for run in "$LOGS"/next/*/run.json "$LOGS"/next-run-*.json; do
    [[ -f $run ]] || continue
    $BIN/python -c "import json, sys; d = json.load(open('$run')); p = d['provenance']; \
name = d['workload']['name'] if 'workload' in d and isinstance(d['workload'], dict) else d.get('workload'); \
bad = {op: impl for op, impl in p.items() if 'reference' in impl or 'fallback' in impl}; \
print('FUSED' if not bad else 'NOT FUSED', name, p); sys.exit(1 if bad else 0)" || echo "provenance check failed: $run"
  done
fi

if [[ $stage == calibrate || $stage == all ]]; then
  restore
  log "calibrate"
  $BIN/ssmprof calibrate --out "$LOGS/device-profile.json" --keep-report "$LOGS/calibrate.ncu-rep" 2>&1 | tail -8
fi

if [[ $stage == ncu-cost ]]; then
  # what a profiled launch costs: replay passes per metric family, and the price of the memory a process holds
  restore
  log "ncu pass cost"
  # the memory holds were measured (tests/data/ncu-pass-cost-h100): NCU_COST_HOLDS=1 measures them again
  timeout 300 $BIN/python scripts/ncu_pass_cost.py "$LOGS/ncu-pass-cost.json" ${NCU_COST_HOLDS:+--holds} 2>&1 \
    | tee "$LOGS/ncu-pass-cost.log"
fi

if [[ $stage == ncu-rules ]]; then
  restore
  log "ncu rules"
  timeout 540 $BIN/python scripts/ncu_rules.py "$LOGS/ncu-rules" 2>&1 | tee "$LOGS/ncu-rules.log"
fi

if [[ $stage == tp || $stage == tp-claim ]]; then
  TP=${TP:-2} TP_WORKLOADS=${TP_WORKLOADS:-mamba2-lm,hybrid,mamba1-lm}
  restore
  nvidia-smi topo -m | tee "$LOGS/topology.txt"
  tp_profile() {  # tp_profile LIMIT_S WORKLOAD [args]: one merged run under $LOGS/tp, its collective counts printed
    local limit=$(( $1 < $(left_for_work) ? $1 : $(left_for_work) )) name=$2
    shift 2
    (( limit > 20 )) || { log "skipped $name --tp $TP $*: the call has ${limit} s left"; return; }
    log "ssmprof profile $name --preset paper --tp $TP $* (at most $limit s)"
    (time timeout "$limit" $BIN/ssmprof profile "$name" --preset paper --tp "$TP" --steps 5 --out "$LOGS/tp" "$@") \
      >>"$LOGS/tp.log" 2>&1
    echo "exit $?"; tail -2 "$LOGS/tp.log"
    $BIN/python -c "import glob, os; from ssmprof.pipeline.loading import load_run; \
from ssmprof.analysis.step.communication import collective_counts, exposed_communication; \
r = load_run(max(glob.glob('$LOGS/tp/*/run.json'), key=os.path.getmtime).rsplit('/', 1)[0]); p = r.info.parallel; \
print(r.info.workload.name, 'tp', p.tp, 'sp', p.sequence_parallel, 'nccl', p.nccl_version, 'step_ms', \
round(r.info.harness.step_ms, 1), [round(x['step_ms'], 1) for x in p.ranks]); \
print(collective_counts(r.kernels, p.sequence_parallel).to_string()); print(exposed_communication(r.kernels).to_string())"
  }
fi

if [[ $stage == tp ]]; then
  env | grep -E "NCCL_NVLS|MULTICAST|NVSHMEM" | sort
  if [[ ,${TP_PARTS:-numerics,profiles}, == *,numerics,* ]]; then
    log "numerics: TP model vs single-GPU model (bf16, 2 layers)"
    timeout 200 $BIN/python -m pytest -q -rP tests/test_parallel.py -m gpu -k on_gpus 2>&1 | tee "$LOGS/tp-numerics.log" \
      | grep -E "rel_err|^ *[01] |passed|failed" | cut -c1-300
  fi
  if [[ ,${TP_PARTS:-numerics,profiles}, == *,profiles,* ]]; then
    for name in ${TP_WORKLOADS//,/ }; do
      # counters on rank 0 for mamba2-lm unless TP_COUNTERS says otherwise, timeline only for the others
      default=none; [[ $name == mamba2-lm ]] && default=sampled
      tp_profile 300 "$name" --counters "${TP_COUNTERS:-$default}"
    done
  fi
  $BIN/ssmprof report "$LOGS"/tp/*/ -o "$LOGS/tp-report.html" 2>&1 | tail -1
fi

if [[ $stage == tp-claim ]]; then
  for name in mamba2-lm mamba1-lm; do tp_profile 150 $name --counters none --no-sequence-parallel; done
  for name in mamba2-lm hybrid mamba1-lm; do
    log "single GPU: $name paper (scaling)"
    timeout 120 $BIN/ssmprof profile $name --preset paper --counters none --steps 5 --out "$LOGS/tp" 2>&1 | tail -1
  done
  if (( TP > 2 )); then  # the projection against a run it never saw: TP=2 (no SP, as the TP=$TP run just above)
    log "projection check: mamba2-lm TP=2 -> TP=$TP over NVLink 4"
    timeout 120 $BIN/ssmprof profile mamba2-lm --preset paper --tp 2 --counters none --steps 5 --no-sequence-parallel \
      --out "$LOGS/tp2" \
      2>&1 | tail -1
    $BIN/python -c "import glob; from ssmprof.pipeline.loading import load_run; from ssmprof.hardware import \
LINKS, links_frame; from ssmprof.analysis.step.communication import project_communication, projection_check; \
pick = lambda pattern: load_run(sorted(glob.glob(pattern))[-1]); \
two, n = pick('$LOGS/tp2/mamba2-lm-paper-tp2-*'), pick('$LOGS/tp/mamba2-lm-paper-tp$TP-2*'); \
print(projection_check(project_communication(two.kernels, links_frame(), [$TP]), n.kernels, LINKS['nvlink4'].name, \
$TP).to_string())"
  fi
  $BIN/ssmprof report "$LOGS"/tp/*/ -o "$LOGS/tp-claim-report.html" 2>&1 | tail -1
fi

if [[ $stage == oom || $stage == all ]]; then
  restore
  log "out of memory, on purpose (paper width, 48 layers)"
  $BIN/ssmprof run mamba2-lm --preset paper --layers 48 --steps 1 --warmup 0 2>&1 | tail -3
  echo "exit code ${PIPESTATUS[0]}"
fi
