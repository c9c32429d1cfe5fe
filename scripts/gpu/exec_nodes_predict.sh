#!/bin/bash
# exec_nodes_predict.sh CAL LOGDIR... — the simulator's predictions of exec_nodes_run.sh's timed runs again, after the
# fact and on this machine (no GPU): for every s_*, weak_* and strong_* log in LOGDIR, its strategy, length and
# rank count are read back from the log, the cluster for that rank count is written from the calibrated CAL
# (scripts/cluster_nodes.py) and `sparsering-exec predict` simulates the run on it. The table of measured
# against predicted (scripts/gpu/exec_steps.sh exec_table) is printed last. Runs with online estimation need
# their trace and are left with the prediction the run itself printed.
#   bash scripts/gpu/exec_nodes_predict.sh results/exec/2026-11-22-h200x4-two-nodes/call2/h200-nodes-4-calibrated.json \
#        results/exec/2026-11-22-h200x4-two-nodes/call2/logs
# SR_BIN (default bin): where sparsering-exec is. Output: the table; the re-predicted logs in $OUT (default a
# temporary folder).
set -o pipefail
if [ $# -lt 2 ]; then echo "usage: exec_nodes_predict.sh CAL LOGDIR..." >&2; exit 2; fi
CAL=$1; shift
B=${SR_BIN:-bin}
[ -f "$CAL" ] || { echo "exec_nodes_predict.sh: $CAL: no such cluster file" >&2; exit 2; }
L=${OUT:-$(mktemp -d /tmp/sr-nodes-predict-XXXXXX)}
mkdir -p "$L"
export S=/dev/null  # exec_steps.sh's summary file (say): not kept here
. scripts/gpu/exec_steps.sh  # exec_table
logs=()
for d in "$@"; do
  for f in "$d"/s_*.log "$d"/weak_*.log "$d"/strong_*.log; do
    [ -f "$f" ] || continue
    n=$(basename "$f" .log)
    # the run's summary line: "attn LAYOUT | SCHEDULE | PATTERN: W ranks, MODEL, seq N, ..."
    line=$(grep -m1 -E "^attn .*: [0-9]+ ranks, " "$f") || { echo "$n: no result in the log, skipped"; continue; }
    w=$(sed -E 's/.*: ([0-9]+) ranks, .*/\1/' <<<"$line")
    model=$(sed -E 's/.*ranks, ([^,]+), seq.*/\1/' <<<"$line")
    seq=$(sed -E 's/.*, seq ([0-9]+),.*/\1/' <<<"$line")
    st=$(cut -d_ -f2 <<<"$n")  # s_STRATEGY_SEQ, weak_STRATEGY_SEQ_wW, strong_...
    if [[ "$st" == *-online ]]; then
      cp "$f" "$L/$n.log"  # keeps the run's own prediction (estimated pattern)
      logs+=("$L/$n.log")
      continue
    fi
    c="$L/cluster-w$w.json"
    [ -f "$c" ] || python3 scripts/cluster_nodes.py "$CAL" "$w" "$c" || exit 2
    { grep -m1 "layer 0: fwd" "$f"
      "$B"/sparsering-exec predict --model "$model" --cluster "$c" --seq "$seq" --strategy "$st" --skip-empty-sends
    } >"$L/$n.log" 2>&1 || { echo "$n: predict failed:"; tail -3 "$L/$n.log"; exit 1; }
    logs+=("$L/$n.log")
  done
done
exec_table "re-predicted on $(basename "$CAL") for each run's rank count" "${logs[@]}"
