#!/bin/bash
# kernels_runs_run.sh — the forward form of plan/tiles_runs.c (scattered slashes as 64-key runs) on one GPU: the
# GPU test (every kernel against the CPU reference; the "planner vs runs" cases run the forward on the
# runs form), then `bench --mix --defaults` (VS-like 128K and the budget mix at 64K / 128K with the default
# kernels, each mix row followed by its "runs form" line). Prebuilt binaries; logs in $OUT.
# Run from the repository root on the GPU machine: bash scripts/gpu/kernels_runs_run.sh
set -o pipefail
OUT=${OUT:-/tmp/sr-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv >"$OUT/gpu.txt" 2>&1
s=$(date +%s)
timeout "${TEST_LIMIT_S:-240}" ./bin/sparsering-gpu-test >"$OUT/gputest.txt" 2>&1
echo "gpu-test: exit $? $(tail -1 "$OUT/gputest.txt") $(($(date +%s) - s)) s"
s=$(date +%s)
timeout "${BENCH_LIMIT_S:-300}" ./bin/sparsering-bench-attn --mix --defaults >"$OUT/bench_mix.txt" 2>&1
echo "bench --mix --defaults: exit $? $(($(date +%s) - s)) s"
grep -E "^(case|planner vs runs| +runs form)" "$OUT/gputest.txt"
grep -E "^(mask|vs-like|qwen mix|runs form)" "$OUT/bench_mix.txt"
