#!/bin/bash
# Issue 24: vs-online's plan memory on the CPU. From the repository root: BASE=<bin of the executor before> bash
# results/sim/2026-11-28-cpu-vs-online-plan-memory/run.sh. Writes next to itself.
R=results/sim/2026-11-28-cpu-vs-online-plan-memory
BASE=${BASE:-/work/main/bin}
uptime > $R/uptime.txt
for b in main:$BASE vsmem:bin; do
  n=${b%%:*} d=${b#*:}
  mpirun --oversubscribe -np 2 $d/sparsering-exec attn --backend cpu --model qwen2.5-3b --cluster h200-1x2 \
    --strategy mtraining --pattern vs-online:0.95 --seq 256K --inputs vs --plan-bytes-only > $R/plan-bytes-$n.txt 2>&1
  mpirun --oversubscribe -np 2 $d/sparsering-exec attn --backend cpu --model qwen2.5-3b --cluster h200-1x2 \
    --strategy mtraining --pattern vs-topp:0.95 --seq 256K --plan-bytes-only > $R/plan-bytes-standin-$n.txt 2>&1
  $d/sparsering-exec repredict --root results/exec/2026-11-28-h200x2-vs-online-trace --memory > $R/repredict-memory-$n.txt 2>&1
done
bin/sparsering pattern --model qwen2.5-3b --seq 256K --pattern vs-online:0.95 --layout striped:128 --ranks 2 \
  > $R/pattern-standin.txt 2>&1
bin/sparsering pattern --model qwen2.5-3b --seq 256K --layout striped:128 --ranks 2 \
  --pattern trace:results/exec/2026-11-28-h200x2-vs-online-trace/logs/vson-256K.trace > $R/pattern-estimated.txt 2>&1
