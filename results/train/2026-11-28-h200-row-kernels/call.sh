#!/bin/bash
# Session 2026-11-28b, call 1 (4 GPUs, one job each): the trainer's RMSNorm/SwiGLU row and vector kernels against
# main's (train-gpu-check; --phase-times at 32K, base and new; the dense step against the compiled peer at 32K);
# calibrate with --attn-seconds 4; the runs form's set-up times.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
NG=$(nvidia-smi -L | wc -l); echo "GPUs: $NG"
g() { if [ "$NG" -ge 4 ]; then echo $1; else echo $(( $1 % NG )); fi; }
. scripts/gpu/mpi.sh
R=$(pwd)
# the base tree: main's binaries beside the same scripts and models
B=/tmp/basedir; rm -rf $B; mkdir -p $B/bin; cp -r scripts models .devdeps $B/; cp .gpu-k/base/* $B/bin/
(
  export CUDA_VISIBLE_DEVICES=$(g 0)
  for p in bf16 tf32; do echo "== train-gpu-check $p"; timeout 90 bin/sparsering-exec train-gpu-check --model tiny-25m --seq 128 --precision $p --time-steps 0 > $O/tgc-$p.log 2>&1; echo "exit $?"; grep -E "kernel|passed|failed|FAIL" $O/tgc-$p.log | tail -22; done
  OUT=$O/ph32-new TRAIN_S=120 bash scripts/gpu/train_phases.sh 32K > $O/ph32-new.console 2>&1; echo "phases 32K new: exit $?"
  grep -hE "^--|^step +3|^phases +3" $O/ph32-new/summary.txt
) > $O/job0.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$(g 1)
  cd $B && OUT=$O/ph32-base TRAIN_S=120 bash scripts/gpu/train_phases.sh 32K > $O/ph32-base.console 2>&1; echo "phases 32K base: exit $?"
  grep -hE "^--|^step +3|^phases +3" $O/ph32-base/summary.txt
) > $O/job1.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$(g 2)
  s=$(date +%s)
  timeout 200 $MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec calibrate --backend cuda --cluster models/clusters/h100-1x1-calibrated.json --attn-seconds 4 --out $O/h100-1x1-sustained.json --log $O/calib-sustained.csv > $O/calibrate-sustained.log 2>&1
  echo "calibrate: exit $? $(( $(date +%s) - s )) s"; grep -E "GEMM|full tiles|beyond|L2|held|sustained" $O/calibrate-sustained.log | head -20
  OUT=$O/runs SR_SETUP_TIMES=1 timeout 240 bash scripts/gpu/runs_gpu_check.sh > $O/runs.console 2>&1; echo "runs check: exit $?"
  tail -12 $O/runs/table.txt; grep -hE "set-up|setup" $O/runs/*.log | head -30
) > $O/job2.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$(g 3)
  OUT=$O/peer32 RUNS='compiled dense' LIMIT_S=300 timeout 420 bash scripts/gpu/train_vs_peer.sh 32K > $O/peer32.console 2>&1; echo "peer 32K new: exit $?"
  cd $B && OUT=$O/peer32-base RUNS='dense' LIMIT_S=200 timeout 200 bash scripts/gpu/train_vs_peer.sh 32K > $O/peer32-base.console 2>&1; echo "32K base dense: exit $?"
  tail -8 $O/peer32/summary.txt; tail -5 $O/peer32-base/summary.txt
) > $O/job3.log 2>&1 &
t0=$(date +%s)
while [ $(jobs -r | wc -l) -gt 0 ] && [ $(( $(date +%s) - t0 )) -lt 540 ]; do sleep 20; echo "t=$(( $(date +%s) - t0 )) running $(jobs -r | wc -l)"; done
for j in 0 1 2 3; do echo "===== job$j"; tail -40 $O/job$j.log; done
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
