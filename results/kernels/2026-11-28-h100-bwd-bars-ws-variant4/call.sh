#!/bin/bash
# Session 2026-11-28c, call 7 (one H100): backward variant 4 (the bars on the warp-specialized kernel, branch barsws):
# the GPU test of every backward variant (4 and 4s new), then the benchmark's VS-like and budget-mix rows with the
# default backward (variant 3) and with SR_BWD_VARIANT=4, alternating, and one vs-topp:0.95 layer at 64K each way.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
t0=$(date +%s)
timeout 150 bin/sparsering-gpu-test --bwd > $O/gpu-test-bwd.log 2>&1; echo "gpu-test --bwd: exit $? $(( $(date +%s)-t0 )) s"
grep -E "failed|by backward variant" $O/gpu-test-bwd.log | tail -6
for v in 3 4; do
  SR_BWD_VARIANT=$v timeout 60 bin/sparsering-bench-attn --mix --defaults > $O/bench-mix-b$v-$(date +%s).log 2>&1; echo "bench b$v: $? $(( $(date +%s)-t0 )) s"
  [ $(( $(date +%s)-t0 )) -gt 200 ] && break
done
grep -hE "^(VS-like|budget|mix)" $O/bench-mix-*.log | head -8
A="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster models/clusters/h100-1x1-calibrated.json --seq 64K --strategy mtraining --pattern vs-topp:0.95 --layers 2 --repeat 3"
for v in 3 4; do
  SR_BWD_VARIANT=$v timeout 60 $MPIRUN --oversubscribe --bind-to none -np 1 $A > $O/attn64-b$v.log 2>&1; echo "attn b$v: $? $(( $(date +%s)-t0 )) s"
  grep -E "per layer" $O/attn64-b$v.log
done
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
