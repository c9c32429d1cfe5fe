#!/bin/bash
# kernels_sanitize_run.sh — compute-sanitizer memcheck and racecheck of every kernel's GPU test on the GPU machine:
# the attention kernels (`sparsering-gpu-test --small`: every forward and backward variant) and the VS
# estimation, conversion and AdaSpa search kernels (`sparsering-gpu-test-vs`). Prebuilt binaries; logs and
# one summary line per run in $OUT. SAN_LIMIT_S (default 300: racecheck of the small test took 108 s with the lane-0 release, over 130 s with every lane releasing) bounds each run; SAN_TESTS (default both, as
# "gpu-test" and/or "gpu-test-vs") and SAN_TOOLS (default "memcheck racecheck") pick the runs, so that the
# long racecheck runs can take a call each.
# Run from the repository root on the GPU machine: bash scripts/gpu/kernels_sanitize_run.sh
set -o pipefail
OUT=${OUT:-/tmp/sr-out}
mkdir -p "$OUT"
LIM=${SAN_LIMIT_S:-300}
for t in "sparsering-gpu-test --small" "sparsering-gpu-test-vs"; do
  short=${t%% *}
  short=${short#sparsering-}
  case " ${SAN_TESTS:-gpu-test gpu-test-vs} " in *" $short "*) ;; *) continue ;; esac
  for tool in ${SAN_TOOLS:-memcheck racecheck}; do
    name="${t%% *}-$tool"
    s=$(date +%s)
    timeout "$LIM" compute-sanitizer --tool $tool ./bin/$t >"$OUT/$name.log" 2>&1
    rc=$?
    echo "$name: exit $rc$([ $rc = 124 ] && echo " (timed out after $LIM s)") $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$name.log" | tail -1) $(($(date +%s) - s)) s"
  done
done
