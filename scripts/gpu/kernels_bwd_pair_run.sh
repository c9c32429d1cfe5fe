#!/bin/bash
# kernels_bwd_pair_run.sh — backward variant 5 (the bars in pairs of compute chunks of one head, SR_BWD_VARIANT=5)
# next to the default 3 and variant 4, on ONE GPU (nvidia-h200), in one call under 540 s, with prebuilt bin/
# binaries (sm_90a; run from the repository root; logs under $OUT):
#   1. bin/sparsering-gpu-test --bwd (every backward variant against the CPU reference, 5 and 5s included);
#   2. for v in 3 4 5, twice, alternating: bench-attn --mix --defaults (its "bwd" column is variant v) and one
#      Qwen2.5-3B attention layer, vs-topp:0.95 at 64K, 2 layers x 3 repeats (sparsering-exec attn);
#   3. compute-sanitizer memcheck of bin/sparsering-gpu-test --small --bwd, then racecheck of its variant 5 runs
#      (--bwd-only 5,5s), in the time left.
# A step that would not fit the budget left (SR_BUDGET_S, default 540) is skipped and says so.
O=${OUT:-/tmp/out}; mkdir -p $O
B=${SR_BUDGET_S:-540}
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt 2>&1
. scripts/gpu/mpi.sh
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
# lim WANT: WANT seconds, or what is left of the budget less 5 s; 0 when under 15 s are left.
lim() { local l=$(( B - 5 - $(el) )); [ $l -lt 15 ] && { echo 0; return; }; [ $l -lt $1 ] && echo $l || echo $1; }
git rev-parse --short HEAD > $O/commit.txt 2>/dev/null

L=$(lim 150); timeout $L bin/sparsering-gpu-test --bwd > $O/gpu-test-bwd.log 2>&1
echo "gpu-test --bwd: exit $? $(el) s; $(tail -1 $O/gpu-test-bwd.log)"
grep -E "FAIL" $O/gpu-test-bwd.log | cut -c1-200
grep -E "by backward variant" $O/gpu-test-bwd.log | tail -4 | cut -c1-300

A="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster models/clusters/h200-1x1-calibrated.json --seq 64K --strategy mtraining --pattern vs-topp:0.95 --layers 2 --repeat 3"
for r in 1 2; do for v in 3 4 5; do
  L=$(lim 60)
  if [ $L -gt 0 ]; then
    SR_BWD_VARIANT=$v timeout $L bin/sparsering-bench-attn --mix --defaults > $O/bench-mix-b$v-r$r.log 2>&1
    echo "bench b$v r$r: exit $? $(el) s"
    grep -hE "^(vs-like|qwen)" $O/bench-mix-b$v-r$r.log | cut -c1-200
  else echo "bench b$v r$r: skipped (budget)"; fi
  L=$(lim 45)
  if [ $L -gt 0 ]; then
    SR_BWD_VARIANT=$v timeout $L $MPIRUN --oversubscribe --bind-to none -np 1 $A > $O/attn64-b$v-r$r.log 2>&1
    echo "attn b$v r$r: exit $? $(el) s; $(grep -E 'per layer' $O/attn64-b$v-r$r.log | cut -c1-200)"
  else echo "attn b$v r$r: skipped (budget)"; fi
done; done

L=$(lim 120)
if [ $L -gt 0 ]; then
  timeout $L compute-sanitizer --tool memcheck bin/sparsering-gpu-test --small --bwd > $O/memcheck.log 2>&1
  echo "memcheck: exit $? $(grep -E 'ERROR SUMMARY' $O/memcheck.log | tail -1) $(tail -1 $O/memcheck.log) $(el) s"
else echo "memcheck: skipped (budget)"; fi
L=$(lim 600)
if [ $L -gt 0 ]; then
  # racecheck of every backward variant takes over 255 s (2026-11-28): variant 5's runs only
  timeout $L compute-sanitizer --tool racecheck bin/sparsering-gpu-test --small --bwd-only 5,5s > $O/racecheck.log 2>&1
  echo "racecheck: exit $? $(grep -E 'RACECHECK SUMMARY' $O/racecheck.log | tail -1) $(el) s"
  gzip -f $O/racecheck.log
else echo "racecheck: skipped (budget)"; fi
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
echo "done $(el) s"
