#!/bin/bash
# Before: main at fbedcb4 (its bin/sparsering, copied to /tmp/simfast-before before any change); after: branch
# simfast (./bin/sparsering). Run from the worktree root when no other process is busy; interleaved, so both see
# the same machine. Usage: run.sh [runs of bench-sim] [runs of the 512K step]
cd "$(dirname "$0")/../../.."
before=/tmp/simfast-before/sparsering
after=./bin/sparsering
nb=${1:-3}
ns=${2:-7}
for i in $(seq "$nb"); do
  for tag in before after; do
    b=$([ $tag = before ] && echo $before || echo $after)
    echo "== bench-sim $tag run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /usr/bin/time -f "time: %e s wall, %U s user, %S s sys, %M KB peak" $b bench-sim 2>&1
  done
done
for i in $(seq "$ns"); do
  for tag in before after; do
    b=$([ $tag = before ] && echo $before || echo $after)
    echo "== 512K $tag run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /usr/bin/time -f "time: %e s wall, %U s user, %S s sys, %M KB peak" \
      $b sim --model qwen2.5-3b --cluster a100-4x8 --seq 512K --strategy mtraining 2>&1 | grep -E "simulated|time:|^mtraining "
  done
done
