#!/bin/bash
# kernels_mix_run.sh — the budget-mix call on the GPU machine, lighter than kernels_run.sh: prebuilt binaries (no
# build), the benchmark on the VS-like mask at 128K and MTraining's Qwen2.5-3B budget mix at 64K and 128K
# with the default kernels only (--mix --defaults), dumping the mix's pattern and the 64K outputs; then
# peers.py --mix: our outputs and gradients against FlexAttention on the identical mask, and
# FlexAttention's times on it, causal 128K and VS-like 128K next to them. Logs in $OUT.
# Run from the repository root on the GPU machine: bash scripts/gpu/kernels_mix_run.sh
set -o pipefail
OUT=${OUT:-/tmp/sr-out}
mkdir -p "$OUT" /tmp/sr-dump
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
s=$(date +%s)
timeout 200 ./bin/sparsering-bench-attn --mix --defaults --dump /tmp/sr-dump 2>&1 | tee "$OUT/bench.log"
echo "bench: $(($(date +%s) - s)) s"
ls -la /tmp/sr-dump | tee "$OUT/dump.txt"
s=$(date +%s)
timeout 300 python3 kernels/bench/peers.py --mix --check /tmp/sr-dump 2>&1 | tee "$OUT/peers.log"
echo "peers: $(($(date +%s) - s)) s"
