#!/bin/bash
# Session 2026-11-28, call 3 (4 x H100 as 2 "nodes"): calibrate at W = 4 (128K layer-shaped calls now in the default:
# the L2 term), then one Qwen2.5-3B layer at 512K / 256K against PyTorch's context parallelism (ours: zigzag, USP,
# double ring, MTraining on tiles and on the runs form) and the training step at 128K.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
SEQS="512K 256K" TRAIN_SEQS=128K OURS="zigzag-ring usp double-ring mtraining mtraining-runs" \
  TRAIN_STRATEGIES="striped-ring mtraining" SR_BUDGET_S=520 SR_LOGS=$O/logs OUT=$O bash scripts/gpu/multi_vs_peer.sh "cal layer train"
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
