#!/bin/bash
# Call 2 (4 x H100, one job a GPU): the GPU-built runs form; calibration at a layer's walks and the re-prediction;
# train-gpu-check with the new TF32 bounds, then the trainer at 64K with --fwd-runs against the compiled peer.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
NG=$(nvidia-smi -L | wc -l); echo "GPUs: $NG"
g() { echo $(( $1 % NG )); }
( export CUDA_VISIBLE_DEVICES=$(g 0); OUT=$O/runs bash scripts/gpu/runs_gpu_check.sh ) > $O/job0.log 2>&1 &
( export CUDA_VISIBLE_DEVICES=$(g 1)
  FOLDERS="results/exec/2026-11-27-h100x4-vs-context-parallel-new-kernels
results/exec/2026-11-27-h100x4-vs-context-parallel
results/exec/2026-11-27-h100-layer-fwd-runs
results/train/2026-11-27-h100-vs-peer-64k-sustained-gemm
results/train/2026-11-27-h100-vs-peer-64k-keep-layers
results/train/2026-11-27-h100-vs-peer-32k-split
results/gating/2026-11-27-h100-moba-gpu-gate" \
  CURRENT="results/exec/2026-11-27-h100x4-vs-context-parallel-new-kernels
results/train/2026-11-27-h100-vs-peer-64k-sustained-gemm
results/train/2026-11-27-h100-vs-peer-64k-keep-layers" \
  OUT=$O/calwalk SR_BUDGET_S=520 bash scripts/gpu/calib_walk_run.sh ) > $O/job1.log 2>&1 &
( export CUDA_VISIBLE_DEVICES=$(g 2)
  for p in tf32 bf16; do echo "== train-gpu-check $p"; timeout 60 bin/sparsering-exec train-gpu-check --model tiny-25m --seq 128 --precision $p --time-steps 0 2>&1 | grep -E "recomputation|MLP in|^  (ok|FAIL)|^train-gpu-check"; done
  OUT=$O/peer EXTRA=--fwd-runs RUNS='compiled topp' LIMIT_S=150 bash scripts/gpu/train_vs_peer.sh 64K 2>&1 | tail -12 ) > $O/job2.log 2>&1 &
t0=$(date +%s)
while [ $(jobs -r | wc -l) -gt 0 ] && [ $(( $(date +%s) - t0 )) -lt 550 ]; do sleep 20; echo "t=$(( $(date +%s) - t0 )) running $(jobs -r | wc -l)"; done
for j in 0 1 2; do echo "===== job$j"; tail -45 $O/job$j.log; done
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
