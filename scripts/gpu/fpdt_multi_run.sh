#!/bin/bash
# fpdt_multi_run.sh — FPDT on two GPUs of one host (issue 29: the Qwen2.5-3B shape at 1M tokens on two GPUs), in one
# call of at most 10 minutes. Uses the first NP (default 2) GPUs the machine lists; FPDT's Ulysses runs over both.
# The 3B shape at 1M needs about 103 GiB a GPU (`sparsering sim --strategy fpdt --model qwen2.5-3b --seq 1M --cluster
# models/clusters/h200-1x2-calibrated.json --trainer exec --offload-activations`): an H200 host (nvidia-h200-x2 or -x4).
#   cal    calibration at W = NP (the predictions beside the runs then use it)
#   layer  one layer of Qwen2.5-3B attention (dense, forward + backward) at each of LAYER_SEQS (default 1M): plain
#          Ulysses (no chunks: the whole local KV in GPU memory) as the baseline, then FPDT in 64K chunks with the KV
#          chunks offloaded to pinned host memory; --repeat 2 (the second timed), --predict
#   train  the Qwen2.5-3B shape (random init) at TRAIN_SEQ (default 1M), FPDT with --offload-activations, TRAIN_STEPS
#          (default 1) step(s), pattern TRAIN_PATTERN (default vs-topp:0.95: the dense step is predicted at about 24
#          minutes, past a call's 10), --predict: step time, memory a GPU and pinned host memory, measured and simulated;
#          TRAIN_LAYERS=N trains the same shape cut to its first N decoder layers (a copy of the model's config with
#          num_hidden_layers N, written beside the logs), for a step that fits a call where the whole model's does not
# Run from the repository root: bash scripts/gpu/fpdt_multi_run.sh [STAGES] (default: cal layer train). No step starts
# after SR_BUDGET_S (default 540) seconds. Logs in $OUT/logs.tgz, the summary in $OUT/summary.txt (printed last).
# SR_DRY=1: the CPU backend with tiny-test at 1/256 of the lengths, to check the script on a machine without GPUs.
set -o pipefail
T0=$(date +%s)
T_END=$((T0 + ${SR_BUDGET_S:-540}))
OUT=${OUT:-/tmp/sr-fpdt-multi-out}
L=${SR_LOGS:-/tmp/sr-fpdt-multi-logs}
B=${SR_BIN:-bin}
rm -rf "$L"
mkdir -p "$L" "$OUT"
S=$OUT/summary.txt
: >"$S"
STAGES=${1:-cal layer train}
NP=${NP:-2}
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN SR_COMM_TIMEOUT=${SR_COMM_TIMEOUT:-300}
has() { [[ " $STAGES " == *" $1 "* ]]; }
. scripts/gpu/exec_steps.sh  # say, step, timed, exec_table, tokens, launch
. scripts/gpu/mpi.sh         # MPIRUN

if [ -n "${SR_DRY:-}" ]; then
  BACKEND=cpu MODEL=tiny-test
else
  BACKEND=cuda MODEL=qwen2.5-3b
  export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-$(seq -s, 0 $((NP - 1)))}
  nvidia-smi --query-gpu=index,name,memory.total,temperature.gpu --format=csv >"$L/gpu.txt" 2>&1
fi
say "== fpdt_multi_run.sh stages: $STAGES on $NP ranks, backend $BACKEND (started $(date -u +%H:%M:%S), budget ${SR_BUDGET_S:-540} s)"
RUN=$(launch $NP)
X="$B/sparsering-exec attn --backend $BACKEND --model $MODEL"
CAL=$OUT/h200-1x$NP-calibrated.json
CN=$L/h200-1x$NP.json
sed "s/\"gpus_per_node\": 2/\"gpus_per_node\": $NP/" models/clusters/h200-1x2.json >"$CN"
CLUSTER=(--cluster "$CN")
PRED=(--predict)

if has cal; then
  say "(cal) calibration at W = $NP"
  step calibrate 120 $RUN $B/sparsering-exec calibrate --backend $BACKEND --cluster "$CN" --out "$CAL" --log "$L/calib.csv"
  grep -vE "^NCCL|^$" "$L/calibrate.log" | sed "s/^/   /" | tee -a "$S"
fi
[ -f "$CAL" ] && CLUSTER=(--cluster "$CAL")

if has layer; then
  for seq in ${LAYER_SEQS:-1M}; do
    n=$(tokens $seq)
    say "(layer) one Qwen2.5-3B attention layer, dense, at $seq ($n tokens) on $NP ranks: Ulysses, then FPDT offloaded"
    timed l_ulysses_$seq 150 --seq "$n" --strategy ulysses
    timed l_fpdt_$seq 200 --seq "$n" --strategy fpdt --fpdt-chunk "$(tokens 64K)" --fpdt-offload 1
    grep -hE "memory|host" "$L/l_ulysses_$seq.log" "$L/l_fpdt_$seq.log" 2>/dev/null | sed "s/^/   /" | tee -a "$S"
  done
  exec_table "one layer on $NP ranks, backend $BACKEND" "$L"/l_*.log 2>&1 | tee -a "$S"
fi

if has train; then
  seq=${TRAIN_SEQ:-1M} pat=${TRAIN_PATTERN:-vs-topp:0.95}
  n=$(tokens $seq)
  TM=$MODEL
  if [ -n "${TRAIN_LAYERS:-}" ]; then
    TM=$L/$MODEL-${TRAIN_LAYERS}l.json
    sed -E "s/\"(num_hidden_layers|max_window_layers)\": [0-9]+/\"\1\": $TRAIN_LAYERS/" "models/$MODEL.json" >"$TM"
  fi
  say "(train) $TM, random init, ${TRAIN_STEPS:-1} step(s) at $seq ($n tokens) on $NP ranks: FPDT, activation offload, pattern $pat"
  step t_fpdt_$seq "${TRAIN_LIMIT:-480}" $RUN $B/sparsering-exec train --backend $BACKEND --model "$TM" "${CLUSTER[@]}" \
    --strategy fpdt --pattern "$pat" --offload-activations --seq "$n" --steps "${TRAIN_STEPS:-1}" --data passkey \
    --loss all --lr 1e-4 --predict --csv "$L/t_fpdt_$seq.csv"
  grep -E "^train:|^step|^predict|rror|failed" "$L/t_fpdt_$seq.log" | sed "s/^/   /" | tee -a "$S"
fi

[ -z "${SR_DRY:-}" ] && nvidia-smi --query-gpu=index,temperature.gpu,memory.used --format=csv >>"$L/gpu.txt" 2>&1
tar czf "$OUT/logs.tgz" -C "$L" . 2>/dev/null
say "== [$(( $(date +%s) - T0 ))s] done"
echo "== summary"
cat "$S"
