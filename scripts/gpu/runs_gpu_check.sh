#!/bin/bash
# runs_gpu_check.sh — the forward form (--fwd-runs) built on the GPU (kernels/vs_runs.cu, vs_gpu_runs_build) checked on
# one H100 in one call of under 4 minutes, prebuilt sm_90a binaries (no build here: carry bin/sparsering-gpu-test-vs,
# bin/sparsering-exec, .devdeps and .gpu-exec-mpi):
#   1. bin/sparsering-gpu-test-vs runs: the forward form built on the GPU from the GPU's tile form against
#      tiles_runs_build array for array and in cell order, sa_fwd on it the host-built form's bits and the tile form's
#      output within the stated bound (the VS estimator's cases, then planted scattered slashes);
#   2. sparsering-exec attn, one Qwen2.5-3B layer with MTraining's vs-topp:0.95 at 128K on one rank, the plan from
#      the GPU index builder (--index-build gpu: no host fallback) in the tile form (gpu-tiles) and with --fwd-runs
#      (gpu-runs), and --fwd-runs built on the host (--index-build cpu, host-runs: the build the GPU one replaces);
#      --repeat 3 (the last timed), --deterministic --digest: gpu-runs and host-runs must hash alike (the same
#      forward form; the backward on the same tile form);
#   3. the table: each run's set-up (its plan's build) seconds, where the index was built, fwd and bwd ms, the digest.
# Output streams as it comes; logs in $OUT. Run from the repository root: bash scripts/gpu/runs_gpu_check.sh
set -o pipefail
OUT=${OUT:-/tmp/sr-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN PYTHONUNBUFFERED=1
t0=$(date +%s)
# The binaries link cJSON and GSL: from the carried .devdeps where the machine lacks them.
[ -f .devdeps/env.sh ] && . .devdeps/env.sh
. scripts/gpu/mpi.sh  # MPIRUN
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for b in bin/sparsering-gpu-test-vs bin/sparsering-exec; do
  [ -x "$b" ] || { echo "no $b: build it with the sm_90a image and carry it (see the header)"; exit 2; }
  ldd "$b" | grep -q 'not found' && { echo "$b: $(ldd "$b" | grep 'not found' | tr -s ' \t' ' ') (carry .devdeps)"; exit 2; }
done

echo "== [$(( $(date +%s) - t0 ))s] gpu-test-vs runs"
timeout 100 ./bin/sparsering-gpu-test-vs runs 2>&1 | tee "$OUT/gpu_test_vs_runs.log"
echo "gpu-test-vs runs: exit $?" | tee "$OUT/status.txt"

# One GPU of this machine's kind as the cluster (a plan's world must equal the job's ranks).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu" in *H100*) base=models/clusters/h100-1x1-calibrated.json ;; *) base=models/clusters/h200-1x1-calibrated.json ;; esac
CL=$OUT/gpu-1x1.json
python3 -c "
import json
c = json.load(open('$base'))
c['nodes'], c['gpus_per_node'] = 1, 1
c.pop('inter_node', None)
json.dump(c, open('$CL', 'w'), indent=1)" || { echo "cannot write the cluster from $base"; exit 1; }

X=($MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster "$CL"
   --seq 128K --strategy mtraining --pattern vs-topp:0.95 --layers 1 --repeat 3 --deterministic --digest)
RUNS="gpu-tiles gpu-runs host-runs"
for r in $RUNS; do
  case $r in
    gpu-tiles) f=(--index-build gpu) ;;
    gpu-runs) f=(--index-build gpu --fwd-runs) ;;
    host-runs) f=(--index-build cpu --fwd-runs) ;;
  esac
  echo "== [$(( $(date +%s) - t0 ))s] $r: ${f[*]}"
  timeout 70 "${X[@]}" "${f[@]}" 2>&1 | tee "$OUT/$r.log" | grep -E "^attn |layer 0: (set up|fwd|plan device)|digest|rror"
  echo "$r: exit $?" | tee -a "$OUT/status.txt"
done

{
  echo "== vs-topp:0.95, 128K, one layer, one $gpu (the last of 3 repetitions; --deterministic)"
  printf "%-10s %10s %-6s %10s %10s  %s\n" run "set-up s" "index" "fwd ms" "bwd ms" digest
  for r in $RUNS; do
    su=$(grep -oE "layer 0: set up in [0-9.]+ s \(tile index built on the [A-Za-z]+" "$OUT/$r.log" | tail -1)
    s=$(echo "$su" | awk '{print $6}'); on=$(echo "$su" | awk '{print $NF}')
    read fw bw < <(grep -oE "layer 0: fwd [0-9.]+ ms, bwd [0-9.]+ ms" "$OUT/$r.log" | tail -1 | awk '{print $4, $7}')
    dg=$(grep -oE "digest layer 0: [0-9a-f]+" "$OUT/$r.log" | tail -1 | awk '{print $4}')
    printf "%-10s %10s %-6s %10s %10s  %s\n" $r "${s:-?}" "${on:-?}" "${fw:-?}" "${bw:-?}" "${dg:-?}"
  done
  a=$(grep -oE "digest layer 0: [0-9a-f]+" "$OUT/gpu-runs.log" 2>/dev/null | tail -1)
  b=$(grep -oE "digest layer 0: [0-9a-f]+" "$OUT/host-runs.log" 2>/dev/null | tail -1)
  if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "gpu-runs and host-runs outputs: identical"
  else echo "gpu-runs and host-runs outputs: DIFFER (or missing)"; fi
  echo "total $(( $(date +%s) - t0 )) s"
} | tee "$OUT/table.txt"
