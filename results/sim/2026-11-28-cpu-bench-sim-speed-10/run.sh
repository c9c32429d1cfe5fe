#!/bin/bash
# Before: main at 706e9e2 (its bin/sparsering, copied to /tmp/sr-base10 before any change); after: branch simspeed
# (its bin/sparsering, copied to /tmp/sr-final10). Run from anywhere; interleaved (before, after, before, ...), each run
# started once the two cores had been at least 90% idle for 3 s (the machine is shared: other engineers' builds).
# Usage: run.sh [runs of bench-sim] [runs of the tune example]
cd "$(dirname "$0")/../../.."
before=${BEFORE:-/tmp/sr-base10}
after=${AFTER:-/tmp/sr-final10}
quiet() {  # wait (at most 15 min) until the CPUs were >= 90% idle over 3 s; print how idle
  local t0=$(date +%s) idle=0
  while :; do
    read -r _ u n s i w q sq st _ < /proc/stat; a=$((u + n + s + i + w + q + sq + st)); b=$i
    sleep 3
    read -r _ u n s i w q sq st _ < /proc/stat; a2=$((u + n + s + i + w + q + sq + st)); b2=$i
    idle=$((100 * (b2 - b) / (a2 - a)))
    [ $idle -ge 90 ] || [ $(($(date +%s) - t0)) -ge 900 ] && break
  done
  echo "$idle% idle"
}
for i in $(seq "${1:-3}"); do
  for tag in before after; do
    b=$([ $tag = before ] && echo $before || echo $after)
    q=$(quiet)
    echo "== bench-sim $tag run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg), $q before"
    /usr/bin/time -v $b bench-sim 2>&1 | grep -E "llama|qwen|Elapsed|User time|System time|Maximum resident"
  done
done
for i in $(seq "${2:-0}"); do
  for tag in before after; do
    b=$([ $tag = before ] && echo $before || echo $after)
    q=$(quiet)
    echo "== tune $tag run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg), $q before"
    /usr/bin/time -v $b tune --model qwen2.5-3b --cluster a100-4x8 --seq 512K --pattern vs-topp:0.95 \
      -o /tmp/best-$tag.json > /tmp/tune-$tag.out 2>/tmp/tune-$tag.err
    grep -E "^tune:|^1400 points|^chosen" /tmp/tune-$tag.out
    grep -E "Elapsed|User time|System time|Maximum resident" /tmp/tune-$tag.err
  done
  cmp /tmp/best-before.json /tmp/best-after.json && echo "the chosen plans are identical"
  diff <(sed '1d;/^plan:/d' /tmp/tune-before.out) <(sed '1d;/^plan:/d' /tmp/tune-after.out) > /dev/null &&
    echo "every printed line but the timing and the plan's path is identical"
done
