#!/bin/bash
# Session 2026-11-28b, call 6 (one H100): calibrate with attention held interleaved with GEMMs (--attn-held gemm, the
# new default) and, for comparison in the same job, alone (--attn-held alone), --attn-seconds 4 each.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
for m in gemm alone; do
  s=$(date +%s)
  timeout 220 $MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec calibrate --backend cuda --cluster models/clusters/h100-1x1-calibrated.json --attn-seconds 4 --attn-held $m --out $O/h100-1x1-held-$m.json --log $O/calib-held-$m.csv > $O/calibrate-held-$m.log 2>&1
  echo "calibrate --attn-held $m: exit $? $(( $(date +%s) - s )) s"; grep -E "GEMM|held|rror" $O/calibrate-held-$m.log
done
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
