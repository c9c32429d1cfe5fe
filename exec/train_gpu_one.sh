#!/bin/bash
# train_gpu_one.sh — the trainer on ONE GPU (kind nvidia-h200), in one call: the GPU model against the CPU
# model, `train --backend cuda` against `--backend cpu`, passkey learnability at short length, the
# Qwen2.5-3B shape at a shorter length, and the passkey report run at 32K (curriculum: short, then long;
# dense attention and the MTraining pattern). Every stage has its own time limit; logs under $OUT
# (summary.txt, CSVs, a tarball), the summary last.
#
# Run from the repository root: bash exec/train_gpu_one.sh [STAGES]
#   STAGES: any of check qwen sweep pk32 (default: all, in that order). A prebuilt bin/sparsering-exec is used when its
#   libraries resolve on the machine; otherwise it is built here (nvcc, sm_90).
set -o pipefail
OUT=${OUT:-/tmp/sr-train1-out}
W=/tmp/sr-train1-logs
mkdir -p "$OUT" "$W/csv"
STAGES=${1:-check qwen sweep pk32}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
export NCCL_NVLS_ENABLE=0
S="$OUT/summary.txt"
t0=$(date +%s)
log() { echo "== [$(( $(date +%s) - t0 ))s] $*" | tee -a "$S"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$S"

# Open MPI: the machine's own, else the Debian packages carried in ../.gpu-exec-mpi (relocated).
MAKE_MPI=()
if ! command -v mpicc >/dev/null; then
  M=/tmp/mpi/usr
  [ -x $M/bin/orterun ] || for f in ../.gpu-exec-mpi/*.deb; do dpkg -x "$f" /tmp/mpi; done
  export OPAL_PREFIX=$M PATH=$M/bin:$PATH
  export LD_LIBRARY_PATH=$M/lib/x86_64-linux-gnu:$M/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  MAKE_MPI=(CC="gcc -I$M/lib/x86_64-linux-gnu/openmpi/include"
            LDLIBS="-lcjson -lgsl -lgslcblas -lm -lpthread -L$M/lib/x86_64-linux-gnu/openmpi/lib -lmpi")
fi
if [ -x bin/sparsering-exec ] && ! ldd bin/sparsering-exec | grep -q "not found" && bin/sparsering-exec train-gpu-check --bogus >/dev/null 2>&1; [ $? -eq 2 ]; then
  log "prebuilt bin/sparsering-exec"
else
  log "building"
  timeout 200 make -j16 "${MAKE_MPI[@]}" CUDA_ARCH="-gencode=arch=compute_90,code=sm_90" bin/sparsering-exec \
    >"$W/build.log" 2>&1 || { tail -30 "$W/build.log" | tee -a "$S"; exit 1; }
  log "built"
fi
X=bin/sparsering-exec
CL="$W/h200-1x1.json"  # h200-1x2 with one GPU: the plan's world must equal the job's one rank
sed 's/"gpus_per_node": 2/"gpus_per_node": 1/' models/clusters/h200-1x2.json >"$CL"
# for --predict: our kernels' measured attention efficiencies, GEMMs at TF32 (half the bf16 rate; see train_gpu_run.sh)
CLP="$W/h200-1x1-train.json"
sed -e 's/"gpus_per_node": 2/"gpus_per_node": 1/' -e 's/"gemm": 0.7,/"gemm": 0.35,/' models/clusters/h200-1x2-bench.json >"$CLP"
# one training run: NAME, timeout, then train's flags; the log keeps everything, the summary the essentials
run() {
  local name=$1 lim=$2
  shift 2
  timeout "$lim" $X train --cluster "$CL" --csv "$W/csv/train-$name.csv" --label "$name" "$@" >"$W/$name.log" 2>&1
  local rc=$?
  echo "exit $rc" >>"$W/$name.log"
  { echo "-- $name (exit $rc): $*"; grep -E "^train: .*(params|memory)|^eval|^predict|rror|failed" "$W/$name.log";
    grep -E "^step" "$W/$name.log" | tail -2; } | tee -a "$S"
}

if [[ $STAGES == *check* ]]; then
  log "(1) GPU model vs CPU model: tiny-test 256 tokens and tiny-25m 128 tokens (scattered positions), tiny-25m step time at 8K"
  timeout 60 $X train-gpu-check --model tiny-test --seq 256 --time-model tiny-25m --time-seq 8192 --time-steps 3 2>&1 | tee -a "$S"
  timeout 60 $X train-gpu-check --model tiny-25m --seq 128 --time-steps 0 2>&1 | tee -a "$S"
  log "(1b) train --backend cuda vs --backend cpu, tiny-test, 1K tokens of passkey (loss on every byte), 3 steps"
  for st in dense-ring mtraining; do
    P=(); [ $st = mtraining ] && P=(--pattern vs-topp:0.95)
    for be in cpu cuda; do
      run "tt-$st-$be" 30 --backend $be --model tiny-test --strategy $st "${P[@]}" --seq 1K --steps 3 --loss all --lr 1e-3
    done
  done
  log "(1c) tiny-25m on the GPU: 8K dense, 32K dense and MTraining (vs-topp:0.95), a few steps"
  run t25-dense-8k 40 --backend cuda --model tiny-25m --strategy dense-ring --seq 8K --steps 5 --loss all --lr 1e-3
  run t25-dense-32k 40 --backend cuda --model tiny-25m --strategy dense-ring --seq 32K --steps 3 --loss all --lr 1e-3
  run t25-mtr-32k 40 --backend cuda --model tiny-25m --strategy mtraining --pattern vs-topp:0.95 --seq 32K --steps 3 --loss all --lr 1e-3
fi

if [[ $STAGES == *qwen* ]]; then
  log "(3) Qwen2.5-3B shape (random init) on one GPU: 16K dense ring, 32K MTraining, 2 steps each"
  run q3b-dense-16k 90 --backend cuda --model qwen2.5-3b --strategy dense-ring --seq 16K --steps 2 --loss all --predict --cluster "$CLP"
  run q3b-mtr-32k 90 --backend cuda --model qwen2.5-3b --strategy mtraining --pattern vs-topp:0.95 --seq 32K --steps 2 \
    --loss all --predict --cluster "$CLP"
fi

if [[ $STAGES == *sweep* ]]; then
  log "(2) passkey at 256 tokens, the old recipe (loss on the 5 answer digits, one sample a step): exact match on 50 held-out samples"
  run pk-answer-b1 60 --backend cuda --model tiny-25m --strategy dense-ring --seq 256 --steps 600 --loss answer \
    --batch 1 --lr 1e-3 --warmup 30 --cosine --eval 50 --quiet
fi


if [[ $STAGES == *pk32* ]]; then
  log "(4) passkey at 32K, tiny-25m: 256 -> 2K -> 32K curriculum, then dense and MTraining (vs-topp:0.95) at 32K"
  CK=$W/ck
  run pk32-a-256 90 --backend cuda --model tiny-25m --strategy dense-ring --seq 256 --steps ${PK_S1:-600} --loss keys \
    --batch 8 --lr 1e-3 --warmup 30 --cosine --eval 50 --quiet --ckpt $CK-256
  run pk32-b-2k 90 --backend cuda --model tiny-25m --strategy dense-ring --seq 2K --steps ${PK_S2:-200} --loss keys \
    --batch 4 --lr 5e-4 --warmup 10 --cosine --eval 50 --quiet --init $CK-256/model.safetensors --ckpt $CK-2k
  for st in dense-ring mtraining; do
    P=(); [ $st = mtraining ] && P=(--pattern vs-topp:0.95)
    run pk32-c-$st 150 --backend cuda --model tiny-25m --strategy $st "${P[@]}" --seq 32K --steps ${PK_S3:-60} --loss keys \
      --batch 1 --lr 3e-4 --warmup 5 --cosine --eval 50 --init $CK-2k/model.safetensors
  done
fi
tar czf "$OUT/logs.tgz" -C "$W" --exclude 'ck*' . 2>/dev/null  # $OUT takes at most 8 files: one tarball
log "done"
echo "== table"
cat "$S"
