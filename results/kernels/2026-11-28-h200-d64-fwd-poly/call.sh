#!/bin/bash
# Session 2026-11-28d, call 1 (one H200): d = 64 forward with a share of the exponentials on the FMA pipes
# (SR_FWD_POLY 0 / 2 / 4) against cuDNN; the GPU test under each share; ncu of backward variant 4's bars kernel.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
t0=$(date +%s)
el() { echo $(( $(date +%s)-t0 )); }
timeout 100 bin/sparsering-gpu-test > $O/gpu-test-p0.log 2>&1; echo "gpu-test p0: exit $? $(el) s; $(tail -1 $O/gpu-test-p0.log)"
for p in 2 4; do
  SR_FWD_POLY=$p timeout 100 bin/sparsering-gpu-test > $O/gpu-test-p$p.log 2>&1; echo "gpu-test p$p: exit $? $(el) s; $(tail -1 $O/gpu-test-p$p.log)"
done
for r in 1 2; do for p in 0 2 4; do
  SR_FWD_POLY=$p SR_BENCH_ONLY=d64 timeout 60 bin/sparsering-bench-attn --shapes > $O/bench-d64-p$p-r$r.log 2>&1; echo "bench p$p r$r: $? $(el) s"
  grep -E '^dense' $O/bench-d64-p$p-r$r.log | cut -c1-200
done; done
timeout 150 python3 kernels/bench/peers.py --shapes > $O/cudnn-shapes.log 2>&1; echo "peers --shapes: $? $(el) s"
grep -E 'SDPA' $O/cudnn-shapes.log
A="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster models/clusters/h200-1x1-calibrated.json --seq 64K --strategy mtraining --pattern vs-topp:0.95 --layers 1 --repeat 1"
SR_BWD_VARIANT=4 timeout 150 ncu --kernel-name regex:sa_bwd_ws_bars --launch-count 1 --set full --import-source no $MPIRUN --oversubscribe --bind-to none -np 1 $A > $O/ncu-b4-bars.txt 2>&1; echo "ncu b4: $? $(el) s"
timeout 120 ncu --kernel-name regex:'sa_bwd_ws_kernel|sa_bwd_bars_kernel|sa_bwd_dq_wg' --launch-count 3 --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed --csv $MPIRUN --oversubscribe --bind-to none -np 1 $A > $O/ncu-b3-short.csv 2>&1; echo "ncu b3: $? $(el) s"
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
