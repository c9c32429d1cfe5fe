#!/bin/bash
# Session 2026-11-28e, call A (one H200): one Qwen2.5-3B attention layer at 128K, ours (dense; vs-topp:0.95 with
# backward variant 5, then variant 4, the default) next to cuDNN's dense layer in the same job; then racecheck of
# backward variant 5's GPU-test runs (--small --bwd-only 5,5s) in the time left.
O=${OUT:-/tmp/out}; mkdir -p $O/logs
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
t0=$(date +%s)
el() { echo $(( $(date +%s)-t0 )); }
SR_BWD_VARIANT=5 SEQS=128K RUNS='dense topp' OUT=$O/l128 SR_BUDGET_S=200 timeout 260 bash scripts/gpu/layer_vs_cudnn.sh > $O/l128.console 2>&1
echo "layer_vs_cudnn (v5): exit $? $(el) s"; tail -5 $O/l128/summary.txt
CL=/tmp/sr-layer-logs/gpu-1x1.json
for v in 4 5 4; do
SR_BWD_VARIANT=$v timeout 70 $MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster $CL --seq 128K --strategy mtraining --pattern vs-topp:0.95 --repeat 2 --predict > $O/logs/topp128-b$v-$(el).log 2>&1
echo "topp 128K b$v: exit $? $(el) s"
done
grep -H "layer 0: fwd" $O/logs/topp128-*.log | cut -c1-200
L=$(( 560 - $(el) ))
timeout $L compute-sanitizer --tool racecheck bin/sparsering-gpu-test --small --bwd-only 5,5s > $O/racecheck.log 2>&1
echo "racecheck: exit $? $(grep -E 'RACECHECK SUMMARY' $O/racecheck.log | tail -1) $(tail -2 $O/racecheck.log | head -1 | cut -c1-150) $(el) s"
gzip -f $O/racecheck.log
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
