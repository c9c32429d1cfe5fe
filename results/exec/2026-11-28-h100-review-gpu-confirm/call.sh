#!/bin/bash
# Session 2026-11-28, call 1 (4 GPUs, one job each): the review commit's GPU code confirmed (both GPU tests, the runs
# form's GPU build, calibrate, the Python package) with the set-up phase clock on; the trainer at 32K vs the peer.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
NG=$(nvidia-smi -L | wc -l); echo "GPUs: $NG"; cat $O/gpu.txt
g() { if [ "$NG" -ge 4 ]; then echo $1; else echo $(( $1 % NG )); fi; }
. scripts/gpu/mpi.sh
(
  export CUDA_VISIBLE_DEVICES=$(g 0)
  s=$(date +%s); timeout 250 ./bin/sparsering-gpu-test-vs > $O/gpu_test_vs.log 2>&1; echo "gpu-test-vs: exit $? $(( $(date +%s) - s )) s"
  tail -3 $O/gpu_test_vs.log
  s=$(date +%s); timeout 200 ./bin/sparsering-gpu-test --small > $O/gpu_test.log 2>&1; echo "gpu-test --small: exit $? $(( $(date +%s) - s )) s"
  tail -3 $O/gpu_test.log
) > $O/job0.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$(g 1) SR_SETUP_TIMES=1
  OUT=$O/runs bash scripts/gpu/runs_gpu_check.sh
  grep -h "^setup:" $O/runs/*.log
) > $O/job1.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$(g 2)
  s=$(date +%s)
  timeout 120 $MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec calibrate --backend cuda --cluster models/clusters/h100-1x1-calibrated.json --out $O/h100-1x1-calibrated.json --log $O/calib.csv > $O/calibrate.log 2>&1
  echo "calibrate: exit $? $(( $(date +%s) - s )) s"; grep -E "GEMM|full tiles|walk" $O/calibrate.log | head
  OUT=$O/py timeout 300 bash scripts/gpu/python_check.sh 2>&1 | tail -30
) > $O/job2.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$(g 3)
  OUT=$O/peer32 RUNS='compiled dense topp' LIMIT_S=150 bash scripts/gpu/train_vs_peer.sh 32K 2>&1 | tail -40
) > $O/job3.log 2>&1 &
t0=$(date +%s)
while [ $(jobs -r | wc -l) -gt 0 ] && [ $(( $(date +%s) - t0 )) -lt 530 ]; do sleep 20; echo "t=$(( $(date +%s) - t0 )) running $(jobs -r | wc -l)"; done
for j in 0 1 2 3; do echo "===== job$j"; tail -45 $O/job$j.log; done
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
