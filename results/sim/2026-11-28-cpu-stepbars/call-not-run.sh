#!/bin/bash
# NOT RUN (the session's device time was spent): the measurement the README's "Not explained" asks for, one H100
# (kind nvidia-h100-x1), from the repository root with bin/sparsering-exec carried. Where MTraining's (vs-topp:0.95)
# training step at 32K spends its attention backward, kernel by kernel, beside single layers of the same pattern:
# 1. one layer at 32K and 64K (attn --predict, 3 repetitions); 2. the trainer at 32K (3 steps, --phase-times,
# --predict); 3. every attention kernel of the trainer at 32K (2 steps) and of the 32K layer by Nsight Compute, clocks
# not locked (--clock-control none) and caches not flushed between kernels (--cache-control none: the default flush
# would hide what a step's cold L2 costs against a repeated layer's warm one), one metric (gpu__time_duration.sum).
O=${OUT:-/tmp/out}; mkdir -p $O/logs
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
CL=models/clusters/h100-1x1-calibrated.json
X=bin/sparsering-exec
A="$X attn --backend cuda --model qwen2.5-3b --cluster $CL --repeat 3 --strategy mtraining --pattern vs-topp:0.95"
for s in 32K 64K; do
  timeout 90 $MPIRUN --oversubscribe --bind-to none -np 1 $A --seq $s --predict > $O/logs/layer-$s.log 2>&1; echo "layer $s: $? $(( $(date +%s)-t0 )) s"
done
T="$X train --backend cuda --cluster $CL --model qwen2.5-3b --seq 32K --loss all --strategy mtraining --pattern vs-topp:0.95"
timeout 120 $T --steps 3 --phase-times --predict > $O/logs/train-32K.log 2>&1; echo "train 32K: $? $(( $(date +%s)-t0 )) s"
K='regex:sa_|bars|tt_|add|fill|bf16|prepare|expand|scan|zero'
timeout 240 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --log-file $O/logs/ncu-train-32K.csv \
  --kernel-name "$K" $T --steps 2 > $O/logs/ncu-train-32K.log 2>&1; echo "ncu train: $? $(( $(date +%s)-t0 )) s"
timeout 120 $MPIRUN --oversubscribe --bind-to none -np 1 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  --log-file $O/logs/ncu-layer-32K.csv --kernel-name "$K" $A --seq 32K > $O/logs/ncu-layer-32K.log 2>&1; echo "ncu layer: $? $(( $(date +%s)-t0 )) s"
