# train_common.sh — sourced by the GPU training scripts (from the repository root) once they have set
# OUT (what the run tool brings back) and W (logs): creates both, sets S (the summary), t0 and log(),
# records the GPU, sets up Open MPI (mpi.sh: MPIRUN, MAKE_MPI), makes X the trainer (prebuilt or
# built; the script exits when neither works) and CL1 a one-GPU copy of h200-1x2 (a plan's world must
# equal the job's ranks).
mkdir -p "$OUT" "$W/csv"
export NCCL_NVLS_ENABLE=0
S="$OUT/summary.txt"
t0=$(date +%s)
log() { echo "== [$(( $(date +%s) - t0 ))s] $*" | tee -a "$S"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$S"
. scripts/gpu/mpi.sh
ready=$(sr_exec_ready "$W/build.log") || { log "$ready: failed"; tail -30 "$W/build.log" | tee -a "$S"; exit 1; }
log "$ready"
X=bin/sparsering-exec
CL1="$W/h200-1x1.json"
sed 's/"gpus_per_node": 2/"gpus_per_node": 1/' models/clusters/h200-1x2.json >"$CL1"
