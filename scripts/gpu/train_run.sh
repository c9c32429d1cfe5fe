#!/bin/bash
# train_run.sh — the trainer's 2-GPU measurements (kind nvidia-h200-x2), in one call that ends within
# about 6 minutes: (0) W = 2 against W = 1 on tiny-25m (NCCL gradient all-reduce and in-place ZeRO-1
# all-gather), then (3) the Qwen2.5-3B shape (random init) at 128K and 256K tokens, dense ring vs MTraining,
# one or two training steps each, with the simulator's prediction for the same plan printed next to the
# measurement (`train --predict`). Logs under $OUT (summary.txt, logs.tgz); a short table last.
#
# Run from the repository root: bash scripts/gpu/train_run.sh
#   A prebuilt bin/sparsering-exec (built on the development machine, carried) is used when it runs here;
#   otherwise it is built (about 1.5 minutes of the budget). DEADLINE_S (default 330) caps the whole script:
#   each run's time limit is what is left of it, and a run cut at the deadline says so in the table.
#   Expected (simulator, TF32 GEMMs): 128K dense ring 56 s a step, 128K MTraining 14 s, 256K dense ring
#   213 s, 256K MTraining 44 s (bf16 GEMMs, the default since --precision, take less); so 330 s holds the
#   two 128K runs and ~560 s adds the 256K dense ring.
#   T_W=0 skips (0); T_CFGS="STRATEGY SEQ STEPS; ..." replaces the list of (3) runs (default: dense-ring and
#   mtraining at 128K and 256K); T_FLAGS adds flags to every (3) run.
# Memory (measured on one H200 at 32K, docs/train.md): fp32 weights + gradients (padded to 2 ZeRO-1 slices)
# + half the AdamW moments = 34.5 GiB a GPU (+ the bf16 weight copy, 5.7 GiB), plus ~0.63 MiB per local
# token with recomputation; the attention scratch (~23 KB per local token) is one workspace shared by all
# plans and each plan adds only its indices (46.8 MiB at 32K on one GPU), so MTraining keeps all 36 plans
# (`attention plans: N built (...; M when their layer came)` in the log); the dense ring shares one plan.
set -o pipefail
OUT=${OUT:-/tmp/sr-train-out}
W=/tmp/sr-train-logs
DEADLINE_S=${DEADLINE_S:-330}
T="$W/table.txt"
. scripts/gpu/train_common.sh  # S, t0, log, X, Open MPI
left() { echo $(( DEADLINE_S - ($(date +%s) - t0) )); }
RUN="$MPIRUN --oversubscribe --bind-to none -np 2"
# The simulator's cluster: h200-1x2 with our kernels' measured attention efficiencies (h200-1x2-bench, see
# docs/models.md); with `--precision tf32` in T_FLAGS the GEMM efficiency is halved (TF32's dense peak is
# 495 TFLOP/s on H100/H200 SXM, half the bf16 989 of the cluster file). MFU is against the bf16 peak.
CL="$W/h200-1x2-train.json"
GEMM=0.7; [[ "${T_FLAGS:-}" == *"precision tf32"* ]] && GEMM=0.35
sed "s/\"gemm\": 0.7,/\"gemm\": $GEMM,/" models/clusters/h200-1x2-bench.json >"$CL"
echo "run | seq | steps | measured step s | tok/s | MFU | simulated step s | sim tok/s | sim MFU | GPU mem GiB | plans kept, built in steps" >"$T"

if [ "${T_W:-1}" != 0 ]; then
log "(0) W = 2 vs W = 1: tiny-25m, 2K tokens of passkey (loss on every byte), striped:128 ring dense, 3 steps"
for np in 1 2; do
  C1="$W/h200-1x$np.json"
  sed "s/\"gpus_per_node\": 2/\"gpus_per_node\": $np/" models/clusters/h200-1x2.json >"$C1"
  timeout 60 $MPIRUN --oversubscribe --bind-to none -np $np $X train --backend cuda --model tiny-25m --cluster "$C1" \
    --layout striped:128 --schedule ring --pattern dense --seq 2K --steps 3 --loss all --lr 1e-3 \
    --csv "$W/w$np.csv" --label w$np >"$W/w$np.log" 2>&1
  echo "exit $?" >>"$W/w$np.log"
  { echo "-- W=$np:"; grep -E "^step|rror|exit" "$W/w$np.log"; } | tee -a "$S"
done
paste -d, <(cut -d, -f3 "$W/w1.csv") <(cut -d, -f3 "$W/w2.csv") | tail -n +2 |
  awk -F, '{d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > m) m = r} END {printf "W=2 vs W=1 loss: max rel diff %.2e over %d steps\n", m, NR}' | tee -a "$S"
fi

log "(3) Qwen2.5-3B shape (random init), 2 x H200: dense ring (contiguous, ring, dense) vs MTraining (striped:128, double ring, vs-topp:0.95)"
IFS=';' read -ra CFGS <<<"${T_CFGS:-dense-ring 128K 1; mtraining 128K 2; dense-ring 256K 1; mtraining 256K 1}"
for cfg in "${CFGS[@]}"; do
  set -- $cfg
  [ $# -eq 3 ] || continue
  st=$1 seq=$2 steps=$3 name=q3b-$1-$2
  lim=$(left)
  if [ "$lim" -lt 30 ]; then
    echo "$name | $seq | - | not run: $lim s left of the ${DEADLINE_S} s budget" >>"$T"
    continue
  fi
  P=(); [ $st = mtraining ] && P=(--pattern vs-topp:0.95)
  timeout "$lim" $RUN $X train --backend cuda --model qwen2.5-3b --cluster "$CL" --strategy $st "${P[@]}" --seq $seq \
    --steps $steps --data passkey --loss all --lr 1e-4 ${T_FLAGS:-} --predict --csv "$W/$name.csv" --label $name >"$W/$name.log" 2>&1
  rc=$?
  echo "exit $rc" >>"$W/$name.log"
  { echo "-- $name (exit $rc)"; grep -E "^train:|^step|^predict|rror|failed" "$W/$name.log"; } | tee -a "$S"
  mem=$(grep -oE "in use after step [0-9]+: [0-9.]+ of" "$W/$name.log" | awk '{print $6}' | sort -n | tail -1)
  pre=$(grep -oE "^train: [0-9]+ attention plan" "$W/$name.log" | awk '{print $2}')
  tot=$(grep -oE "^train: attention plans: [0-9]+ built" "$W/$name.log" | awk '{print $4}')
  dem=$(grep -oE "; [0-9]+ when their layer came" "$W/$name.log" | awk '{print $2}')
  res=$(grep -oE "; [0-9]+ restored from host memory" "$W/$name.log" | awk '{print $2}')  # --attn-host-cache
  plans="${pre:-?} kept, $(( ${tot:-0} - ${pre:-0} )) built later (${dem:-?} waited for)${res:+, $res restored from host}"
  if grep -q "^predict" "$W/$name.log"; then
    grep "^predict" "$W/$name.log" | sed -E 's/.*simulated step ([0-9.]+)s ([0-9]+) tok\/s MFU ([0-9.]+)% \| measured step ([0-9.]+)s .* ([0-9]+) tok\/s MFU ([0-9.]+)%.*/\4 \5 \6 \1 \2 \3/' |
      awk -v n=$name -v s=$seq -v k=$steps -v m="${mem:--}" -v pl="$plans" '{printf "%s | %s | %s | %s | %s | %s%% | %s | %s | %s%% | %s | %s\n", n, s, k, $1, $2, $3, $4, $5, $6, m, pl}' >>"$T"
  else
    echo "$name | $seq | $steps | did not finish (exit $rc; 124: cut at the deadline) | | | | | | ${mem:--} | $plans" >>"$T"
  fi
done
cp "$T" "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$W" . 2>/dev/null
log "done"
echo "== table (measured: best step after the first, or the only one; MFU vs 989 TFLOP/s bf16 per GPU x 2)"
column -t -s '|' "$T" 2>/dev/null || cat "$T"
