#!/bin/bash
# Session 2026-11-28d, call 2 (one H200): backward variant 4 without spills (producer 40 / consumers 232 registers,
# LSE and D read where used, the next step's query tile loaded ahead): GPU test of every backward variant, variant 4
# against the default 3 (bench mix, a vs-topp:0.95 layer at 64K, alternating), ncu's local-memory requests,
# compute-sanitizer memcheck and racecheck of the small cases with every backward variant.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
t0=$(date +%s)
el() { echo $(( $(date +%s)-t0 )); }
timeout 100 bin/sparsering-gpu-test --bwd > $O/gpu-test-bwd.log 2>&1; echo "gpu-test --bwd: exit $? $(el) s; $(tail -1 $O/gpu-test-bwd.log)"
grep -E "by backward variant" $O/gpu-test-bwd.log | tail -3
A="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster models/clusters/h200-1x1-calibrated.json --seq 64K --strategy mtraining --pattern vs-topp:0.95 --layers 2 --repeat 3"
for r in 1 2; do for v in 3 4; do
  SR_BWD_VARIANT=$v timeout 60 $MPIRUN --oversubscribe --bind-to none -np 1 $A > $O/attn64-b$v-r$r.log 2>&1; echo "attn b$v r$r: $? $(el) s; $(grep -E 'per layer' $O/attn64-b$v-r$r.log | cut -c1-200)"
done; done
for v in 3 4; do
  SR_BWD_VARIANT=$v timeout 80 bin/sparsering-bench-attn --mix --defaults > $O/bench-mix-b$v.log 2>&1; echo "bench b$v: $? $(el) s"
  grep -hE "^(vs-like|qwen)" $O/bench-mix-b$v.log | cut -c1-200
done
A1="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster models/clusters/h200-1x1-calibrated.json --seq 64K --strategy mtraining --pattern vs-topp:0.95 --layers 1 --repeat 1"
for v in 3 4; do
SR_BWD_VARIANT=$v timeout 60 ncu --kernel-name regex:'sa_bwd' --metrics gpu__time_duration.sum,l1tex__t_requests_pipe_lsu_mem_local_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_local_op_st.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed --csv $MPIRUN --oversubscribe --bind-to none -np 1 $A1 > $O/ncu-b$v.csv 2>&1; echo "ncu b$v: $? $(el) s"
done
timeout 120 compute-sanitizer --tool memcheck bin/sparsering-gpu-test --small --bwd > $O/memcheck.log 2>&1; echo "memcheck: $? $(grep -E 'ERROR SUMMARY' $O/memcheck.log | tail -1) $(el) s"
L=$(( 585 - $(el) )); [ $L -gt 30 ] && { timeout $L compute-sanitizer --tool racecheck bin/sparsering-gpu-test --small --bwd > $O/racecheck.log 2>&1; echo "racecheck: $? $(grep -E 'RACECHECK SUMMARY' $O/racecheck.log | tail -1) $(el) s"; }
gzip -f $O/racecheck.log 2>/dev/null
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
