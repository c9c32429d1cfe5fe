#!/bin/bash
# Session 2026-11-28g, call B (4 H200 of one host as 2 "nodes"): one attention layer at 512K, PyTorch's context
# parallelism against our best dense (USP) and MTraining's mean layer over all 36 layers of the model (forward on the
# runs form); predicted (dense) on the calibration of 2026-11-28 call 3 (4 x H200).
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
cp .gpu-c/cal4.json $O/h200-nodes-4-calibrated.json
SEQS=512K OURS="${OURS:-usp mtraining-all-runs}" SR_BUDGET_S=560 \
  SR_LOGS=$O/logs OUT=$O bash scripts/gpu/multi_vs_peer.sh "layer" 2>&1 | while IFS= read -r l; do echo "$(date +%T) $l"; done
find $O -name "*.i32" -delete
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
