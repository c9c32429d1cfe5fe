#!/bin/bash
# Session 2026-11-28f, call K (one H200): (1) branch adaspa-f16's check (helper): AdaSpa's masses with f16x2
# exponentials against fp32; (2) branch qskip: how many quadrants the pre-pass marks empty on the vs-topp:0.95 layers
# 0-1 at 128K (SR_QSKIP_STATS=1), the tile form.
O=${OUT:-/tmp/out}; mkdir -p $O/adaspa $O/qskip
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
t0=$(date +%s)
mkdir -p .gpu-k; tar xJf .gpu-c/a.tar.xz -C .gpu-k; cp .gpu-k/a/* bin/
OUT=$O/adaspa timeout 220 bash .gpu-c/adaspa_f16_run.sh > $O/adaspa/console.txt 2>&1
echo "adaspa: exit $? $(( $(date +%s) - t0 )) s"; tail -12 $O/adaspa/console.txt
. scripts/gpu/mpi.sh
A="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster models/clusters/h200-1x1-calibrated.json --seq 128K --strategy mtraining --pattern vs-topp:0.95 --layers 2 --repeat 1"
SR_QSKIP_STATS=1 SR_FWD_QSKIP=1 SR_BWD_QSKIP=1 timeout 90 $MPIRUN --oversubscribe --bind-to none -np 1 $A > $O/qskip/stats-tile.log 2>&1
echo "qskip stats: exit $? $(( $(date +%s) - t0 )) s"; grep -E "qskip stats|layer\(s\)" $O/qskip/stats-tile.log | cut -c1-250
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
