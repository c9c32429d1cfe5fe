#!/bin/bash
# call 3 (one H200): AdaSpa's masses with turns (windows meeting on alternating barriers) against the default, one process
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
timeout 40 bin/sparsering-bench-adaspa --n 16384,65536 --reps 3 > $O/bench-quick.txt 2>&1; echo "quick $? $(( $(date +%s)-t0 ))"
timeout 60 bin/sparsering-bench-adaspa --n 65536,131072 --block 128 --reps 7 > $O/bench-b128.txt 2>&1; echo "b128 $? $(( $(date +%s)-t0 ))"
timeout 60 bin/sparsering-bench-adaspa --n 65536,131072 --block 64 --reps 7 > $O/bench-b64.txt 2>&1; echo "b64 $? $(( $(date +%s)-t0 ))"
timeout 60 bin/sparsering-bench-adaspa --n 65536,131072 --block 128 --reps 7 > $O/bench-b128-2.txt 2>&1; echo "b128-2 $? $(( $(date +%s)-t0 ))"
timeout 120 bin/sparsering-gpu-test-vs > $O/gpu-test-vs.txt 2>&1; echo "gpu-test-vs $? $(( $(date +%s)-t0 ))"
grep -E "turns|failed" $O/gpu-test-vs.txt | tail -8
for f in bench-b128 bench-b64 bench-b128-2; do echo "== $f"; grep -v "^  N" $O/$f.txt; done
