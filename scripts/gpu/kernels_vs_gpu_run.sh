#!/bin/bash
# kernels_vs_gpu_run.sh — the GPU pattern estimators in one call on the GPU machine: build for sm_90, the GPU test
# against the CPU reference (bin/sparsering-gpu-test-vs), the 512K benchmark (bin/sparsering-bench-vs), the
# executor with vs-online on one GPU (checked against dense attention over the pattern it estimated), then
# compute-sanitizer memcheck on the test (MEMCHECK=1). NO_EXEC=1 leaves the executor out. Logs in $OUT. Run from the repository root (Open MPI from
# ../.gpu-exec-mpi when the machine has none, as scripts/gpu/exec_quick.sh).
set -o pipefail
OUT=${OUT:-/tmp/sr-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN SR_COMM_TIMEOUT=20
. scripts/gpu/mpi.sh  # MPIRUN, MAKE_MPI
[ ${#MAKE_MPI[@]} -eq 0 ] && MAKE_MPI=(CC=mpicc)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
make -j16 "${MAKE_MPI[@]}" CUDA_ARCH="-gencode=arch=compute_90a,code=sm_90a" bin/sparsering-gpu-test-vs \
  bin/sparsering-bench-vs $([ -z "$NO_EXEC" ] && echo bin/sparsering-exec) >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 150 ./bin/sparsering-gpu-test-vs 2>&1 | tee "$OUT/gpu_test_vs.log"
timeout 150 ./bin/sparsering-bench-vs "$@" 2>&1 | tee "$OUT/bench_vs.log"
if [ -z "$NO_EXEC" ]; then
sed 's/"gpus_per_node": 2/"gpus_per_node": 1/' models/clusters/h200-1x2.json >/tmp/h200-1x1.json
X="$MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec attn --backend cuda --cluster /tmp/h200-1x1.json"
timeout 60 $X --model tiny-25m --seq 2048 --layout striped:128 --schedule ring --pattern vs-online:0.9,vs-topp:0.9 \
  --check 2>&1 | grep -v "^\s*$" | tee "$OUT/exec_check.log"
timeout 60 $X --model qwen2.5-3b --seq 128K --layout striped:128 --schedule ring --pattern vs-online:0.9,vs-topp:0.9 \
  --repeat 3 2>&1 | grep -E "layer 0|^attn|rror" | tee "$OUT/exec_time.log"
fi
[ -n "$MEMCHECK" ] && timeout 100 compute-sanitizer --tool memcheck ./bin/sparsering-gpu-test-vs >"$OUT/memcheck.log" 2>&1
[ -n "$MEMCHECK" ] && echo "compute-sanitizer memcheck: exit $? / $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
