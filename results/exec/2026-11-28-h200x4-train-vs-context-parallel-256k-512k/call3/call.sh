#!/bin/bash
# Session 2026-11-28c, call 3 (4 GPUs of one host as 2 "nodes"): calibrate at W = 4, then the training step of the
# Qwen2.5-3B shape at 256K against PyTorch's context parallelism with FSDP2 (ours: striped ring, MTraining) on the
# current kernels (the 256K step was last measured on 2026-11-27's kernels).
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
TRAIN_SEQS=256K PEER_TRAIN_FLAGS="--params sharded" TRAIN_STRATEGIES="striped-ring mtraining" SR_BUDGET_S=530 \
  SR_LOGS=$O/logs OUT=$O bash scripts/gpu/multi_vs_peer.sh "cal train"
find $O -name "*.i32" -delete
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
