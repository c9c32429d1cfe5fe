#!/bin/bash
# kernels_run.sh — everything kernels/ needs from one call on the GPU machine: build for sm_90, the GPU
# test (all kernels vs the CPU reference), compute-sanitizer memcheck and racecheck on the small
# cases, the benchmark with its dumps, and the torch peers with the independent check. Logs in $OUT.
# Run from the repository root: [PEERS=0] bash scripts/gpu/kernels_run.sh [quick]   (PEERS=0: no torch peers)
set -o pipefail
OUT=${OUT:-/tmp/sr-out}
mkdir -p "$OUT" /tmp/sr-dump
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
CC=$(command -v mpicc || echo gcc)
make -j16 CC="$CC" CUDA_ARCH="-gencode=arch=compute_90a,code=sm_90a" NVCC_FLAGS="-Xptxas -v" \
  bin/sparsering-gpu-test bin/sparsering-bench-attn >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
grep -E "Compiling entry|Used|spill" "$OUT/build.log" | grep -B1 -A1 "sa_" | head -40 >"$OUT/ptxas.txt"
# The wgmma products alone, exact (kernels/test/wgmma_check.cu).
nvcc -std=c++17 -I. -gencode=arch=compute_90a,code=sm_90a kernels/test/wgmma_check.cu -o bin/sparsering-wgmma-check \
  >>"$OUT/build.log" 2>&1 && ./bin/sparsering-wgmma-check | tee "$OUT/wgmma_check.log"
# SASS per kernel: tensor-core instructions (HGMMA: wgmma, HMMA: mma.sync), ldmatrix, local-memory traffic (spills).
for o in build/release/kernels/sparse_attn_fwd.cu.o build/release/kernels/sparse_attn_bwd.cu.o \
         build/release/kernels/sparse_attn_bwd_wg.cu.o; do
  cuobjdump --dump-sass "$o" | awk '/Function :/{f=$3} / HMMA/{h[f]++} /HGMMA/{w[f]++} /LDSM/{s[f]++} /LDL|STL/{l[f]++}
    END{for (k in h) printf "%s HMMA %d HGMMA %d LDSM %d LDL/STL %d\n", k, h[k], w[k]+0, s[k], l[k]+0;
        for (k in w) if (!(k in h)) printf "%s HGMMA %d LDL/STL %d\n", k, w[k], l[k]+0}'
done | tee "$OUT/sass.txt"
cuobjdump --dump-sass build/release/kernels/sparse_attn_fwd.cu.o >"$OUT/fwd.sass" 2>&1
./bin/sparsering-gpu-test 2>&1 | tee "$OUT/gpu_test.log"
for tool in memcheck racecheck; do
  timeout 240 compute-sanitizer --tool $tool ./bin/sparsering-gpu-test --small >"$OUT/$tool.log" 2>&1
  echo "compute-sanitizer $tool: exit $? / $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1)"
done
[ "$1" = quick ] && Q=--quick
./bin/sparsering-bench-attn $Q --dump /tmp/sr-dump 2>&1 | tee "$OUT/bench.log"
[ "${PEERS:-1}" = 0 ] || timeout 400 python3 kernels/bench/peers.py $Q --check /tmp/sr-dump 2>&1 | tee "$OUT/peers.log"
