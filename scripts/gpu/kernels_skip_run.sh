#!/bin/bash
# kernels_skip_run.sh — the call that compared the forward's warpgroup skip (variant 5, removed 2026-11-27;
# --skip-cmp now compares the Hopper variants of sparsering-bench-attn) with variant 2, and
# profiled the budget mix's forward (results/JOURNAL.md, "A warpgroup skip, tried"). Prebuilt binaries.
#   bash scripts/gpu/kernels_skip_run.sh       GPU test (every variant), bench --skip-cmp (defaults, v2 next to v5)
#                                        with the dumps, peers.py --mix --check, memcheck and racecheck on
#                                        --small with every forward and backward variant (fused ones included)
#   bash scripts/gpu/kernels_skip_run.sh ncu   Nsight Compute on the default forward of the mix at 128K (the 53rd
#                                        sa_fwd_wg_kernel launch of bench --mix --defaults: 26 a case before it)
# Logs in $OUT. Run from the repository root on the GPU machine.
set -o pipefail
OUT=${OUT:-/tmp/sr-out}
mkdir -p "$OUT" /tmp/sr-dump
export PYTHONUNBUFFERED=1
if [ "$1" = ncu ]; then
  timeout 300 ncu --clock-control none -k regex:sa_fwd_wg_kernel --launch-skip 52 -c 1 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section Occupancy --section LaunchStats ./bin/sparsering-bench-attn --mix --defaults >"$OUT/ncu_mix128k_fwd.log" 2>&1
  echo "ncu: exit $?"
  exit 0
fi
timeout 120 ./bin/sparsering-gpu-test 2>&1 | tee "$OUT/gpu_test.log" | tail -1
timeout 220 ./bin/sparsering-bench-attn --skip-cmp --dump /tmp/sr-dump 2>&1 | tee "$OUT/bench.log" | tail -8
timeout 200 python3 kernels/bench/peers.py --mix --check /tmp/sr-dump 2>&1 | tee "$OUT/peers.log" | tail -9
for tool in memcheck racecheck; do
  s=$(date +%s)
  timeout 110 compute-sanitizer --tool $tool ./bin/sparsering-gpu-test --small >"$OUT/$tool.log" 2>&1
  echo "$tool: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1) $(($(date +%s) - s)) s"
done
