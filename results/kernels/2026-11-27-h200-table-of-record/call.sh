#!/bin/bash
# Call 3 (2 x H200): calibrate 1x2 (both GPUs) and 1x1 with the sustained GEMM rate and the layer-shaped calls; the
# kernel table of record on one H200 (GPU 1); the trainer at 128K with --fwd-runs against the compiled peer (GPU 0).
O=${OUT:-/tmp/out}; mkdir -p $O/cal
. scripts/gpu/mpi.sh
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt; cat $O/gpu.txt
NG=$(nvidia-smi -L | wc -l)
t0=$(date +%s)
if [ "$NG" -ge 2 ]; then
  timeout 120 $MPIRUN --oversubscribe --bind-to none -np 2 bin/sparsering-exec calibrate --backend cuda \
    --cluster models/clusters/h200-1x2-calibrated.json --out $O/cal/h200-1x2-calibrated.json --log $O/cal/calib-1x2.csv \
    > $O/cal/calibrate-1x2.log 2>&1
  echo "calibrate 1x2: exit $? $(( $(date +%s) - t0 )) s"
fi
( export CUDA_VISIBLE_DEVICES=0
  s=$(date +%s)
  timeout 120 $MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec calibrate --backend cuda \
    --cluster models/clusters/h200-1x1-calibrated.json --out $O/cal/h200-1x1-calibrated.json --log $O/cal/calib-1x1.csv \
    > $O/cal/calibrate-1x1.log 2>&1
  echo "calibrate 1x1: exit $? $(( $(date +%s) - s )) s"
  CAL=$O/cal/h200-1x1-calibrated.json OUT=$O/peer EXTRA=--fwd-runs RUNS='compiled topp' LIMIT_S=200 bash scripts/gpu/train_vs_peer.sh 128K 2>&1 | tail -12
) > $O/job0.log 2>&1 &
( export CUDA_VISIBLE_DEVICES=$(( 1 % NG ))
  OUT=$O/table PEERS_MIX=0 bash scripts/gpu/kernels_final_run.sh ) > $O/job1.log 2>&1 &
while [ $(jobs -r | wc -l) -gt 0 ] && [ $(( $(date +%s) - t0 )) -lt 560 ]; do sleep 20; echo "t=$(( $(date +%s) - t0 )) running $(jobs -r | wc -l)"; done
for j in 0 1; do echo "===== job$j"; tail -50 $O/job$j.log; done
grep -hE "gemm|attention (fwd|bwd) full" $O/cal/calibrate-1x*.log
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
