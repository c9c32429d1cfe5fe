#!/bin/bash
# Session 2026-11-28f, call J (4 GPUs of one host as 2 "nodes"): one attention layer at 512K, PyTorch's context
# parallelism against our dense USP and striped ring, MTraining's layer 0 and the mean of its 36 layers (the forward on
# the runs form); main 98968c0's binaries; predicted on the calibration of 2026-11-28 call 3 (4 x H200).
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
cp .gpu-c/cal4.json $O/h200-nodes-4-calibrated.json
cp .gpu-c/multi_vs_peer.sh scripts/gpu/multi_vs_peer.sh
SEQS=512K OURS="usp striped-ring mtraining-runs mtraining-all-runs" SR_BUDGET_S=540 \
  SR_LOGS=$O/logs OUT=$O bash scripts/gpu/multi_vs_peer.sh "layer"
find $O -name "*.i32" -delete
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
