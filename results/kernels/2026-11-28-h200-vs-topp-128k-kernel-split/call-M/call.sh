#!/bin/bash
# Session 2026-11-28f, call M (one H200): the dense causal layer at 128K on the same kernels, kernel by kernel (ncu
# durations), for the rates per computed pair beside call L's; main 98968c0's binaries.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
A="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster models/clusters/h200-1x1-calibrated.json --seq 128K"
t0=$(date +%s)
timeout 40 $MPIRUN --oversubscribe --bind-to none -np 1 $A --strategy dense-ring --layers 1 --repeat 2 > $O/dense128.log 2>&1; echo "dense128 $? $(( $(date +%s)-t0 ))"
timeout 60 $MPIRUN --oversubscribe --bind-to none -np 1 ncu --metrics gpu__time_duration.sum --csv --log-file $O/ncu-dense.csv $A --strategy dense-ring --layers 1 --repeat 1 > $O/ncu-dense.log 2>&1; echo "ncu-dense $? $(( $(date +%s)-t0 ))"
cd $O && tar czf /tmp/all.tgz . && mv /tmp/all.tgz $O/all.tgz
