#!/bin/bash
# exec_run.sh — the executor's measurements on the GPU machine (2 x H200, NVLink), in one call of
# kind nvidia-h200-x2 (about 6 minutes of its 10; every step has its own time limit and the whole
# script stops starting steps at SR_BUDGET_S seconds, default 540):
#   build; (a) correctness against dense attention (ring, Ulysses, USP on the CUDA backend);
#   calibration (writes the calibrated cluster); (b) dense striped ring at 128K and 256K (overlap
#   efficiency); (c) MTraining vs dense ring at 256K; (d) more configurations; (c) at 512K last (its
#   CPU-side preparation is the slowest part). Every timed run also prints the simulator's
#   prediction on the calibrated cluster, so (d)'s table (measured vs predicted, mean and max error)
#   covers (b), (c) and (d). The table is printed last.
# Run from the repository root:  bash scripts/gpu/exec_run.sh [STAGES]   (any of: a cal b c d c512 vson; default all
# but vson)
# If one call cannot hold it all, split it:  bash scripts/gpu/exec_run.sh "a cal b c"  then  bash scripts/gpu/exec_run.sh "cal d c512"
# (calibration is 10 s; a later call re-runs it because the machine may be a fresh one).
# Output (three files: the run tool brings back only a few): $OUT/summary.txt grows as steps finish;
# $OUT/logs.tgz holds every run's full output (refreshed after each step); the calibrated cluster is
# $OUT/h200-1x2-calibrated.json. Do not pipe this through tail.
# C_PATTERN=vs-online:0.95 (for example) sets MTraining's pattern (default: the strategy's vs-topp:0.95).
# Stage vson (not in the default): MTraining with online estimation (vs-online:0.95) on inputs whose attention
# is vertical-slash (`--inputs vs`, docs/exec.md) against the dense ring on the same inputs, 256K; first its
# correctness at seq 2000 (striped:128 and zigzag, --check). The 256K run predicts from the pattern it estimated
# and writes it as a trace ($L/vson-256K.trace, in logs.tgz) for `sparsering sim --pattern trace:PATH`.
# Layout of (b): striped:1 by default (B_LAYOUT), the striped-ring strategy's layout (its CPU-side
# preparation takes 0.07 s a layer at 256K since the planner's class tables, docs/plan.md).
set -o pipefail
T0=$(date +%s)
T_END=$((T0 + ${SR_BUDGET_S:-540}))
OUT=${OUT:-/tmp/sr-exec-out}
L=/tmp/sr-exec-logs
rm -rf "$L"
mkdir -p "$L" "$OUT"
S=$OUT/summary.txt
STAGES=${1:-a cal b c d c512}
B_LAYOUT=${B_LAYOUT:-striped:1}
MT=(--strategy mtraining ${C_PATTERN:+--pattern "$C_PATTERN"})  # C_PATTERN: e.g. vs-online:0.95 once it runs on GPUs
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN SR_COMM_TIMEOUT=60
has() { [[ " $STAGES " == *" $1 "* ]]; }
. scripts/gpu/exec_steps.sh  # say, step, timed, exec_table
say "== exec_run.sh stages: $STAGES (started $(date -u +%H:%M:%S), budget ${SR_BUDGET_S:-540} s)"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv >"$L/gpu.txt" 2>&1

. scripts/gpu/mpi.sh  # MPIRUN, MAKE_MPI
if [ -n "${SR_NO_BUILD:-}" ] && [ -x bin/sparsering-exec ]; then :  # binaries built elsewhere and carried
elif ! timeout 240 make -j32 "${MAKE_MPI[@]}" CUDA_ARCH="-gencode=arch=compute_90a,code=sm_90a" bin/sparsering-exec \
  bin/sparsering >"$L/build.log" 2>&1; then
  say "build failed"; tail -40 "$L/build.log"; exit 1
fi
say "== [$(( $(date +%s) - T0 ))s] built"

RUN="$MPIRUN --oversubscribe --bind-to none -np 2"
X="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b"
CAL=$OUT/h200-1x2-calibrated.json
PRED=()  # --predict once the calibrated cluster exists

CLUSTER=(--cluster h200-1x2)

if has a; then
  say "(a) correctness vs float64 dense masked attention on the same bf16 inputs, seq 2000 (uneven shards)"
  # One node: the double ring is the ring (no transfer crosses a node) and USP of degree 2 is Ulysses,
  # so each code path runs once per layout and pattern kind.
  step a_ring 90 $RUN $X --cluster h200-1x2 --seq 2000 --layout striped:128,zigzag,contiguous --schedule ring \
    --pattern dense,window:64:512,vs-like:64:256:64,block:0.3:128 --check --skip-empty-sends
  step a_ulysses 90 $RUN $X --cluster h200-1x2 --seq 2000 --layout zigzag,striped:128 --schedule ulysses,usp \
    --pattern dense,vs-like:64:256:64 --check --skip-empty-sends
  for f in a_ring a_ulysses; do grep -E "^attn|failed" "$L/$f.log" | sed "s/: 2 ranks.*check worst/: worst/" | tee -a "$S"; done
  if grep -qE "FAIL|failed" "$L"/a_*.log; then say "correctness FAILED: stopping"; exit 1; fi
fi

if has cal; then
  say "(d) calibration: p2p and all-to-all fits, GEMM, attention kernels per tile kind and phase"
  step calibrate 90 $RUN bin/sparsering-exec calibrate --backend cuda --cluster h200-1x2 --out "$CAL" --log "$L/calib.csv"
  grep -vE "^NCCL|^$" "$L/calibrate.log" | sed "s/^/   /" | tee -a "$S"
fi
if [ -f "$CAL" ]; then CLUSTER=(--cluster "$CAL"); PRED=(--predict); fi

if has b; then
  say "(b) dense striped ring ($B_LAYOUT, ring, dense), forward + backward, one layer"
  timed b_128K 60 --layout $B_LAYOUT --schedule ring --pattern dense --seq 128K
  timed b_256K 90 --layout $B_LAYOUT --schedule ring --pattern dense --seq 256K
fi

if has c; then
  say "(c) MTraining (striped:128, double ring, ${C_PATTERN:-vs-topp:0.95}, skipping) vs dense ring (contiguous, ring, dense) at 256K"
  timed c_dense-ring_256K 60 --strategy dense-ring --seq 256K --skip-empty-sends
  timed c_mtraining_256K 90 "${MT[@]}" --seq 256K --skip-empty-sends
fi

if has d; then
  say "(d) more configurations for the prediction comparison"
  timed d_zigzag-ring_128K 60 --strategy zigzag-ring --seq 128K
  timed d_ulysses_128K 60 --layout zigzag --schedule ulysses --pattern dense --seq 128K
  timed d_window_128K 60 --layout striped:128 --schedule ring --pattern window:128:8192 --seq 128K --skip-empty-sends
  timed d_mtraining_128K 60 "${MT[@]}" --seq 128K --skip-empty-sends
fi

if has c512; then
  say "(c) at 512K"
  timed c_dense-ring_512K 120 --strategy dense-ring --seq 512K --skip-empty-sends
  timed c_mtraining_512K 200 "${MT[@]}" --seq 512K --skip-empty-sends
fi

if has vson; then
  say "(vson) MTraining with online estimation (vs-online:0.95, no skipping) vs dense ring, --inputs vs, 256K"
  step vson_check 90 $RUN $X --cluster h200-1x2 --seq 2000 --layout striped:128,zigzag --schedule ring \
    --pattern vs-online:0.95 --inputs vs --check
  grep -E "^attn|failed|check layer" "$L/vson_check.log" | sed "s/^/   /" | tee -a "$S"
  timed c_dense-ring_256Kvs 60 --strategy dense-ring --seq 256K --skip-empty-sends --inputs vs
  timed c_mtraining_256Kvs 150 --strategy mtraining --pattern vs-online:0.95 --seq 256K --inputs vs --trace-out "$L/vson-256K.trace"
fi

exec_table "measured on 2 x H200" "$L"/b_*.log "$L"/c_*.log "$L"/d_*.log 2>&1 | tee -a "$S"
tar czf "$OUT/logs.tgz" -C "$L" . 2>/dev/null
echo "== [$(( $(date +%s) - T0 ))s] done" | tee -a "$S"
