#!/bin/bash
# Session 2026-11-28b, call 5 (one H100, kind nvidia-h100-x1): the trainer with the row kernels against the compiled
# PyTorch peer at 32K, then 64K, on the same GPU.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
OUT=$O/peer32 RUNS='compiled dense topp' timeout 250 bash scripts/gpu/train_vs_peer.sh 32K > $O/peer32.console 2>&1; echo "peer 32K: exit $?"
tail -5 $O/peer32/table.txt
OUT=$O/peer64 RUNS='compiled dense topp' timeout 320 bash scripts/gpu/train_vs_peer.sh 64K > $O/peer64.console 2>&1; echo "peer 64K: exit $?"
tail -5 $O/peer64/table.txt
find $O -name "*.i32" -delete
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
