#!/bin/bash
# train_gpu_run.sh — the trainer's measurements on the GPU machine (2 x H200), in one call: build,
# GPU model vs CPU model (train-gpu-check), then `train --backend cuda` on 2 GPUs, dense ring vs
# MTraining, a few steps each. Every stage has its own time limit; logs under $OUT, table last.
# Run from the repository root: bash exec/train_gpu_run.sh
set -o pipefail
OUT=${OUT:-/tmp/sr-train-out}
W=/tmp/sr-train-logs
mkdir -p "$OUT" "$W"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$W/gpu.txt" 2>&1
MAKE_MPI=()
MPIRUN=mpirun
if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
  M=/tmp/mpi/usr
  if [ ! -x $M/bin/orterun ]; then for f in ../.gpu-exec-mpi/*.deb; do dpkg -x "$f" /tmp/mpi; done; fi
  export OPAL_PREFIX=$M PATH=$M/bin:$PATH
  export LD_LIBRARY_PATH=$M/lib/x86_64-linux-gnu:$M/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  MAKE_MPI=(CC="gcc -I$M/lib/x86_64-linux-gnu/openmpi/include"
            LDLIBS="-lcjson -lgsl -lgslcblas -lm -lpthread -L$M/lib/x86_64-linux-gnu/openmpi/lib -lmpi")
  MPIRUN=$M/bin/orterun
fi
# the summary is written into $OUT as it grows, so a run cut short by its time limit still reports
S="$OUT/summary.txt"
log() { echo "== $*" | tee -a "$S"; }
t0=$(date +%s)
timeout 150 make -j32 "${MAKE_MPI[@]}" CUDA_ARCH="-gencode=arch=compute_90a,code=sm_90a" bin/sparsering-exec \
  >"$W/build.log" 2>&1 || { tail -30 "$W/build.log" | tee -a "$S"; exit 1; }
log "build $(( $(date +%s) - t0 ))s"
log "(1) GPU model vs CPU model (tiny-test, 256 tokens), then tiny-25m step time at 8K with naive attention"
timeout 40 bin/sparsering-exec train-gpu-check --model tiny-test --seq 256 --time-model tiny-25m --time-seq 8192 \
  --time-steps 3 2>&1 | tee -a "$S"
RUN="$MPIRUN --oversubscribe --bind-to none -np 2"
log "(2) train --backend cuda, tiny-25m, 2 x H200, 32K tokens, passkey data, 4 steps: dense ring vs MTraining"
for st in dense-ring mtraining; do
  P=(); [ $st = mtraining ] && P=(--pattern vs-topp:0.95)
  timeout 60 $RUN bin/sparsering-exec train --backend cuda --model tiny-25m --cluster h200-1x2 --strategy $st \
    "${P[@]}" --seq 32K --steps 4 --lr 1e-3 --data passkey --csv "$W/tiny25m-$st.csv" >"$W/tiny25m-$st.log" 2>&1
  echo "exit $?" >>"$W/tiny25m-$st.log"
  grep -E "^train:|^step|failed|exit" "$W/tiny25m-$st.log" | tee -a "$S"
done
log "(3) train --backend cuda, qwen2.5-3b shape (random init), 2 x H200, 128K tokens, 2 steps: dense ring vs MTraining"
for st in dense-ring mtraining; do
  P=(); [ $st = mtraining ] && P=(--pattern vs-topp:0.95)
  timeout 90 $RUN bin/sparsering-exec train --backend cuda --model qwen2.5-3b --cluster h200-1x2 --strategy $st \
    "${P[@]}" --seq 128K --steps 2 --data passkey --csv "$W/qwen3b-$st.csv" >"$W/qwen3b-$st.log" 2>&1
  echo "exit $?" >>"$W/qwen3b-$st.log"
  grep -E "^train:|^step|failed|exit|error" "$W/qwen3b-$st.log" | tee -a "$S"
done
tar czf "$OUT/logs.tgz" -C "$W" . 2>/dev/null
echo "== table"
cat "$S"
