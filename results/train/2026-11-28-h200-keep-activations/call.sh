#!/bin/bash
# Session 2026-11-28c, call 5 (one GPU): whole-layer keeping (train --keep-activations, default auto) on the GPU:
# train-gpu-check in both precisions, the 32K step by class of work with and without it, then the trainer against the
# compiled PyTorch peer at 64K and 32K in the same job.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
t0=$(date +%s)
for p in bf16 tf32; do
  timeout 60 $MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec train-gpu-check --model tiny-25m --seq 128 --precision $p --time-steps 0 > $O/tgc-$p.log 2>&1
  echo "train-gpu-check $p: exit $? $(( $(date +%s)-t0 )) s"; grep -iE "whole|fail|passed" $O/tgc-$p.log | tail -4
done
OUT=$O/ph32-auto TRAIN_S=100 timeout 220 bash scripts/gpu/train_phases.sh 32K > $O/ph32-auto.console 2>&1; echo "phases 32K auto: $? $(( $(date +%s)-t0 )) s"
OUT=$O/ph32-off TRAIN_S=100 timeout 220 bash scripts/gpu/train_phases.sh 32K --keep-activations off > $O/ph32-off.console 2>&1; echo "phases 32K off: $? $(( $(date +%s)-t0 )) s"
grep -hE "^step +3|kept whole|no layer kept" $O/ph32-*/logs/*.log 2>/dev/null | cut -c1-220
OUT=$O/peer64 RUNS='compiled dense topp' timeout 250 bash scripts/gpu/train_vs_peer.sh 64K > $O/peer64.console 2>&1; echo "peer 64K: exit $? $(( $(date +%s)-t0 )) s"
tail -5 $O/peer64/table.txt
OUT=$O/peer32 RUNS='compiled topp' timeout 150 bash scripts/gpu/train_vs_peer.sh 32K > $O/peer32.console 2>&1; echo "peer 32K: exit $? $(( $(date +%s)-t0 )) s"
tail -4 $O/peer32/table.txt
find $O -name "*.i32" -delete
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
