#!/bin/bash
# Session 2026-11-28, call 5 (one H200): the HF Qwen2 step of the whole Qwen2.5-3B shape (36 layers) at 128K, SDPA
# against sparsering with every layer on its own pattern (vs-topp:0.95).
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
OUT=$O/hf BENCH_PATTERNS=vs-topp:0.95 BENCH_BUDGET_S=300 timeout 330 bash scripts/gpu/python_check.sh bench 2>&1 | tail -12
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
