#!/bin/bash
# kernels_vs_frac_run.sh — estimation + conversion at 512K as a fraction of the sparse forward, on one GPU, in one call:
# the GPU test of the estimators against the CPU reference (bin/sparsering-gpu-test-vs), pass 1 before / after a
# change (BEFORE=path of a bench binary built before it; estimation only, random inputs), then the whole and
# shard rows for the executor's planted vs inputs (top-p 0.9 and 0.95) and for the bench's random inputs (0.9).
# BEFORE may name several binaries (DIR/sparsering-bench-vs ...): each logs as bench_vs_pass1_DIR.log.
# Binaries prebuilt (make bin/sparsering-gpu-test-vs bin/sparsering-bench-vs, unless BUILD=1). Logs in $OUT.
# Run from the repository root.
set -o pipefail
OUT=${OUT:-/tmp/sr-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
if [ -n "$BUILD" ]; then
  make -j16 CUDA_ARCH="-gencode=arch=compute_90a,code=sm_90a" bin/sparsering-gpu-test-vs bin/sparsering-bench-vs \
    >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
fi
timeout 120 ./bin/sparsering-gpu-test-vs 2>&1 | tee "$OUT/gpu_test_vs.log"
grep -q "^gpu-test-vs: 0 failed" "$OUT/gpu_test_vs.log" || { echo "GPU test failed: no benchmark"; exit 1; }
if [ -n "$BEFORE" ]; then
  for b in $BEFORE; do timeout 60 "$b" --p 0.9 --est-only 2>&1 | tee "$OUT/bench_vs_pass1_$(basename "$(dirname "$b")").log"; done
  timeout 60 ./bin/sparsering-bench-vs --p 0.9 --est-only 2>&1 | tee "$OUT/bench_vs_pass1_after.log"
fi
timeout 150 ./bin/sparsering-bench-vs --inputs vs --p 0.9,0.95 2>&1 | tee "$OUT/bench_vs_inputs_vs.log"
timeout 150 ./bin/sparsering-bench-vs --inputs random --p 0.9 2>&1 | tee "$OUT/bench_vs_inputs_random.log"
echo "== summary (ms)"
for f in "$OUT"/bench_vs_pass1_*.log "$OUT"/bench_vs_inputs_*.log; do
  [ -f "$f" ] && grep -E "^(whole|shard) " "$f" | sed "s/^/$(basename "$f" .log | sed 's/bench_vs_//') /"
done
grep -E "failed" "$OUT/gpu_test_vs.log" | tail -1
