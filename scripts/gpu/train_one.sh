#!/bin/bash
# train_one.sh — the trainer on ONE GPU (kind nvidia-h200), in one call: the GPU model against the CPU
# model, runs repeated against the committed CSVs, the Qwen2.5-3B shape at 32K (memory and step time
# next to the simulator), and the passkey report run: packed short samples (512 tokens, 64 a step), then
# 4K, then 32K with dense attention, MTraining's synthetic pattern (vs-topp) and MTraining's online
# estimate (vs-online), each scored by exact match on held-out samples. Time limits: PK_*_S variables.
# Every stage has its own time limit; logs and CSVs in $OUT/logs.tgz, the summary last.
#
# Run from the repository root: bash scripts/gpu/train_one.sh [STAGES]
#   STAGES: any of verify qwen passkey (default: all, in that order), and fwdruns (not in the default: the
#   Qwen2.5-3B shape at 32K with MTraining's budget mix, the forward on the tile form and with --fwd-runs). A prebuilt bin/sparsering-exec is used
#   when it runs on the machine; otherwise it is built (nvcc, sm_90).
set -o pipefail
OUT=${OUT:-/tmp/sr-train1-out}
W=/tmp/sr-train1-logs
STAGES=${1:-verify qwen passkey}
. scripts/gpu/train_common.sh  # S, log, X, CL1 (one-GPU cluster), Open MPI
CL=$CL1
# for --predict: our kernels' measured attention efficiencies; GEMMs bf16 (--precision's default)
CLP="$W/h200-1x1-train.json"
sed -e 's/"gpus_per_node": 2/"gpus_per_node": 1/' models/clusters/h200-1x2-bench.json >"$CLP"
# one training run: NAME, time limit, then train's flags; the log keeps everything, the summary the essentials
run() {
  local name=$1 lim=$2
  shift 2
  timeout "$lim" $X train --cluster "$CL" --csv "$W/csv/train-$name.csv" --label "$name" "$@" >"$W/$name.log" 2>&1
  local rc=$?
  echo "exit $rc" >>"$W/$name.log"
  { echo "-- $name (exit $rc): $*"; grep -E "^train: .*(params|memory|plans|online)|^eval|^predict|rror|failed" "$W/$name.log";
    grep -E "^step" "$W/$name.log" | tail -2; } >>"$S"
}
# largest relative difference of the loss columns of two CSVs (GPU runs are not bit-reproducible: float atomics)
same_losses() { paste -d, <(cut -d, -f3 "$1") <(cut -d, -f3 "$2") | tail -n +2 |
  awk -F, '{d = $1 - $2; if (d < 0) d = -d; if (d / $1 > m) m = d / $1} END {printf "max rel diff %.1e over %d steps\n", m, NR}'; }

if [[ $STAGES == *verify* ]]; then
  log "(1) GPU model vs CPU model (tiny-25m, 128 tokens, scattered positions)"
  timeout 60 $X train-gpu-check --model tiny-25m --seq 128 --time-steps 0 2>&1 | tee -a "$S"
  log "(1b) train --backend cpu vs cuda, tiny-25m, 256 tokens (CPU runs in the background)"
  for st in dense-ring mtraining; do
    P=(); [ $st = mtraining ] && P=(--pattern vs-topp:0.95)
    (run "cmp-$st-cpu" 200 --backend cpu --model tiny-25m --strategy $st "${P[@]}" --seq 256 --steps 2 --loss all --lr 1e-3) &
    run "cmp-$st-cuda" 30 --backend cuda --model tiny-25m --strategy $st "${P[@]}" --seq 256 --steps 2 --loss all --lr 1e-3
  done
  log "(1c) the first call's runs again (shared dense attention, attention cache, in-place SwiGLU backward, event timing)"
  run t25-dense-8k 40 --backend cuda --model tiny-25m --strategy dense-ring --seq 8K --steps 5 --loss all --lr 1e-3
  run t25-mtr-32k 40 --backend cuda --model tiny-25m --strategy mtraining --pattern vs-topp:0.95 --seq 32K --steps 3 --loss all --lr 1e-3
  run t25-mtr-32k-c3 40 --backend cuda --model tiny-25m --strategy mtraining --pattern vs-topp:0.95 --seq 32K --steps 3 --loss all --lr 1e-3 --attn-cache 3
  echo "t25-dense-8k vs the first call: $(same_losses results/train/2026-11-22-h200-c01-first-gpu-call/t25-dense-8k.csv $W/csv/train-t25-dense-8k.csv)" | tee -a "$S"
  echo "t25-mtr-32k vs the first call: $(same_losses results/train/2026-11-22-h200-c01-first-gpu-call/t25-mtr-32k.csv $W/csv/train-t25-mtr-32k.csv)" | tee -a "$S"
  echo "t25-mtr-32k with 3 cached attention plans of 8: $(same_losses $W/csv/train-t25-mtr-32k.csv $W/csv/train-t25-mtr-32k-c3.csv)" | tee -a "$S"
fi

if [[ $STAGES == *qwen* ]]; then
  log "(2) Qwen2.5-3B shape (random init), one GPU, 32K: dense ring (one shared attention plan) and MTraining with 4 cached plans"
  run q3b-dense-32k 90 --backend cuda --model qwen2.5-3b --strategy dense-ring --seq 32K --steps 2 --loss all --predict --cluster "$CLP"
  run q3b-mtr-32k-c4 90 --backend cuda --model qwen2.5-3b --strategy mtraining --pattern vs-topp:0.95 --seq 32K --steps 2 \
    --loss all --predict --cluster "$CLP" --attn-cache 4
fi

if [[ $STAGES == *fwdruns* ]]; then
  log "(2b) Qwen2.5-3B shape, one GPU, 32K, the budget mix (vs-preset): the forward on tiles, then on runs (--fwd-runs)"
  for f in tiles runs; do
    F=(); [ $f = runs ] && F=(--fwd-runs)
    run q3b-mix-32k-$f 150 --backend cuda --model qwen2.5-3b --strategy mtraining --pattern vs-preset:qwen2.5-3b \
      --seq 32K --steps 3 --loss all --predict --cluster "$CLP" --attn-cache 4 "${F[@]}"
  done
  echo "q3b-mix-32k runs vs tiles: $(same_losses $W/csv/train-q3b-mix-32k-tiles.csv $W/csv/train-q3b-mix-32k-runs.csv)" | tee -a "$S"
fi

if [[ $STAGES == *passkey* ]]; then
  # Short samples are packed, 64 to a 32K sequence under a block-diagonal mask (`--pack`: the same
  # gradients as a batch of 64, one step instead of 64 launch-bound ones), then 8 samples of 4K, 2 of 16K,
  # then 32K. PK_C_CFGS picks the 32K runs (dense online[:P] topp); PK_ZS_CFGS the zero-shot scores (default
  # PK_C_CFGS), PK_ZS=1 scores the 512-token model, PK_BZS=1 the last packed stage's. PK_POSE (e.g. 32K) applies
  # PoSE to every packed stage; PK_C_BATCH samples a 32K step (gradient accumulation), PK_C_N held-out samples.
  # PK_D=N: then N more 32K steps with each of PK_D_CFGS (default online) from the 32K model of PK_D_FROM.
  # PK_RECALL=N: the 32K scores also probe their first N samples (`--eval-recall`: the pattern's share of the
  # dense attention at the answer rows, per layer, right and wrong answers apart).
  # The defaults are call c16's recipe (results/train/2026-11-22-h200-c16-passkey-8-samples-a-step; 454 s on one H200): 3,000 packed steps of 64 x 512
  # tokens and 300 of 8 x 4K, both with PoSE to 32K, then 50 steps of 8 samples at 32K for MTraining with the
  # forced local window (vs-online:0.95:64:128) and for dense attention, 200 held-out samples each.
  CK=$W/ck
  POSE=${PK_POSE-32K}  # PK_POSE= (empty) turns PoSE off
  # a 32K configuration's strategy and pattern: dense, online[:REST] (MTraining's estimate vs-online:REST, e.g.
  # online:0.95:64:128 with forced sinks and window, online:topk:V:S; default 0.9), topp (synthetic vs-topp:0.95)
  pk_cfg() {
    case $1 in
      dense) echo "--strategy dense-ring --pattern dense" ;;
      online*) local p=${1#online}; p=${p#:}; echo "--strategy mtraining --pattern vs-online:${p:-0.9}" ;;
      topp) echo "--strategy mtraining --pattern vs-topp:0.95" ;;
    esac
  }
  PKM=${PK_MODEL:-tiny-25m}  # tiny-25m-logn: the same with logn attention past 512 tokens
  log "(3a) passkey, $PKM, 64 samples of 512 tokens a step (--pack 64), keys loss, ${PK_A:-3000} steps${POSE:+, PoSE to $POSE}"
  run pkA-512x64 ${PK_A_S:-235} --backend cuda --model $PKM --strategy dense-ring --seq 32K --pack 64 --loss keys \
    --lr 1e-3 --warmup 50 --cosine --steps ${PK_A:-3000} --eval 256 --quiet --ckpt $CK-A --ckpt-every 200 \
    ${POSE:+--pose $POSE}
  if [ -n "${PK_ZS:-}" ]; then
    log "(3a') the 512-token model scored at 4K and at 32K (${PK_C_CFGS:-online:0.95:64:128 dense}) without training there"
    run pkZ-4k 40 --backend cuda --model $PKM --strategy dense-ring --seq 32K --pack 8 --steps 0 --eval 64 --init $CK-A
    for c in ${PK_ZS_CFGS:-${PK_C_CFGS:-online:0.95:64:128 dense}}; do
      run pkZ-32k-${c//:/-} 60 --backend cuda --model $PKM $(pk_cfg $c) --seq 32K --steps 0 --eval ${PK_ZS_N:-32} ${PK_RECALL:+--eval-recall $PK_RECALL} \
        --init $CK-A
    done
  fi
  last=$CK-A
  if [ "${PK_B:-300}" -gt 0 ]; then
    log "(3b) 8 samples of 4K a step, ${PK_B:-300} steps"
    run pkB-4kx8 ${PK_B_S:-50} --backend cuda --model $PKM --strategy dense-ring --seq 32K --pack 8 --loss keys \
      --lr ${PK_B_LR:-2e-4} --warmup 10 --cosine --steps ${PK_B:-300} --eval 256 --quiet --init $CK-A \
      --ckpt $CK-B --ckpt-every 100 ${POSE:+--pose $POSE}
    last=$CK-B
  fi
  if [ "${PK_B2:-0}" -gt 0 ]; then
    log "(3b2) 2 samples of 16K a step, $PK_B2 steps"
    run pkB2-16kx2 ${PK_B2_S:-60} --backend cuda --model $PKM --strategy dense-ring --seq 32K --pack 2 --loss keys \
      --lr ${PK_B2_LR:-5e-4} --warmup 10 --cosine --steps $PK_B2 --eval 64 --quiet --init $last \
      --ckpt $CK-B2 --ckpt-every 50 ${POSE:+--pose $POSE}
    last=$CK-B2
  fi
  if [ -n "${PK_BZS:-}" ] && [ "$last" != "$CK-A" ]; then
    log "(3b') the model of the last packed stage scored at 32K (${PK_ZS_CFGS:-${PK_C_CFGS:-online:0.95:64:128 dense}})"
    for c in ${PK_ZS_CFGS:-${PK_C_CFGS:-online:0.95:64:128 dense}}; do
      run pkY-32k-${c//:/-} 60 --backend cuda --model $PKM $(pk_cfg $c) --seq 32K --steps 0 --eval ${PK_ZS_N:-32} ${PK_RECALL:+--eval-recall $PK_RECALL} \
        --init $last
    done
  fi
  log "(3c) 32K: ${PK_C_CFGS:-online:0.95:64:128 dense}, ${PK_C:-50} steps each"
  for c in ${PK_C_CFGS:-online:0.95:64:128 dense}; do
    run pkC-32k-${c//:/-} ${PK_C_S:-150} --backend cuda --model $PKM $(pk_cfg $c) --seq 32K --loss keys \
      --lr ${PK_C_LR:-5e-5} --warmup 5 --cosine --steps ${PK_C:-50} --batch ${PK_C_BATCH:-8} --eval ${PK_C_N:-200} ${PK_RECALL:+--eval-recall $PK_RECALL} \
      --init $last ${PK_D:+--ckpt $CK-C-$c}
  done
  if [ "${PK_D:-0}" -gt 0 ]; then
    # the model of the first 32K run (PK_D_FROM, default dense) scored with, then trained further with, PK_D_CFGS
    from=$CK-C-${PK_D_FROM:-dense}
    log "(3d) from ${PK_D_FROM:-dense}'s 32K model: ${PK_D_CFGS:-online}, scored first, then $PK_D steps"
    for c in ${PK_D_CFGS:-online}; do
      run pkD0-32k-${c//:/-} 60 --backend cuda --model $PKM $(pk_cfg $c) --seq 32K --steps 0 --eval ${PK_C_N:-200} ${PK_RECALL:+--eval-recall $PK_RECALL} \
        --init $from
      run pkD-32k-${c//:/-} ${PK_D_S:-120} --backend cuda --model $PKM $(pk_cfg $c) --seq 32K --loss keys \
        --lr ${PK_D_LR:-${PK_C_LR:-5e-5}} --warmup 5 --cosine --steps $PK_D --batch ${PK_C_BATCH:-8} \
        --eval ${PK_C_N:-200} ${PK_RECALL:+--eval-recall $PK_RECALL} --init $from
    done
  fi
fi
wait  # the background CPU runs
tar czf "$OUT/logs.tgz" -C "$W" --exclude 'ck*' . 2>/dev/null  # $OUT takes at most 8 files: one tarball
log "done"
echo "== table"
cat "$S"
