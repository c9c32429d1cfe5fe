#!/bin/bash
# Session 2026-11-28b, call 9 (one H200): calibrate with attention held between GEMMs and those GEMMs timed (the step's GEMM rate).
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
s=$(date +%s)
timeout 200 $MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec calibrate --backend cuda --cluster models/clusters/h200-1x1-calibrated.json --out $O/h200-1x1-mixed.json --log $O/calib-mixed.csv > $O/calibrate-mixed.log 2>&1
echo "calibrate: exit $? $(( $(date +%s) - s )) s"; grep -E "GEMM|held|rror" $O/calibrate-mixed.log
