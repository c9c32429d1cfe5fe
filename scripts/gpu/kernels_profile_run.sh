#!/bin/bash
# kernels_profile_run.sh — Nsight Compute profiles of the default Hopper kernels (prebuilt
# bin/sparsering-bench-attn, sm_90a) on ONE GPU: one launch each of the warp-specialized backward on dense causal
# 16K and on the VS-like mask at 128K, and of the warp-specialized forward on the VS-like mask at 128K, with the
# full section set and per-instruction (SASS) stall samples. Writes, per kernel, the details page
# ($OUT/<name>.txt) and the SASS source page with its sampled stall reasons ($OUT/<name>-sass.csv.gz).
# Launch numbering follows bench-attn --fast --defaults: per case 13 forward-only launches, then 13 (forward, backward)
# pairs; cases dense 16K, dense 64K, VS-like 128K.
# Run from the repository root: bash scripts/gpu/kernels_profile_run.sh
set -o pipefail
OUT=${OUT:-/tmp/sr-prof-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
prof() {  # NAME KERNEL SKIP
  local s=$(date +%s)
  timeout 240 ncu --set full --import-source no -k "regex:$2" --launch-skip "$3" -c 1 -f -o "/tmp/$1" \
    ./bin/sparsering-bench-attn --fast --defaults >"$OUT/$1-run.log" 2>&1
  echo "$1: ncu exit $?, $(($(date +%s) - s)) s"
  ncu -i "/tmp/$1.ncu-rep" --page details >"$OUT/$1.txt" 2>&1
  ncu -i "/tmp/$1.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip >"$OUT/$1-sass.csv.gz"
  grep -E "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible" "$OUT/$1.txt" | head -12
}
prof bwd-dense16k sa_bwd_ws_kernel 3
prof bwd-vs128k sa_bwd_ws_kernel 29
prof fwd-vs128k sa_fwd_ws_kernel 55
