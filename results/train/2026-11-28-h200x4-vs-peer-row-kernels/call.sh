#!/bin/bash
# Session 2026-11-28b, call 4 (4 x H100): the trainer with the row kernels against the compiled peer at 32K (GPU 0) and
# 64K (GPU 1); on GPUs 2-3 the executor's calibration and MTraining with online estimation (vs-online:0.95) at 256K on
# vertical-slash inputs, its estimated pattern kept as a trace (exec_run.sh "cal vson"), for repredict.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
NG=$(nvidia-smi -L | wc -l); echo "GPUs: $NG"
(
  export CUDA_VISIBLE_DEVICES=0
  OUT=$O/peer32 RUNS='compiled dense topp' timeout 540 bash scripts/gpu/train_vs_peer.sh 32K > $O/peer32.console 2>&1; echo "peer 32K: exit $?"
  tail -5 $O/peer32/table.txt
) > $O/job0.log 2>&1 &
[ "$NG" -ge 4 ] && (
  export CUDA_VISIBLE_DEVICES=1
  OUT=$O/peer64 RUNS='compiled dense topp' timeout 540 bash scripts/gpu/train_vs_peer.sh 64K > $O/peer64.console 2>&1; echo "peer 64K: exit $?"
  tail -5 $O/peer64/table.txt
) > $O/job1.log 2>&1 &
[ "$NG" -ge 4 ] && (
  export CUDA_VISIBLE_DEVICES=2,3
  OUT=$O/vson SR_NO_BUILD=1 SR_BUDGET_S=420 timeout 500 bash scripts/gpu/exec_run.sh "cal vson" > $O/vson.console 2>&1; echo "exec_run cal vson: exit $?"
  tail -25 $O/vson/summary.txt
) > $O/job2.log 2>&1 &
t0=$(date +%s)
while [ $(jobs -r | wc -l) -gt 0 ] && [ $(( $(date +%s) - t0 )) -lt 570 ]; do sleep 20; echo "t=$(( $(date +%s) - t0 )) running $(jobs -r | wc -l)"; done
for j in 0 1 2; do [ -f $O/job$j.log ] || continue; echo "===== job$j"; tail -30 $O/job$j.log; done
find $O -name "*.i32" -delete
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
