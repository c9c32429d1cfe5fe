#!/bin/bash
# exec_quick.sh — a short, streamed version of exec_run.sh for a small device budget: build (CUDA objects
# may be carried prebuilt), launcher check, correctness at 2K tokens, dense striped ring at 128K,
# MTraining vs dense ring at 256K, dense striped ring at 256K. Every step has its own timeout and
# prints as it goes, so whatever finishes is in the output.
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN SR_COMM_TIMEOUT=20
. scripts/gpu/mpi.sh  # MPIRUN, MAKE_MPI
t0=$(date +%s)
step() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
step build
make -j32 "${MAKE_MPI[@]}" CUDA_ARCH="-gencode=arch=compute_90a,code=sm_90a" bin/sparsering-exec >/tmp/build.log 2>&1 ||
  { tail -30 /tmp/build.log; exit 1; }
RUN="$MPIRUN --oversubscribe --bind-to none -np 2"
X="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster h200-1x2"
step launcher; timeout 20 $RUN hostname
step "(a) correctness, 2 GPUs, seq 2048, striped G=128 ring, dense and vs-topp:0.95, vs float64 dense on bf16 inputs"
timeout 45 $RUN $X --seq 2048 --layout striped:128 --schedule ring --pattern dense,vs-topp:0.95 --check --skip-empty-sends 2>&1 | grep -v "^\s*$"
step "(b) dense striped ring (striped G=1, ring) 128K"
timeout 40 $RUN $X --strategy striped-ring --seq 128K --repeat 3 2>&1 | grep -E "layer 0|^attn|failed|rror"
step "(c) 256K dense ring (contiguous) vs MTraining (striped G=128, double ring, vs-topp:0.95)"
for st in dense-ring mtraining; do
  timeout 50 $RUN $X --strategy $st --seq 256K --repeat 2 --skip-empty-sends 2>&1 | grep -E "layer 0|^attn|failed|rror"
done
step "(b) dense striped ring 256K"
timeout 50 $RUN $X --strategy striped-ring --seq 256K --repeat 2 2>&1 | grep -E "layer 0|^attn|failed|rror"
step done
