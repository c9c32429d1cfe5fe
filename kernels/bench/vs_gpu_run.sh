#!/bin/bash
# vs_gpu_run.sh — the GPU pattern estimators in one call on the GPU machine: build for sm_90, the GPU test
# against the CPU reference (bin/sparsering-gpu-test-vs), the 512K benchmark (bin/sparsering-bench-vs),
# then compute-sanitizer memcheck on the test. Logs in $OUT. Run from the repository root.
set -o pipefail
OUT=${OUT:-/tmp/sr-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
CC=$(command -v mpicc || echo gcc)
time make -j16 CC="$CC" CUDA_ARCH="-gencode=arch=compute_90,code=sm_90" bin/sparsering-gpu-test-vs \
  bin/sparsering-bench-vs >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
timeout 150 ./bin/sparsering-gpu-test-vs 2>&1 | tee "$OUT/gpu_test_vs.log"
timeout 150 ./bin/sparsering-bench-vs "$@" 2>&1 | tee "$OUT/bench_vs.log"
timeout 100 compute-sanitizer --tool memcheck ./bin/sparsering-gpu-test-vs >"$OUT/memcheck.log" 2>&1
echo "compute-sanitizer memcheck: exit $? / $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
