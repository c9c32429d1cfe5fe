#!/bin/bash
# Session 2026-11-28g, call C (2 H200): FPDT at 1M tokens on two GPUs, a training step of the Qwen2.5-3B shape cut to
# its first 12 decoder layers (the 36-layer step is simulated at 747 s, past a call), dense, activation offload;
# predicted on models/clusters/h200-1x2-calibrated.json (copied in as the script's calibration).
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
free -g > $O/host-mem.txt
cp .gpu-c/cal2.json $O/h200-1x2-calibrated.json
NP=2 TRAIN_LAYERS=${TRAIN_LAYERS:-12} TRAIN_PATTERN=dense TRAIN_LIMIT=520 SR_BUDGET_S=560 SR_LOGS=$O/logs OUT=$O \
  bash scripts/gpu/fpdt_multi_run.sh train 2>&1 | while IFS= read -r l; do echo "$(date +%T) $l"; done
free -g >> $O/host-mem.txt
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
