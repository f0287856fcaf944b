#!/usr/bin/env bash
# Keep the held-back gate set measured by `scripts/gpu_check.sh regress` as a test fixture: each LABEL/<run>/ of
# the stage's folder becomes tests/data/regress-reruns-GPU/LABEL/ with run.json + kernels.parquet (the data
# contract), and the gate summaries the stage wrote beside them (LABEL.md).
#   scripts/bundle_regress.sh build/gpu-check/regress h100
set -euo pipefail
source=${1:?the regress stage folder}; gpu=${2:?GPU label, e.g. h100}
target=tests/data/regress-reruns-$gpu
[[ -f $source/baseline.json ]] || { echo "error: $source holds no baseline.json (run the regress stage)" >&2; exit 1; }
rm -rf "$target" && mkdir -p "$target"
for run in "$source"/*/*/run.json; do
  label=$(basename "$(dirname "$(dirname "$run")")")
  mkdir -p "$target/$label"
  cp "$(dirname "$run")/run.json" "$(dirname "$run")/kernels.parquet" "$target/$label/"
done
cp "$source"/*.md "$target/" 2>/dev/null || true
echo "bundled: $target ($(du -sh "$target" | cut -f1))"
