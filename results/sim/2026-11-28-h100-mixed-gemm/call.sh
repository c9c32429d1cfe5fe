#!/bin/bash
# Session 2026-11-28c, call 2 (one H100, kind nvidia-h100-x1): calibrate on the current build, attention held between
# GEMMs and those GEMMs timed (the step's GEMM rate; the H100's installed file predates that), --attn-seconds 4.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
s=$(date +%s)
timeout 260 $MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec calibrate --backend cuda --cluster models/clusters/h100-1x1-calibrated.json --out $O/h100-1x1-mixed.json --log $O/calib-mixed.csv > $O/calibrate-mixed.log 2>&1
echo "calibrate: exit $? $(( $(date +%s) - s )) s"; grep -E "GEMM|held|rror" $O/calibrate-mixed.log
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
