#!/bin/bash
# Before: main at 0f745ec (its bin/sparsering, copied to /tmp/sr-main8 before any change); after: branch simspeed8
# (./bin/sparsering). Run from the worktree root; interleaved (before, after, before, ...), so both see the same machine.
# Usage: run.sh [runs of bench-sim]
cd "$(dirname "$0")/../../.."
before=/tmp/sr-main8
after=./bin/sparsering
fmt="time: %e s wall, %U s user, %S s sys, %M KB peak"
for i in $(seq "${1:-3}"); do
  for tag in before after; do
    b=$([ $tag = before ] && echo $before || echo $after)
    echo "== bench-sim $tag run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /usr/bin/time -f "$fmt" $b bench-sim 2>&1
  done
done
