#!/bin/bash
# Session 2026-11-28c, call 4 (4 GPUs of one host as 2 "nodes"): the training step of the Qwen2.5-3B shape at 512K,
# PyTorch's context parallelism with FSDP2 against our MTraining (1 warm-up + 1 timed step each: the call's time),
# predicted on the calibration of call 3 (the same host).
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
cp .gpu-c/cal4.json $O/h200-nodes-4-calibrated.json
WARM=1 TIMED=1 TRAIN_SEQS=512K PEER_TRAIN_FLAGS="--params sharded" TRAIN_STRATEGIES="mtraining" SR_BUDGET_S=560 \
  SR_LOGS=$O/logs OUT=$O bash scripts/gpu/multi_vs_peer.sh "train"
find $O -name "*.i32" -delete
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
