#!/usr/bin/env bash
# run.sh — this folder's numbers again, on the development machine (no GPU), from the repository root:
#   BASE=/path/to/bin-of-939f76f bash results/sim/2026-11-28-cpu-l2-rate/run.sh
# BASE holds sparsering-exec built at main 939f76f (the rule without the L2 term); bin/ is this branch's.
set -eu
R=results/sim/2026-11-28-cpu-l2-rate
LOG=results/sim/2026-11-27-h100-calib-layer-walks/calib-walk.csv  # the 23:12 one-H100 calibration, 16K-128K
T=${TMPDIR:-/tmp}/l2rate
mkdir -p "$T"
# 1. every kept run as committed: the same bytes with either binary (no kept cluster file gives gpu.attn_l2)
"$BASE"/sparsering-exec repredict --root results --csv "$T/root-base.csv" >"$T/root-base.txt"
bin/sparsering-exec repredict --root results --csv "$T/root.csv" >"$T/root.txt"
cmp "$T/root-base.txt" "$T/root.txt" && cmp "$T/root-base.csv" "$T/root.csv" && echo "repredict --root results: identical"
# 2. the H100 folders re-predicted on that log refitted onto each run's own calibration, without and with the term
for v in no-l2 l2; do
  B=$BASE; [ $v = l2 ] && B=$PWD/bin
  CAL_LOG=$LOG SR_BIN=$B OUT="$T/$v" FOLDERS="$(cat $R/folders.txt)" CURRENT="$(head -5 $R/folders.txt)" SR_BUDGET_S=3000 \
    bash scripts/gpu/calib_walk_run.sh >"$T/$v.out" 2>&1
done
# 3. the forms compared on the log's layer-shaped calls, and the table over every kept run
python3 $R/forms.py $LOG 0.4139961955018289 0.38324684882664645
python3 $R/root-table.py "$T/root" "$T/no-l2" "$T/l2"
