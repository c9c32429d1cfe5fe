#!/bin/bash
# train_precision.sh — bf16 against TF32 GEMMs on ONE GPU (kind nvidia-h200), in one call: the GPU
# model against the CPU model with each precision (train-gpu-check, tiny-25m), then
# `train` with each precision back to back: tiny-25m at 8K (12 steps: the loss must fall) and the
# Qwen2.5-3B shape at 32K (dense ring, random init, 2 steps), step time and MFU from the CSVs.
# Logs and CSVs in $OUT/logs/, the summary ($OUT/summary.txt) last.
#
# Run from the repository root: bash scripts/gpu/train_precision.sh
set -o pipefail
OUT=${OUT:-/tmp/sr-prec-out}
W="$OUT/logs"  # under $OUT: a call cut by its time limit still brings them back
. scripts/gpu/train_common.sh  # S, log, X, CL1 (one-GPU cluster), Open MPI
CL=$CL1

# one training run: NAME, time limit, then train's flags
run() {
  local name=$1 lim=$2
  shift 2
  timeout "$lim" $X train --cluster "$CL" --csv "$W/csv/$name.csv" --label "$name" --quiet "$@" >"$W/$name.log" 2>&1
  local rc=$?
  echo "exit $rc" >>"$W/$name.log"
  { echo "-- $name (exit $rc): $*"; grep -E "^train: .*(GEMMs|memory)|rror|failed" "$W/$name.log"; } >>"$S"
}
# CSV columns run,step,loss,grad_norm,lr,tokens_per_s,mfu,density,attn_s,gemm_s,comm_s,step_s: first and last
# loss, and the fastest step after the first with its tokens/s, MFU and attention / GEMM split
row() {
  awk -F, -v n="$1" 'NR == 2 {l1 = $3} NR > 1 {l = $3; s = $2}
    NR > 2 && (b == "" || $12 < b) {b = $12; tk = $6; mf = $7; at = $9; gm = $10}
    END {printf "| %-22s | %5.3f -> %5.3f (%d steps) | %8.3f s | %9.0f | %5.2f%% | %7.3f s | %7.3f s |\n",
         n, l1, l, s, b, tk, 100 * mf, at, gm}' "$W/csv/$1.csv"
}

log "(1) GPU model vs CPU model, each precision (naive fp32 attention on the GPU: only the GEMMs differ)"
for p in tf32 bf16; do
  timeout 30 $X train-gpu-check --model tiny-25m --seq 128 --precision $p --time-steps 0 2>&1 | tee -a "$S"
  echo "exit $?" | tee -a "$S"
done

log "(2) tiny-25m, 8K, dense ring, 12 steps, loss on every byte, lr 1e-3"
for p in tf32 bf16; do
  run t25-8k-$p 30 --backend cuda --precision $p --model tiny-25m --strategy dense-ring --seq 8K --steps 12 \
    --loss all --lr 1e-3
done
log "(3) Qwen2.5-3B shape, 32K, dense ring, 2 steps"
for p in tf32 bf16; do
  run q3b-32k-$p 70 --backend cuda --precision $p --model qwen2.5-3b --strategy dense-ring --seq 32K --steps 2 \
    --loss all
done

log "summary"
{ echo "| run | loss first -> last | best step | tok/s | MFU | attention | GEMM + rest |"
  echo "|---|---|---|---|---|---|---|"
  for r in t25-8k-tf32 t25-8k-bf16 q3b-32k-tf32 q3b-32k-bf16; do [ -s "$W/csv/$r.csv" ] && row $r; done; } | tee -a "$S"
cat "$S" | tail -12
