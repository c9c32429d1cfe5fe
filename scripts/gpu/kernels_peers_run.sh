#!/bin/bash
# kernels_peers_run.sh — the kernels' correctness and speed next to cuDNN in one call on the GPU machine:
# the GPU test (every forward and backward variant against the CPU reference, all cases), the benchmark
# (Qwen2.5-3B attention shape: GQA 16/2, d 128, bf16; dense causal 16K and 64K, VS-like 64K and 128K,
# the budget mix 64K and 128K; the default kernels and every Hopper variant), then SDPA's cuDNN backend at
# 16K, 64K and 128K on the same GPU. Logs in $OUT; the last lines are the tables.
# Run from the repository root, binaries built first (here or on the development machine):
#   make bin/sparsering-gpu-test bin/sparsering-bench-attn && bash scripts/gpu/kernels_peers_run.sh
set -o pipefail
OUT=${OUT:-/tmp/sr-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 160 stdbuf -oL ./bin/sparsering-gpu-test >"$OUT/gpu_test.log" 2>&1
echo "gpu-test exit $?"; grep -E "FAIL|failed" "$OUT/gpu_test.log" | tail -4
timeout 200 stdbuf -oL ./bin/sparsering-bench-attn --skip-cmp >"$OUT/bench.log" 2>&1
echo "bench exit $?"; grep -v "^runs form" "$OUT/bench.log" | tail -7
timeout 100 python3 kernels/bench/peers.py --cudnn >"$OUT/peers.log" 2>&1
echo "peers exit $?"; grep -v Warn "$OUT/peers.log" | tail -4
python3 kernels/bench/table.py "$OUT/bench.log" "$OUT/peers.log" | tee "$OUT/table.txt"
