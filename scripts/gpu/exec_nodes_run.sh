#!/bin/bash
# exec_nodes_run.sh — issue 9's measurements on one host of 4 or 8 GPUs (kinds nvidia-h200-x4, -x8), the host
# treated as 2 "nodes" of NP/2 GPUs so that both levels of the double ring run (the planner and the
# executor take node membership from the plan's cluster, not from the machine). The clusters are written
# here by scripts/cluster_nodes.py from models/clusters/h200-1x2.json (after stage cal: from the calibrated
# cluster) with the same NVLink figures for the "inter-node" level, because those are the wires the transfers
# take. Every timed run prints the simulator's prediction on the calibrated cluster; the table of measured
# against predicted is printed last.
#
# Run from the repository root: bash scripts/gpu/exec_nodes_run.sh [STAGES]   (default: a cal s512 weak strong train;
# split over calls of at most 10 minutes, each re-running cal: a later call may find a fresh machine)
#   a       correctness at W = NP against float64 dense masked attention, seq 2000 (uneven shards): every
#           layout (striped:128, zigzag, contiguous) x schedule (ring, double-ring, ulysses, usp) x pattern
#           (dense, VS-like)
#   cal     calibration at W = NP (links inside a node, GEMM, attention kernels per tile kind)
#   s512    dense ring, zigzag ring, striped ring, USP, MTraining (vs-topp:0.95) and MTraining with online
#           estimation (vs-online:0.95:64:128 on --inputs vs) at 512K, one layer forward + backward
#   s1m     the same at 1M
#   weak    dense ring and MTraining at 128K tokens a GPU, W = 2, 4 (and 8 on NP = 8)
#   strong  dense ring and MTraining at 512K tokens, W = 2, 4 (and 8)
#   train   Qwen2.5-3B shape, one training step at 512K on NP GPUs, the dense striped ring vs MTraining
#           (TRAIN_STRATEGIES, default "striped-ring mtraining": the contiguous dense ring's step takes about
#           36 x 8.3 s of attention on 4 GPUs, past the step's limit; train --predict;
#           `sparsering model --model qwen2.5-3b --seq 512K --world 4`: 115.1 GB a GPU for this trainer, so it fits 4)
# NP (default: the GPUs nvidia-smi lists), SR_BUDGET_S (default 540: no step starts after it).
# SR_DRY=1: the same steps on the CPU backend with tiny-test (tiny-25m above 4 ranks) at 1/256 of the lengths
# (2000 tokens stay), to check the script on a machine without GPUs: `SR_DRY=1 NP=4 bash scripts/gpu/exec_nodes_run.sh` (tests/test_exec_nodes_script.c).
# SR_LOGS (default /tmp/sr-nodes-logs) and SR_BIN (default bin) move the logs and the binaries.
set -o pipefail
T0=$(date +%s)
T_END=$((T0 + ${SR_BUDGET_S:-540}))
OUT=${OUT:-/tmp/sr-nodes-out}
L=${SR_LOGS:-/tmp/sr-nodes-logs}
B=${SR_BIN:-bin}  # where sparsering-exec is (the tests' SR_BIN)
rm -rf "$L"
mkdir -p "$L" "$OUT"
S=$OUT/summary.txt
STAGES=${1:-a cal s512 weak strong train}
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN SR_COMM_TIMEOUT=120
has() { [[ " $STAGES " == *" $1 "* ]]; }
. scripts/gpu/exec_steps.sh  # say, step, timed, exec_table, tokens, cluster, launch

if [ -n "${SR_DRY:-}" ]; then
  NP=${NP:-4}
  BACKEND=cpu MODEL=tiny-test
  [ "$NP" -gt 4 ] && MODEL=tiny-25m  # Ulysses' degree (NP) must divide the query heads: tiny-test has 4
else
  NP=${NP:-$(nvidia-smi -L 2>/dev/null | wc -l)}
  BACKEND=cuda MODEL=qwen2.5-3b
fi
if [ "$NP" -lt 4 ]; then echo "exec_nodes_run.sh: needs 4 or 8 ranks (NP=$NP)"; exit 2; fi
say "== exec_nodes_run.sh stages: $STAGES on $NP ranks, backend $BACKEND (started $(date -u +%H:%M:%S), budget ${SR_BUDGET_S:-540} s)"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv >"$L/gpu.txt" 2>&1

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

if has a; then
  say "(a) correctness at W = $NP (2 nodes of $((NP / 2))) vs float64 dense masked attention, seq 2000"
  a_rc=0
  step a_rings 150 $RUN $X "${CLUSTER[@]}" --seq 2000 --layout striped:128,zigzag,contiguous --schedule ring,double-ring \
    --pattern dense,vs-like:64:256:64 --check --skip-empty-sends || a_rc=1
  step a_ulysses 120 $RUN $X "${CLUSTER[@]}" --seq 2000 --layout striped:128,zigzag,contiguous --schedule ulysses,usp \
    --pattern dense,vs-like:64:256:64 --check || a_rc=1
  for f in a_rings a_ulysses; do grep -E "^attn|failed|^sparsering-exec" "$L/$f.log" | sed "s/: $NP ranks.*check worst/: worst/" | tee -a "$S"; done
  if [ $a_rc != 0 ] || grep -qE "FAIL|failed" "$L"/a_*.log; then say "correctness FAILED: stopping"; exit 1; fi
fi

if has cal; then
  say "(cal) calibration at W = $NP"
  step calibrate 120 $RUN $B/sparsering-exec calibrate --backend $BACKEND --cluster "$CN" --out "$CAL" --log "$L/calib.csv"
  grep -vE "^NCCL|^$" "$L/calibrate.log" | sed "s/^/   /" | tee -a "$S"
fi
[ -f "$CAL" ] && CLUSTER=(--cluster "$CAL")

# strategies SEQ: the five strategies and MTraining with online estimation, one layer each
strategies() {
  local n=$(tokens $1)
  for st in dense-ring zigzag-ring striped-ring usp mtraining; do
    timed "s_${st}_$1" 150 --strategy $st --seq $n --skip-empty-sends
  done
  # the estimated pattern kept (--trace-out) so that repredict can simulate the run on it (--trace in its manifest)
  timed "s_mtraining-online_$1" 150 --strategy mtraining --pattern vs-online:0.95:64:128 --inputs vs --seq $n \
    --trace-out "$L/s_mtraining-online_$1.trace"
}
has s512 && { say "(s512) the strategies at 512K on $NP ranks"; strategies 512K; }
has s1m && { say "(s1m) the strategies at 1M on $NP ranks"; strategies 1M; }

# scaling KIND: dense ring and MTraining over W = 2, 4 (, 8); weak: 128K a GPU, strong: 512K in all
scaling() {
  local w n
  for w in 2 4 8; do
    [ $w -gt $NP ] && continue
    if [ $1 = weak ]; then n=$((128 * w))K; else n=512K; fi
    local c=$(cluster $w) RUN=$(launch $w) CLUSTER
    CLUSTER=(--cluster "$c")
    for st in dense-ring mtraining; do timed "$1_${st}_${n}_w$w" 150 --strategy $st --seq $(tokens $n) --skip-empty-sends; done
  done
}
has weak && { say "(weak) 128K tokens a GPU, W = 2, 4, 8 (clusters for each W from the calibrated one)"; scaling weak; }
has strong && { say "(strong) 512K tokens, W = 2, 4, 8 (clusters for each W from the calibrated one)"; scaling strong; }

if has train; then
  say "(train) Qwen2.5-3B shape, random init, one step at 512K on $NP ranks: ${TRAIN_STRATEGIES:-striped-ring mtraining}"
  TM=qwen2.5-3b; [ -n "${SR_DRY:-}" ] && TM=tiny-test
  for st in ${TRAIN_STRATEGIES:-striped-ring mtraining}; do
    step "t_${st}_512K" 280 $RUN $B/sparsering-exec train --backend $BACKEND --model $TM "${CLUSTER[@]}" --strategy $st \
      --seq $(tokens 512K) --steps 1 --data passkey --loss all --lr 1e-4 --predict --attn-host-cache \
      --csv "$L/t_${st}_512K.csv" --label "t_${st}_512K"
    grep -E "^train: .*(params|memory)|^step|^predict|rror|failed" "$L/t_${st}_512K.log" | sed "s/^/   /" | tee -a "$S"
  done
fi

exec_table "measured on $NP ranks, backend $BACKEND" "$L"/s_*.log "$L"/weak_*.log "$L"/strong_*.log 2>&1 | tee -a "$S"
tar czf "$OUT/logs.tgz" -C "$L" . 2>/dev/null
echo "== [$(( $(date +%s) - T0 ))s] done" | tee -a "$S"
