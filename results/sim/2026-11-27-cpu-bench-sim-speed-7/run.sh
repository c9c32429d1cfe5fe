#!/bin/bash
# Before: main at f27e391 (its bin/sparsering, copied to /tmp/sr-main before any change); after: branch simspeed7
# (./bin/sparsering). Run from the worktree root; interleaved (before, after, before, ...), so both see the same machine.
# Usage: run.sh [runs of bench-sim] [runs of the 512K step] [runs of whatif]
cd "$(dirname "$0")/../../.."
before=/tmp/sr-main
after=./bin/sparsering
fmt="time: %e s wall, %U s user, %S s sys, %M KB peak"
for i in $(seq "${1:-3}"); do
  for tag in before after; do
    b=$([ $tag = before ] && echo $before || echo $after)
    echo "== bench-sim $tag run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /usr/bin/time -f "$fmt" $b bench-sim 2>&1
  done
done
for i in $(seq "${2:-7}"); do
  for tag in before after; do
    b=$([ $tag = before ] && echo $before || echo $after)
    echo "== 512K $tag run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /usr/bin/time -f "$fmt" $b sim --model qwen2.5-3b --cluster a100-4x8 --seq 512K --strategy mtraining 2>&1 |
      grep -E "simulated|time:|^mtraining "
  done
done
for i in $(seq "${3:-3}"); do
  for tag in before after; do
    b=$([ $tag = before ] && echo $before || echo $after)
    echo "== whatif $tag run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /usr/bin/time -f "$fmt" $b whatif 2>&1 | grep -E "simulated in|time:"
  done
done
