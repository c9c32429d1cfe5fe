#!/bin/bash
# Session 2026-11-28, call 4 (4 GPUs, one job each): the trainer's --phase-times at 32K (with and without: the events'
# cost) and 64K; the HF step at 128K with every layer on its own pattern (36 layers); calibrate on one H100 with the
# L2 term and the Python checks after the per-layer change; train-gpu-check after the phase events.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
NG=$(nvidia-smi -L | wc -l); echo "GPUs: $NG"
g() { if [ "$NG" -ge 4 ]; then echo $1; else echo $(( $1 % NG )); fi; }
. scripts/gpu/mpi.sh
(
  export CUDA_VISIBLE_DEVICES=$(g 0)
  OUT=$O/ph32 BASE=1 TRAIN_S=120 bash scripts/gpu/train_phases.sh 32K > $O/ph32.console 2>&1; echo "phases 32K: exit $?"
  OUT=$O/ph64 TRAIN_S=150 bash scripts/gpu/train_phases.sh 64K > $O/ph64.console 2>&1; echo "phases 64K: exit $?"
  grep -hE "^--|^step +3|^phases +3" $O/ph32/summary.txt $O/ph64/summary.txt 2>/dev/null
) > $O/job0.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$(g 1)
  OUT=$O/hf BENCH_PATTERNS=vs-topp:0.95 BENCH_BUDGET_S=430 timeout 460 bash scripts/gpu/python_check.sh bench 2>&1 | tail -25
) > $O/job1.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$(g 2)
  s=$(date +%s)
  timeout 120 $MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec calibrate --backend cuda --cluster models/clusters/h100-1x1-calibrated.json --out $O/h100-1x1-calibrated.json --log $O/calib-1x1.csv > $O/calibrate-1x1.log 2>&1
  echo "calibrate: exit $? $(( $(date +%s) - s )) s"; grep -E "GEMM|full tiles|beyond|L2" $O/calibrate-1x1.log | head
  OUT=$O/py timeout 300 bash scripts/gpu/python_check.sh 2>&1 | tail -22
) > $O/job2.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$(g 3)
  for p in bf16 tf32; do echo "== train-gpu-check $p"; timeout 90 bin/sparsering-exec train-gpu-check --model tiny-25m --seq 128 --precision $p --time-steps 0 2>&1 | tail -6; done
) > $O/job3.log 2>&1 &
t0=$(date +%s)
while [ $(jobs -r | wc -l) -gt 0 ] && [ $(( $(date +%s) - t0 )) -lt 480 ]; do sleep 20; echo "t=$(( $(date +%s) - t0 )) running $(jobs -r | wc -l)"; done
for j in 0 1 2 3; do echo "===== job$j"; tail -45 $O/job$j.log; done
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
