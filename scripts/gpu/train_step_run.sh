#!/bin/bash
# train_step_run.sh — the trainer's step on ONE GPU (kind nvidia-h200 or nvidia-h100-x1), in one call, for issue 22:
#   check  the fused kernels against their CPU references and the GPU model against the CPU model, with bf16 and
#          TF32 GEMMs, full and selective recomputation against none (train-gpu-check, tiny-25m)           ~1 min
#   attn   tile indices built on the GPU against the host's: `attn --check` of vs-topp and the budget mix at 2000
#          tokens with --index-build gpu and cpu (float64 reference), then the set-up time of 4 Qwen2.5-3B layers
#          at 64K with each                                                                                   ~3 min
#   train  Qwen2.5-3B shape, 3 steps each, --predict: dense-ring 32K with selective recomputation and with
#          --recompute-attn; vs-topp:0.95 at 64K with every plan kept, and with 4 kept and 4 built ahead
#          (plan waits on the step lines)                                                                   ~6 min
# Each stage has its own time limit (CHECK_S, ATTN_S, TRAIN_S); logs in $OUT/logs, the summary last.
#
# Run from the repository root: bash scripts/gpu/train_step_run.sh [STAGES]   (default: check attn train)
set -o pipefail
OUT=${OUT:-/tmp/sr-step-out}
W="$OUT/logs"
STAGES=${1:-check attn train}
. scripts/gpu/train_common.sh  # S, log, X, CL1 (one-GPU cluster), Open MPI
CLP="$W/h200-1x1-train.json"  # for --predict: our kernels' measured attention efficiencies
sed -e 's/"gpus_per_node": 2/"gpus_per_node": 1/' models/clusters/h200-1x2-bench.json >"$CLP"

# one command: NAME, time limit, then the command; the summary keeps the lines that matter
run() {
  local name=$1 lim=$2
  shift 2
  timeout "$lim" "$@" >"$W/$name.log" 2>&1
  local rc=$?
  echo "exit $rc" >>"$W/$name.log"
  { echo "-- $name (exit $rc): ${*:2}";
    grep -E "^  (kernel|loss|gradients|recomputation|AdamW|device|check layer|layer [0-9]+: set up)|^train: .*(memory|plans|plan waits|recompute|GEMMs)|^predict|^attn |rror|FAIL|failed" "$W/$name.log";
    grep -E "^step" "$W/$name.log" | tail -2; } >>"$S"
}

if [[ $STAGES == *check* ]]; then
  log "(1) fused kernels vs CPU references, GPU model vs CPU model, recomputation modes (tiny-25m, 128 tokens)"
  for p in bf16 tf32; do run check-$p ${CHECK_S:-60} $X train-gpu-check --model tiny-25m --seq 128 --precision $p --time-steps 0; done
fi

if [[ $STAGES == *attn* ]]; then
  log "(2) tile indices built on the GPU vs on the host: checks at 2000 tokens, then 4 Qwen2.5-3B layers at 64K"
  for where in gpu cpu; do
    run attn-check-$where ${ATTN_S:-60} $X attn --backend cuda --cluster "$CL1" --model qwen2.5-3b --strategy mtraining \
      --pattern vs-topp:0.9,vs-preset:qwen2.5-3b --seq 2000 --layers 2 --check --index-build $where
  done
  for where in gpu cpu; do
    run attn-64k-$where ${ATTN_S:-120} $X attn --backend cuda --cluster "$CL1" --model qwen2.5-3b --strategy mtraining \
      --pattern vs-topp:0.95 --seq 64K --layers 4 --index-build $where
  done
fi

if [[ $STAGES == *train* ]]; then
  log "(3) Qwen2.5-3B shape: recomputation (dense 32K) and plan waits (vs-topp:0.95 64K), 3 steps each, --predict"
  T=(--backend cuda --model qwen2.5-3b --cluster "$CLP" --steps 3 --loss all --predict)
  run q3b-dense-32k-selective ${TRAIN_S:-120} $X train "${T[@]}" --strategy dense-ring --seq 32K --csv "$W/dense-sel.csv"
  run q3b-dense-32k-full ${TRAIN_S:-120} $X train "${T[@]}" --strategy dense-ring --seq 32K --recompute-attn --csv "$W/dense-full.csv"
  run q3b-topp-64k-kept ${TRAIN_S:-150} $X train "${T[@]}" --strategy mtraining --pattern vs-topp:0.95 --seq 64K \
    --csv "$W/topp-kept.csv"
  run q3b-topp-64k-c4-ahead ${TRAIN_S:-150} $X train "${T[@]}" --strategy mtraining --pattern vs-topp:0.95 --seq 64K \
    --attn-cache 4 --attn-prefetch 4 --csv "$W/topp-c4.csv"
fi
log "done"
tail -n +1 "$S" | tail -60
