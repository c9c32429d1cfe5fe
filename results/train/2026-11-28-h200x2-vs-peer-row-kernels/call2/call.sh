#!/bin/bash
# Session 2026-11-28b, call 2 (4 x H200, one job each): the trainer on main 5191c25 (the row kernels) against the
# compiled PyTorch peer at 32K, 64K and 128K, and where a step's time goes at 64K.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
NG=$(nvidia-smi -L | wc -l); echo "GPUs: $NG"
g() { if [ "$NG" -ge 4 ]; then echo $1; else echo $(( $1 % NG )); fi; }
(
  export CUDA_VISIBLE_DEVICES=$(g 0)
  OUT=$O/peer128 RUNS='compiled dense topp' timeout 560 bash scripts/gpu/train_vs_peer.sh 128K > $O/peer128.console 2>&1; echo "peer 128K: exit $?"
  tail -6 $O/peer128/table.txt
) > $O/job0.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$(g 1)
  OUT=$O/peer64 RUNS='compiled dense topp' timeout 560 bash scripts/gpu/train_vs_peer.sh 64K > $O/peer64.console 2>&1; echo "peer 64K: exit $?"
  tail -6 $O/peer64/table.txt
) > $O/job1.log 2>&1 &
[ "$NG" -ge 4 ] && (
  export CUDA_VISIBLE_DEVICES=$(g 2)
  OUT=$O/peer32 RUNS='compiled dense topp preset' timeout 560 bash scripts/gpu/train_vs_peer.sh 32K > $O/peer32.console 2>&1; echo "peer 32K: exit $?"
  tail -7 $O/peer32/table.txt
) > $O/job2.log 2>&1 &
[ "$NG" -ge 4 ] && (
  export CUDA_VISIBLE_DEVICES=$(g 3)
  OUT=$O/ph64 TRAIN_S=200 bash scripts/gpu/train_phases.sh 64K > $O/ph64.console 2>&1; echo "phases 64K: exit $?"
  grep -hE "^--|^step +3|^phases +3" $O/ph64/summary.txt
) > $O/job3.log 2>&1 &
t0=$(date +%s)
while [ $(jobs -r | wc -l) -gt 0 ] && [ $(( $(date +%s) - t0 )) -lt 575 ]; do sleep 20; echo "t=$(( $(date +%s) - t0 )) running $(jobs -r | wc -l)"; done
for j in 0 1 2 3; do [ -f $O/job$j.log ] || continue; echo "===== job$j"; tail -12 $O/job$j.log; done
find $O -name "*.i32" -delete
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
