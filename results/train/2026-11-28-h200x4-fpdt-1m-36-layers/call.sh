#!/bin/bash
# Session 2026-11-28h, call F (4 H200 of one host): FPDT at 1M tokens, the whole Qwen2.5-3B shape (36 layers), dense,
# activation offload, one step, Ulysses over the 4 GPUs; predicted on models/clusters/h200-1x2-calibrated.json with 4 GPUs
# a node and the x4 host's 512 GiB (copied in as the script's calibration).
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
free -g > $O/host-mem.txt
cp .gpu-c/cal4fpdt.json $O/h200-1x4-calibrated.json
NP=4 TRAIN_PATTERN=dense TRAIN_LIMIT=540 SR_BUDGET_S=570 SR_LOGS=$O/logs OUT=$O \
  bash scripts/gpu/fpdt_multi_run.sh train 2>&1 | while IFS= read -r l; do echo "$(date +%T) $l"; done
free -g >> $O/host-mem.txt
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
