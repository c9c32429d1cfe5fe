#!/bin/bash
# kernels_bwd_run.sh — the backward's own GPU call, lighter than kernels_run.sh: prebuilt binaries (no build), the
# GPU test with forward variant 0 and every backward variant, the benchmark without the forward
# variants and the 64K VS-like case (--fast), cuDNN SDPA in the same run (peers.py --cudnn), and
# compute-sanitizer memcheck / racecheck on the small cases. Logs in $OUT.
# check: instead, our default kernels' outputs and gradients (dense 16K, VS-like 64K) against torch
# (peers.py --check), then cuDNN at 16K.
# Run from the repository root on the GPU machine: bash scripts/gpu/kernels_bwd_run.sh [nosan | check]
set -o pipefail
OUT=${OUT:-/tmp/sr-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "$1" = check ]; then
  mkdir -p /tmp/sr-dump
  # The dumps' first run (dense 16K, default variants) under Nsight Compute when it is there: duration,
  # speed of light, pipes and warp stalls of the two wgmma backward kernels. Plain run otherwise.
  if command -v ncu >/dev/null && timeout 150 ncu -k regex:"sa_bwd_(dq|dkdv)_wg" -c 2 --section SpeedOfLight \
      --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats \
      ./bin/sparsering-bench-attn --dump-only /tmp/sr-dump >"$OUT/ncu.log" 2>&1; then
    echo "ncu: $(grep -c Duration "$OUT/ncu.log") kernels profiled"
  else
    echo "ncu: not run ($(tail -2 "$OUT/ncu.log" 2>/dev/null | tr '\n' ' '))"
    ./bin/sparsering-bench-attn --dump-only /tmp/sr-dump 2>&1 | tee "$OUT/dump.log"
  fi
  # SASS of the backward objects when they travel (sass/*.o, copied from build/release/kernels).
  for o in sass/*.o; do
    [ -f "$o" ] && cuobjdump --dump-sass "$o" >"$OUT/$(basename "$o" .o).sass" 2>&1
  done
  timeout 200 python3 kernels/bench/peers.py --check /tmp/sr-dump --cudnn --quick 2>&1 | tee "$OUT/peers_check.log"
  exit 0
fi
s=$(date +%s)
timeout 100 ./bin/sparsering-gpu-test --bwd 2>&1 | tee "$OUT/gpu_test.log"
echo "gpu-test: exit $?, $(($(date +%s) - s)) s"
s=$(date +%s)
timeout 110 ./bin/sparsering-bench-attn --fast 2>&1 | tee "$OUT/bench.log"
echo "bench: $(($(date +%s) - s)) s"
s=$(date +%s)
timeout 80 python3 kernels/bench/peers.py --cudnn 2>&1 | tee "$OUT/peers.log"
echo "peers: $(($(date +%s) - s)) s"
[ "$1" = nosan ] && exit 0
# racecheck with five backward variants did not finish in 45 s (2026-11-22, run 2 of the fused kernel).
for tool in memcheck racecheck; do
  s=$(date +%s)
  timeout 120 compute-sanitizer --tool $tool ./bin/sparsering-gpu-test --small --bwd >"$OUT/$tool.log" 2>&1
  echo "compute-sanitizer $tool: exit $? / $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1), $(($(date +%s) - s)) s"
done
