#!/bin/bash
# Before: main at 6aa41d8 built in /tmp/simfast-base (bin/sparsering copied there); after: branch simfast
# (./bin/sparsering). Interleaved, three of each, from the worktree root.
cd /work/wt-simfast
for i in 1 2 3; do
  for tag in before after; do
    b=$([ $tag = before ] && echo /tmp/simfast-base/sparsering || echo ./bin/sparsering)
    echo "== $tag run $i $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    { time $b bench-sim ; } 2>&1
  done
done
for i in 1 2 3; do
  for tag in before after; do
    b=$([ $tag = before ] && echo /tmp/simfast-base/sparsering || echo ./bin/sparsering)
    echo "== 512K $tag run $i $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    { time $b sim --model qwen2.5-3b --cluster a100-4x8 --seq 512K --strategy mtraining ; } 2>&1 | grep -E "simulated|real|user|sys|^mtraining "
  done
done
