#!/bin/bash
# gpu_run.sh — everything kernels/ needs from one call on the GPU machine: build for sm_90, the GPU
# test (all kernels vs the CPU reference), compute-sanitizer memcheck and racecheck on the small
# cases, the benchmark with its dumps, and the torch peers with the independent check. Logs in $OUT.
# Run from the repository root: bash kernels/bench/gpu_run.sh [quick]
set -o pipefail
OUT=${OUT:-/tmp/sr-out}
mkdir -p "$OUT" /tmp/sr-dump
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
CC=$(command -v mpicc || echo gcc)
make -j16 CC="$CC" CUDA_ARCH="-gencode=arch=compute_90,code=sm_90" NVCC_FLAGS="-Xptxas -v" \
  bin/sparsering-gpu-test bin/sparsering-bench-attn >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
grep -E "Compiling entry|Used|spill" "$OUT/build.log" | grep -B1 -A1 "sa_" | head -40 >"$OUT/ptxas.txt"
# SASS per kernel: tensor-core instructions, ldmatrix, local-memory traffic (spills).
for o in build/release/kernels/sparse_attn_fwd.cu.o build/release/kernels/sparse_attn_bwd.cu.o; do
  cuobjdump --dump-sass "$o" | awk '/Function :/{f=$3} /HMMA/{h[f]++} /LDSM/{s[f]++} /LDL|STL/{l[f]++}
    END{for (k in h) printf "%s HMMA %d LDSM %d LDL/STL %d\n", k, h[k], s[k], l[k]+0}'
done | tee "$OUT/sass.txt"
./bin/sparsering-gpu-test 2>&1 | tee "$OUT/gpu_test.log"
for tool in memcheck racecheck; do
  timeout 240 compute-sanitizer --tool $tool ./bin/sparsering-gpu-test --small >"$OUT/$tool.log" 2>&1
  echo "compute-sanitizer $tool: exit $? / $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1)"
done
[ "$1" = quick ] && Q=--quick
./bin/sparsering-bench-attn $Q --dump /tmp/sr-dump 2>&1 | tee "$OUT/bench.log"
timeout 400 python3 kernels/bench/peers.py $Q --check /tmp/sr-dump 2>&1 | tee "$OUT/peers.log"
