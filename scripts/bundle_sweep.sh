#!/usr/bin/env bash
# Bundle a sweep measured by `scripts/gpu_check.sh sweep-seq|sweep-chunk` into the package, beside the reference
# runs: ssmprof/reference/GPU/sweeps/NAME/ keeps sweep.json and each point's run.json + kernels.parquet (the data
# contract; no Nsight Compute reports, no CSVs or HTML, which `ssmprof report` makes again).
#   scripts/bundle_sweep.sh build/gpu-check/sweeps/seq_len h100-sxm
set -euo pipefail
source=${1:?sweep folder}; gpu=${2:?GPU folder: h100-sxm or h200}
target=ssmprof/reference/$gpu/sweeps/$(basename "$source")
[[ -f $source/sweep.json ]] || { echo "error: $source holds no sweep.json" >&2; exit 1; }
rm -rf "$target" && mkdir -p "$target"
cp "$source/sweep.json" "$target/"
for run in "$source"/*/run.json; do
  point=$(dirname "$run")
  mkdir -p "$target/$(basename "$point")"
  cp "$point/run.json" "$point/kernels.parquet" "$target/$(basename "$point")/"
done
echo "bundled: $target ($(du -sh "$target" | cut -f1)); then: .venv/bin/ssmprof results --readme README.md"
