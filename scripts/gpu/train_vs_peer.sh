#!/bin/bash
# train_vs_peer.sh — ours against the PyTorch peer (scripts/gpu/train_peer.py) on ONE GPU, in one call: the
# Qwen2.5-3B shape (models/qwen2.5-3b.json, random init), one sequence a step, the same token stream (ours writes
# it: train --write-samples), each run the median of TIMED steps after WARM warm-up steps. Ours: dense-ring,
# mtraining with vs-topp:0.95 and with vs-preset:qwen2.5-3b, optionally (run moba) MoBA's gating (train's defaults
# otherwise, --predict next to each);
# the peer: eager and each decoder layer torch.compile'd. Prints one table: tokens/s and the ratio to the faster
# peer of the same length.
#
# Run from the repository root: bash scripts/gpu/train_vs_peer.sh SEQ [SEQ ...]     (e.g. 32K 64K)
#   RUNS      which runs, in order (default "eager compiled dense topp preset")
#   WARM      warm-up steps (default 2; 1 at 128K and beyond), TIMED timed steps (default 3; 2 at 128K and beyond)
#   PY        the Python with torch and transformers (default python3)
#   EXTRA     more flags for our runs (e.g. "--attn-prefetch 4")
#   LIMIT_S   a run's time limit, seconds (default: twice its estimate + 120)
#   MOBA      the pattern of run moba (default moba:4096:12: blocks of 4096 keys, each query's top 12 and its own)
#   MODEL     the model (default qwen2.5-3b: models/MODEL.json for the peer); BACKEND ours' backend (default cuda)
#   CAL       the cluster file for --predict (default: the shipped calibration of this GPU, below)
# --predict runs on one GPU of the machine's kind: on an H100 models/clusters/h100-1x1-calibrated.json (sparsering-exec
# calibrate on one H100, 2026-11-27, the current kernels: results/train/2026-11-27-h100-vs-peer-64k-sustained-gemm), on an H200
# models/clusters/h200-1x1-calibrated.json (sparsering-exec calibrate on one H200, 2026-11-27, the current kernels).
# The plan printed first gives each run's estimated seconds (from the 2026-11-25 H200 figures), so a caller can
# split a long list over calls (RUNS) to stay under a call's limit. At 128K the peer needs an H200's memory.
# Logs, CSVs and the summary under $OUT (default /tmp/sr-peer-out); the table is the summary's end.
set -o pipefail
OUT=${OUT:-/tmp/sr-peer-out}
W="$OUT/logs"
. scripts/gpu/train_common.sh  # S, log, X, CL1 (one-GPU cluster), Open MPI
[ $# -ge 1 ] || { echo "usage: bash scripts/gpu/train_vs_peer.sh SEQ [SEQ ...]" >&2; exit 2; }
RUNS=${RUNS:-eager compiled dense topp preset}
MOBA=${MOBA:-moba:4096:12}  # the moba run's pattern (MoBA's block gating, issue 30)
PY=${PY:-python3}
MODEL=${MODEL:-qwen2.5-3b}
MODEL_JSON=$MODEL
[ -f "$MODEL_JSON" ] || MODEL_JSON=models/$MODEL.json
BACKEND=${BACKEND:-cuda}
U_WARM=${WARM:-} U_TIMED=${TIMED:-}
# for --predict: one GPU of this machine's kind, calibrated (see the header)
case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" in
  *H100*) CLP=models/clusters/h100-1x1-calibrated.json ;;
  *) CLP=models/clusters/h200-1x1-calibrated.json ;;
esac
CLP=${CAL:-$CLP}  # CAL: a cluster file calibrated in the same call instead
log "cluster for --predict: $CLP"
$PY -c "import torch, transformers; print('peer: torch', torch.__version__, 'transformers', transformers.__version__)" 2>&1 |
  tail -1 | tee -a "$S"

tokens() {  # 32K -> 32768
  case $1 in *K | *k) echo $((${1%[Kk]} * 1024)) ;; *M | *m) echo $((${1%[Mm]} * 1048576)) ;; *) echo "$1" ;; esac
}
# Estimated seconds of a step (H200, 2026-11-25 figures at 32K / 64K / 128K; else scaled as N^1.5 from 32K).
step_estimate() {  # RUN N
  local k=$(($2 / 32768))
  case "$1:$k" in
    eager:1) echo 3.2 ;; eager:2) echo 9.0 ;; eager:4) echo 28.5 ;;
    compiled:1) echo 2.9 ;; compiled:2) echo 8.2 ;; compiled:4) echo 27.2 ;;
    dense:1) echo 4.8 ;; dense:2) echo 14.6 ;; dense:4) echo 50 ;;
    topp:1 | preset:1 | moba:1) echo 4.6 ;; topp:2 | preset:2) echo 6.8 ;; topp:4 | preset:4) echo 16.4 ;;
    *) awk -v n="$2" 'BEGIN {printf "%.1f", 4.8 * (n / 32768) ^ 1.5}' ;;
  esac
}
setup_estimate() {  # seconds before the first step: model build (and compile), our plans
  case $1 in eager) echo 30 ;; compiled) echo 90 ;; dense) echo 30 ;; *) echo 60 ;; esac
}
run_estimate() {  # RUN N STEPS
  awk -v s="$(step_estimate $1 $2)" -v u="$(setup_estimate $1)" -v k="$3" 'BEGIN {printf "%d", u + k * s}'
}

# ours: NAME N STEPS LIMIT FLAGS...; the median step of the timed steps from the CSV (column 12: step_s)
ours() {
  local name=$1 n=$2 steps=$3 lim=$4
  shift 4
  timeout "$lim" $X train --backend "$BACKEND" --model "$MODEL" --cluster "$CLP" --seq "$n" --steps "$steps" --loss all \
    --csv "$W/csv/$name.csv" --label "$name" --predict $EXTRA "$@" >"$W/$name.log" 2>&1
  local rc=$?
  echo "exit $rc" >>"$W/$name.log"
  { echo "-- $name (exit $rc): $*"; grep -E "^train: .*(memory|plans|recompute|GEMMs)|^predict|rror|failed" "$W/$name.log";
    grep -E "^step" "$W/$name.log" | tail -1; } >>"$S"
  [ $rc -eq 0 ] || return 1
  tail -n +2 "$W/csv/$name.csv" | tail -n "$TIMED" | cut -d, -f12 | sort -g |
    awk '{a[NR] = $1} END {m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.4f", m}'
}
# the peer: NAME N LIMIT VARIANT-FLAGS...; its median step
peer() {
  local name=$1 n=$2 lim=$3
  shift 3
  timeout "$lim" $PY scripts/gpu/train_peer.py --model "$MODEL_JSON" --samples "$SAMPLES" --seq "$n" \
    --warmup-steps "$WARM" --steps "$TIMED" "$@" >"$W/$name.log" 2>&1
  local rc=$?
  echo "exit $rc" >>"$W/$name.log"
  { echo "-- $name (exit $rc): $*"; grep -E "^peer: (qwen|seq|RESULT)|rror|Killed" "$W/$name.log" | tail -4; } >>"$S"
  [ $rc -eq 0 ] || return 1
  grep -oE "median_step_s=[0-9.]+" "$W/$name.log" | tail -1 | cut -d= -f2
}

TABLE="$OUT/table.txt"
: >"$TABLE"
for SEQ in "$@"; do
  N=$(tokens "$SEQ")
  long=$([ "$N" -ge 131072 ] && echo 1)
  WARM=${U_WARM:-${long:+1}} TIMED=${U_TIMED:-${long:+2}}
  WARM=${WARM:-2} TIMED=${TIMED:-3}
  STEPS=$((WARM + TIMED))
  total=0
  for r in $RUNS; do total=$((total + $(run_estimate $r $N $STEPS))); done
  log "seq $SEQ ($N tokens): $WARM warm-up + $TIMED timed steps a run; runs: $RUNS; about ${total}s in all"
  SAMPLES="$W/samples-$N.i32"
  $X train --model "$MODEL" --cluster "$CL1" --strategy dense-ring --seq "$N" --steps "$STEPS" --loss all \
    --write-samples "$SAMPLES" >"$W/samples-$N.log" 2>&1 || { log "writing the samples failed"; cat "$W/samples-$N.log"; exit 1; }
  declare -A T=() F=()
  for r in $RUNS; do
    est=$(run_estimate $r $N $STEPS)
    lim=${LIMIT_S:-$((2 * est + 120))}
    log "run $r at $SEQ: about ${est}s (limit ${lim}s)"
    case $r in
      eager) T[$r]=$(peer peer-eager-$N "$N" "$lim") ;;
      compiled) T[$r]=$(peer peer-compiled-$N "$N" "$lim" --compile) ;;
      dense) T[$r]=$(ours ours-dense-$N "$N" "$STEPS" "$lim" --strategy dense-ring) ;;
      topp) T[$r]=$(ours ours-topp-$N "$N" "$STEPS" "$lim" --strategy mtraining --pattern vs-topp:0.95) ;;
      preset) T[$r]=$(ours ours-preset-$N "$N" "$STEPS" "$lim" --strategy mtraining --pattern vs-preset:qwen2.5-3b) ;;
      moba) T[$r]=$(ours ours-moba-$N "$N" "$STEPS" "$lim" --layout contiguous --schedule ring --pattern "$MOBA") ;;
      *) log "unknown run '$r' (eager compiled dense topp preset moba)"; continue ;;
    esac
    if [ -n "${T[$r]:-}" ]; then log "run $r at $SEQ: ${T[$r]} s a step"
    else  # why, in the log and the table: the run's first error line (e.g. out of memory)
      why=$(grep -h -m1 -iE "rror|out of memory|Killed|timed out" "$W"/*-"$r"-$N.log 2>/dev/null | cut -c1-160)
      F[$r]=${why:-no step time in its log}
      log "run $r at $SEQ: failed (${F[$r]})"
    fi
  done
  # the faster peer of this length is the reference
  ref=""
  for p in eager compiled; do
    [ -n "${T[$p]:-}" ] && { [ -z "$ref" ] || awk -v a="${T[$p]}" -v b="$ref" 'BEGIN {exit !(a < b)}'; } && ref=${T[$p]}
  done
  for r in $RUNS; do
    case $r in
      eager) what="PyTorch peer, eager" ;; compiled) what="PyTorch peer, each decoder layer torch.compile'd" ;;
      dense) what="ours, dense-ring" ;; topp) what="ours, mtraining vs-topp:0.95" ;;
      preset) what="ours, mtraining vs-preset:qwen2.5-3b" ;; moba) what="ours, $MOBA" ;; *) continue ;;
    esac
    if [ -n "${T[$r]:-}" ]; then
      awk -v n="$N" -v s="$SEQ" -v w="$what" -v t="${T[$r]}" -v ref="$ref" 'BEGIN {
        r = ref != "" ? sprintf("%.2fx", ref / t) : "-";
        printf "| %s | %s | %.0f | %.3f s | %s |\n", s, w, n / t, t, r}' >>"$TABLE"
    else
      echo "| $SEQ | $what | failed: ${F[$r]:-} | - | - |" >>"$TABLE"
    fi
  done
  unset T
done
log "tokens/s (median of the timed steps; ratio: to the faster peer of the same length; logs in $W)"
{ echo "| seq | trainer | tokens/s | step | vs faster peer |"; echo "|---|---|---|---|---|"; cat "$TABLE"; } | tee -a "$S"
