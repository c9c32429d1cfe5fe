#!/bin/bash
# multi_vs_peer.sh — ours against PyTorch's own context parallelism (scripts/gpu/cp_peer.py: ring attention over SDPA,
# cuDNN first, load balancing on) on one host of 4 GPUs (kinds nvidia-h100-x4 / nvidia-h200-x4), in one call: the
# same attention layer (Qwen2.5-3B: 16 query / 2 KV heads, head dim 128, causal, forward + backward) at the same
# lengths on the same GPUs, and optionally the same training step. Ours runs as scripts/gpu/exec_nodes_run.sh runs
# it (the host as 2 "nodes" of NP/2, so the double ring's both levels run; `attn` under mpirun, the last of 2
# repetitions, the slowest rank; the simulator's prediction beside each); the peer under torchrun (the median of
# its repetitions, the slowest rank each).
#
# Run from the repository root: bash scripts/gpu/multi_vs_peer.sh [STAGES]   (default: check layer)
#   check   the peer against one GPU (O, dQ, dK, dV at 16K tokens; --gqa auto first checks SDPA with the 2 KV heads)
#   cal     calibration at W = NP: the predictions beside our runs then use the calibrated cluster
#   layer   one layer at each of SEQS (default "512K 256K"): the peer (PEER_VARIANTS, default "lb": load balancing,
#           KV by all-gather; "a2a": all-to-all; "nolb": contiguous shards) and ours (OURS, default "striped-ring
#           zigzag-ring usp double-ring mtraining"; double-ring: the striped layout on the double ring over the 2
#           nodes; mtraining: vs-topp:0.95 on it; also dense-ring, mtraining-online, mtraining-runs: --fwd-runs;
#           mtraining-all, mtraining-all-runs: MTraining over all the model's 36 layers, the mean layer, since layer 0
#           alone is one draw of the pattern that keeps twice the mean layer's pairs)
#   train   training steps of the Qwen2.5-3B shape at each of TRAIN_SEQS (default 128K) on the same token stream (ours
#           writes it: train --write-samples): the peer (--mode train, PEER_TRAIN_FLAGS, e.g. "--params sharded"
#           where the replicated parameters do not fit) and ours (TRAIN_STRATEGIES, default "striped-ring mtraining"),
#           WARM warm-up + TIMED timed steps each (default 1 + 2), the median timed step
# Prints one table last: | seq | what | fwd ms | bwd ms | fwd+bwd ms | ratio to the peer |, the ratio the fastest
# peer run's time of that length (and kind: layer or training step) over the row's (above 1: faster than the peer).
# NP (default: the GPUs nvidia-smi lists), SR_BUDGET_S (default 540: no step starts after it; each step has its own
# limit), PY (the Python with torch, default python3), PEER_FLAGS (more flags for every peer layer run).
# SR_DRY=1: ours on the CPU backend with tiny-test at 1/256 of the lengths, the peer skipped unless torch sees NP
# GPUs, to check the script on a machine without GPUs (tests/test_multi_vs_peer_script.c).
# SR_LOGS (default /tmp/sr-cp-logs) and SR_BIN (default bin) move the logs and the binaries; $OUT/summary.txt.
set -o pipefail
T0=$(date +%s)
T_END=$((T0 + ${SR_BUDGET_S:-540}))
OUT=${OUT:-/tmp/sr-cp-out}
L=${SR_LOGS:-/tmp/sr-cp-logs}
B=${SR_BIN:-bin}
rm -rf "$L"
mkdir -p "$L" "$OUT"
S=$OUT/summary.txt
STAGES=${1:-check layer}
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN SR_COMM_TIMEOUT=120
has() { [[ " $STAGES " == *" $1 "* ]]; }
. scripts/gpu/exec_steps.sh  # say, step, timed, exec_table, tokens, cluster, launch

if [ -n "${SR_DRY:-}" ]; then
  NP=${NP:-4} BACKEND=cpu MODEL=tiny-test
else
  NP=${NP:-$(nvidia-smi -L 2>/dev/null | wc -l)} BACKEND=cuda MODEL=qwen2.5-3b
fi
if [ "$NP" -lt 4 ] || [ $((NP % 2)) != 0 ]; then echo "multi_vs_peer.sh: needs an even count of 4 or more ranks (NP=$NP)"; exit 2; fi
DENSE="dense-ring striped-ring zigzag-ring usp double-ring"
for st in ${OURS:-} "|" ${TRAIN_STRATEGIES:-}; do
  [ "$st" = "|" ] && { online=""; continue; }  # the trainer has no vs inputs to estimate on
  [[ " $DENSE mtraining mtraining-runs ${online-mtraining-online mtraining-all mtraining-all-runs} " == *" $st "* ]] ||
    { echo "multi_vs_peer.sh: unknown run '$st' ($DENSE mtraining mtraining-runs${online-" mtraining-online mtraining-all mtraining-all-runs"})"; exit 2; }
done
for v in ${PEER_VARIANTS:-}; do
  case $v in lb | a2a | nolb) ;; *) echo "multi_vs_peer.sh: unknown peer variant '$v' (lb a2a nolb)"; exit 2 ;; esac
done
SEQS=${SEQS:-512K 256K}
OURS=${OURS:-striped-ring zigzag-ring usp double-ring mtraining}
PEER_VARIANTS=${PEER_VARIANTS:-lb}
TRAIN_SEQS=${TRAIN_SEQS:-128K}
TRAIN_STRATEGIES=${TRAIN_STRATEGIES:-striped-ring mtraining}
WARM=${WARM:-1} TIMED=${TIMED:-2}
PY=${PY:-python3}
say "== multi_vs_peer.sh stages: $STAGES on $NP ranks, backend $BACKEND (started $(date -u +%H:%M:%S), budget ${SR_BUDGET_S:-540} s)"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv >"$L/gpu.txt" 2>&1

PEER_OK=""
if $PY -c "import sys, torch; sys.exit(0 if torch.cuda.device_count() >= $NP else 1)" >/dev/null 2>&1; then
  PEER_OK=1
  $PY -c "import torch, transformers; print('peer: torch', torch.__version__, 'transformers', transformers.__version__)" 2>&1 |
    tail -1 | tee -a "$S"
else
  say "peer: skipped (no torch that sees $NP CUDA GPUs in $PY)"
fi
TORCHRUN="$PY -m torch.distributed.run --standalone --nproc-per-node $NP"

. scripts/gpu/mpi.sh  # MPIRUN, MAKE_MPI
if [ -z "${SR_DRY:-}" ]; then
  ready=$(sr_exec_ready "$L/build.log") || { say "$ready: failed"; tail -30 "$L/build.log"; exit 1; }
  say "$ready"
fi
RUN=$(launch $NP)
X="$B/sparsering-exec attn --backend $BACKEND --model $MODEL"
CN=$(cluster $NP)
CAL=$OUT/h200-nodes-$NP-calibrated.json
CLUSTER=(--cluster "$CN")
PRED=(--predict)
ROWS=$L/rows.tsv
: >"$ROWS"

# row KIND SEQ ROLE WHAT FWD BWD TOTAL: a line of the final table (KIND layer or train; ROLE peer or ours)
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$ROWS"; }
# field KEY FILE: KEY's value on the last RESULT line of FILE
field() { grep -E "^RESULT" "$2" 2>/dev/null | tail -1 | grep -oE "(^| )$1=[^ ]+" | cut -d= -f2; }

# ours_flags NAME: our attn/train flags for a run name; ours_what NAME: its words in the table
ours_flags() {
  case $1 in
    double-ring) echo "--strategy striped-ring --schedule double-ring --skip-empty-sends" ;;
    mtraining-online) echo "--strategy mtraining --pattern vs-online:0.95:64:128 --inputs vs" ;;
    mtraining-runs) echo "--strategy mtraining --fwd-runs --skip-empty-sends" ;;
    mtraining-all) echo "--strategy mtraining --layers 36 --skip-empty-sends" ;;
    mtraining-all-runs) echo "--strategy mtraining --fwd-runs --layers 36 --skip-empty-sends" ;;
    *) echo "--strategy $1 --skip-empty-sends" ;;
  esac
}
ours_what() {
  case $1 in
    dense-ring) echo "ours, contiguous ring (dense)" ;;
    striped-ring) echo "ours, striped ring (dense)" ;;
    zigzag-ring) echo "ours, zigzag ring (dense)" ;;
    usp) echo "ours, USP (dense: Ulysses in a node x ring)" ;;
    double-ring) echo "ours, double ring over 2 nodes (dense, striped)" ;;
    mtraining) echo "ours, MTraining (vs-topp:0.95, double ring)" ;;
    mtraining-online) echo "ours, MTraining with online estimation (vs-online:0.95)" ;;
    mtraining-runs) echo "ours, MTraining (vs-topp:0.95, double ring, the forward on the runs form)" ;;
    mtraining-all) echo "ours, MTraining (vs-topp:0.95, double ring), the mean of the 36 layers" ;;
    mtraining-all-runs) echo "ours, MTraining (vs-topp:0.95, double ring, forward on runs), the mean of the 36 layers" ;;
  esac
}

if has check; then
  say "(check) the peer at 16K tokens on $NP GPUs against one GPU"
  if [ -n "$PEER_OK" ]; then
    step p_check 180 $TORCHRUN scripts/gpu/cp_peer.py --mode layer --check --seq 16K $PEER_FLAGS
    grep -E "^peer: (GQA|check)|rror" "$L/p_check.log" | sed "s/^/   /" | tee -a "$S"
    [ "$(field ok "$L/p_check.log")" = 1 ] || say "peer check FAILED: its times below are of a result that differs from one GPU's"
  else
    say "-- p_check: skipped (no peer here)"
  fi
fi

if has cal; then
  say "(cal) calibration at W = $NP"
  step calibrate 120 $RUN $B/sparsering-exec calibrate --backend $BACKEND --cluster "$CN" --out "$CAL" --log "$L/calib.csv"
  grep -vE "^NCCL|^$" "$L/calibrate.log" | sed "s/^/   /" | tee -a "$S"
fi
[ -f "$CAL" ] && CLUSTER=(--cluster "$CAL")

# peer_layer VARIANT SEQ: the peer's layer into the table
peer_layer() {
  local v=$1 seq=$2 flags what name=p_${1}_$2
  case $v in
    lb) flags="" what="PyTorch context parallelism (load balancing, all-gather)" ;;
    a2a) flags="--rotate alltoall" what="PyTorch context parallelism (load balancing, all-to-all)" ;;
    nolb) flags="--no-load-balance" what="PyTorch context parallelism (contiguous shards, all-gather)" ;;
  esac
  if [ -z "$PEER_OK" ]; then row layer "$seq" peer "$what" skipped - -; return; fi
  step "$name" 200 $TORCHRUN scripts/gpu/cp_peer.py --mode layer --seq "$(tokens $seq)" $flags $PEER_FLAGS
  grep -E "^peer: (GQA|layer seq)|^RESULT|rror|Killed" "$L/$name.log" | sed "s/^/   /" | tee -a "$S"
  local f=$(field fwd_ms "$L/$name.log") b=$(field bwd_ms "$L/$name.log") t=$(field total_ms "$L/$name.log")
  what="$what, gqa $(field gqa "$L/$name.log"), $(field backend "$L/$name.log"), $(field peak_gib "$L/$name.log") GiB"
  if [ -n "$t" ]; then row layer "$seq" peer "$what" "$f" "$b" "$t"; else row layer "$seq" peer "$what" failed - -; fi
}
# ours_layer NAME SEQ: our layer into the table
ours_layer() {
  local name=l_${1}_$2 fb
  timed "$name" $([[ $1 == mtraining-all* ]] && echo 420 || echo 150) --seq "$(tokens $2)" $(ours_flags $1)
  if [[ $1 == mtraining-all* ]]; then  # the mean per layer over the model's layers (attn's closing line)
    fb=$(grep -oE 'layer\(s\): fwd [0-9.]+ ms bwd [0-9.]+ ms per layer' "$L/$name.log" 2>/dev/null | tail -1 |
      awk '{ print $3, $6, $3 + $6 }')
  else
    fb=$(awk '/layer 0: fwd/ { gsub(",", ""); f = $4; b = $7 } END { if (f != "") print f, b, f + b }' "$L/$name.log" 2>/dev/null)
  fi
  if [ -n "$fb" ]; then row layer "$2" ours "$(ours_what $1)" $fb; else row layer "$2" ours "$(ours_what $1)" failed - -; fi
}
if has layer; then
  for seq in $SEQS; do
    say "(layer) one Qwen2.5-3B attention layer at $seq ($(tokens $seq) tokens) on $NP ranks: the peer ($PEER_VARIANTS), ours ($OURS)"
    for v in $PEER_VARIANTS; do peer_layer $v $seq; done
    for st in $OURS; do ours_layer $st $seq; done
  done
fi

# median_step CSV K: the median step_s (column 12) of the last K steps of our trainer's CSV
median_step() {
  tail -n +2 "$1" 2>/dev/null | tail -n "$2" | cut -d, -f12 | sort -g |
    awk '{a[NR] = $1} END {if (NR) printf "%.4f", NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
if has train; then
  TM=qwen2.5-3b; [ -n "${SR_DRY:-}" ] && TM=tiny-test
  CL1="$L/h200-1x1.json"
  sed 's/"gpus_per_node": 2/"gpus_per_node": 1/' models/clusters/h200-1x2.json >"$CL1"
  for seq in $TRAIN_SEQS; do
    n=$(tokens $seq) steps=$((WARM + TIMED))
    nn=${n/K/*1024}; nn=$((${nn/M/*1048576}))  # the token count as a number (n keeps its K/M suffix for the flags)
    say "(train) $TM, random init, $WARM + $TIMED steps at $seq ($n tokens) on $NP ranks: the peer, ours ($TRAIN_STRATEGIES)"
    samples="$L/samples-$n.i32"
    if ! $B/sparsering-exec train --model $TM --cluster "$CL1" --strategy dense-ring --seq "$n" --steps $steps --data passkey \
      --loss all --write-samples "$samples" >"$L/samples-$n.log" 2>&1; then
      say "writing the samples failed"; sed "s/^/   /" "$L/samples-$n.log" | tail -5 | tee -a "$S"; continue
    fi
    if [ -n "$PEER_OK" ]; then
      step "pt_$seq" 300 $TORCHRUN scripts/gpu/cp_peer.py --mode train --model "models/$TM.json" --samples "$samples" --seq "$n" \
        --warmup-steps $WARM --steps $TIMED --lr 1e-4 $PEER_TRAIN_FLAGS
      grep -E "^peer: (GQA|train|step)|^RESULT|rror|Killed" "$L/pt_$seq.log" | sed "s/^/   /" | tee -a "$S"
      s=$(field median_step_s "$L/pt_$seq.log")
      what="train step: PyTorch context parallelism ($(field params "$L/pt_$seq.log") parameters, gqa $(field gqa "$L/pt_$seq.log"))"
      if [ -n "$s" ]; then row train "$seq" peer "$what, $(field tokens_per_s "$L/pt_$seq.log" | cut -d. -f1) tok/s" - - \
        "$(awk -v s="$s" 'BEGIN {print 1000 * s}')"; else row train "$seq" peer "$what" failed - -; fi
    else
      row train "$seq" peer "train step: PyTorch context parallelism" skipped - -
    fi
    for st in $TRAIN_STRATEGIES; do
      name=t_${st}_$seq
      step "$name" 300 $RUN $B/sparsering-exec train --backend $BACKEND --model $TM "${CLUSTER[@]}" $(ours_flags $st) --seq "$n" \
        --steps $steps --data passkey --loss all --lr 1e-4 --predict --attn-host-cache --csv "$L/$name.csv" --label "$name"
      grep -E "^train: .*(params|memory)|^predict|rror|failed" "$L/$name.log" | sed "s/^/   /" | tee -a "$S"
      s=$(median_step "$L/$name.csv" $TIMED)
      what="train step: $(ours_what $st)"
      if [ -n "$s" ]; then row train "$seq" ours "$what, $(awk -v n="$nn" -v s="$s" 'BEGIN {printf "%.0f", n / s}') tok/s" - - \
        "$(awk -v s="$s" 'BEGIN {print 1000 * s}')"; else row train "$seq" ours "$what" failed - -; fi
    done
  done
fi

exec_table "ours on $NP ranks, backend $BACKEND" "$L"/l_*.log 2>&1 | tee -a "$S"
{
  echo "== ours against the peer (ratio: the fastest peer run of the same length and kind over the row's time; above 1: faster than the peer)"
  echo "| seq | what | fwd ms | bwd ms | fwd+bwd ms | ratio to the peer |"
  echo "|---|---|---|---|---|---|"
  awk -F'\t' '
    function num(x) { return x ~ /^[0-9.]+$/ }
    function ms(x) { return num(x) ? sprintf("%.1f", x) : x }
    NR == FNR { if ($3 == "peer" && num($7) && (!(($1, $2) in ref) || $7 < ref[$1, $2])) ref[$1, $2] = $7; next }
    { r = (num($7) && (($1, $2) in ref)) ? sprintf("%.2fx", ref[$1, $2] / $7) : "-"
      printf "| %s | %s | %s | %s | %s | %s |\n", $2, $4, ms($5), ms($6), ms($7), r }' "$ROWS" "$ROWS"
} | tee -a "$S"
tar czf "$OUT/logs.tgz" -C "$L" . 2>/dev/null
echo "== [$(( $(date +%s) - T0 ))s] done" | tee -a "$S"
