#!/bin/bash
# Session 2026-11-28f, call H (4 GPUs of one host as 2 "nodes"): the training step of the Qwen2.5-3B shape at 512K,
# PyTorch's context parallelism with FSDP2 against our dense striped ring and our MTraining (backward variant 5 the
# default; main 98968c0), 1 warm-up + 1 timed step each, predicted on the calibration of 2026-11-28 call 3 (4 x H200).
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
git rev-parse --short HEAD > $O/commit.txt 2>/dev/null
cp .gpu-c/cal4.json $O/h200-nodes-4-calibrated.json
WARM=1 TIMED=1 TRAIN_SEQS=512K PEER_TRAIN_FLAGS="--params sharded" TRAIN_STRATEGIES="striped-ring mtraining" SR_BUDGET_S=575 \
  SR_LOGS=$O/logs OUT=$O bash scripts/gpu/multi_vs_peer.sh "train"
find $O -name "*.i32" -delete
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
