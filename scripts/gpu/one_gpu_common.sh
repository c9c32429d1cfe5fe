# one_gpu_common.sh — sourced by the one-GPU executor scripts (fpdt_run.sh, adaspa_run.sh) from the repository
# root once they have set OUT (what the run tool brings back), W (logs), BUDGET (seconds after which no step
# starts) and STEP_KEEP (an extended regex: the lines of a step's log its summary keeps). Sets S (the summary),
# t0 and log(), records the GPU, sets up Open MPI (mpi.sh), checks or builds bin/sparsering-exec (the script
# exits when neither works), writes CL (one GPU of this machine's kind as a cluster file: a plan's world must
# equal the job's ranks) and defines step().
#
# The cluster: on an H100 models/clusters/h100-1x1-calibrated.json (sparsering-exec calibrate on one H100,
# 2026-11-27, the current kernels: results/train/2026-11-27-h100-vs-peer-64k-sustained-gemm); elsewhere h200-1x1-calibrated (sparsering-exec
# calibrate on one H200, 2026-11-27, the current kernels: results/exec/2026-11-27-h200-layer-vs-cudnn).
mkdir -p "$OUT" "$W/csv"
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN
S="$OUT/summary.txt"
t0=$(date +%s)
log() { echo "== [$(( $(date +%s) - t0 ))s] $*" | tee -a "$S"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$S"
free -g | head -2 | tee -a "$S"
. scripts/gpu/mpi.sh  # MPIRUN, sr_exec_ready
ready=$(sr_exec_ready "$W/build.log") || { log "$ready: failed"; tail -30 "$W/build.log" | tee -a "$S"; exit 1; }
log "$ready"

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu" in *H100*) base=models/clusters/h100-1x1-calibrated.json ;; *) base=models/clusters/h200-1x1-calibrated.json ;; esac
CL=$W/gpu-1x1.json
python3 -c "
import json
c = json.load(open('$base'))
c['nodes'], c['gpus_per_node'] = 1, 1
c.pop('inter_node', None)
c['description'] = 'one GPU of $base'
json.dump(c, open('$CL', 'w'), indent=1)" || { log "cannot write the cluster from $base"; exit 1; }
log "cluster for --predict: one GPU of $base"

X=($MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec)
# step NAME LIMIT ARGS...: one run of sparsering-exec under its time limit unless the budget is spent; its log
# kept in $W, the lines matching STEP_KEEP (but a layer's set-up and per-pass lines) and its last two step lines
# in the summary
step() {
  local name=$1 lim=$2
  shift 2
  if [ $(( $(date +%s) - t0 )) -ge "$BUDGET" ]; then log "$name: skipped (budget of $BUDGET s spent)"; return; fi
  local s=$(date +%s)
  timeout "$lim" "${X[@]}" "$@" >"$W/$name.log" 2>&1
  local rc=$?
  echo "exit $rc" >>"$W/$name.log"
  { echo "-- $name (exit $rc, $(( $(date +%s) - s )) s): $*"
    grep -E "$STEP_KEEP" "$W/$name.log" | grep -vE "^  layer [0-9]*: (set up|fwd)"
    grep -E "^step" "$W/$name.log" | tail -2; } >>"$S"
}
