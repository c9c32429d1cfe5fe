#!/bin/bash
# call 2 (one H200): where the turn-taking AdaSpa kernel stops (bench with progress lines, growing N), synccheck.
O=${OUT:-/tmp/out}; mkdir -p $O
t0=$(date +%s)
for N in 4096 16384 32768 65536; do
  timeout 25 bin/sparsering-bench-adaspa --n $N --reps 3 > $O/bench-$N.txt 2>&1; echo "bench $N: $? $(( $(date +%s)-t0 ))"
done
timeout 90 compute-sanitizer --tool synccheck bin/sparsering-bench-adaspa --n 4096 --reps 1 > $O/synccheck.txt 2>&1; echo "synccheck $? $(( $(date +%s)-t0 ))"
tail -5 $O/synccheck.txt
for N in 4096 16384 32768 65536; do echo "== $N"; cat $O/bench-$N.txt; done
