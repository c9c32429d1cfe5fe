#!/bin/bash
# exec_fwd_runs_predict.sh — the simulator's predictions (`sparsering-exec predict`, CPU only) of the layers that
# scripts/gpu/exec_fwd_runs_run.sh measured, with and without --fwd-runs, next to the measured forward and backward.
# Cluster: the calibration of the 4-GPU run (results/exec/2026-11-22-h200x4-two-nodes/call4, the latest with the
# 64-bit partial masks), reshaped to one and two GPUs. Run from the repository root after `make`:
#   bash scripts/gpu/exec_fwd_runs_predict.sh [RESULTS_1GPU_TABLE] [RESULTS_2GPU_TABLE]
set -o pipefail
CAL=results/exec/2026-11-22-h200x4-two-nodes/call4/h200-nodes-4-calibrated.json
T1=${1:-results/exec/2026-11-22-h200-fwd-runs/call2_table.txt}
T2=${2:-results/exec/2026-11-22-h200x2-fwd-runs/call2_table.txt}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
for g in 1 2; do
  python3 -c "
import json; c = json.load(open('$CAL')); c['nodes'] = 1; c['gpus_per_node'] = $g
c['description'] = 'the 4-GPU calibration of 2026-11-22 on $g GPU(s)'; json.dump(c, open('$D/c$g.json', 'w'))" || exit 2
done
printf "%-5s %-21s %-5s %-6s %12s %12s %8s %12s %12s %8s\n" ranks pattern seq form "fwd meas" "fwd pred" err "bwd meas" "bwd pred" err
for t in "$T1" "$T2"; do
  tail -n +2 "$t" | while read -r np pat seq form fwd bwd; do
    f=(); [ "$form" = runs ] && f=(--fwd-runs)
    if [ "$np" = 1 ]; then where=(--layout contiguous --schedule ring); else where=(--strategy mtraining); fi
    line=$(./bin/sparsering-exec predict --model qwen2.5-3b --cluster "$D/c$np.json" --seq "$seq" "${where[@]}" \
      --pattern "$pat" "${f[@]}" 2>&1 | tail -1)
    pf=$(echo "$line" | sed -n 's/.* fwd \([0-9.]*\) ms bwd \([0-9.]*\) ms.*/\1/p')
    pb=$(echo "$line" | sed -n 's/.* fwd \([0-9.]*\) ms bwd \([0-9.]*\) ms.*/\2/p')
    if [ -z "$pf" ] || [ -z "$pb" ] || [ "$fwd" = "?" ] || [ "$bwd" = "?" ]; then
      echo "exec_fwd_runs_predict.sh: no prediction or no measurement for $np $pat $seq $form: $line" >&2
      exit 1
    fi
    awk -v np="$np" -v pat="$pat" -v seq="$seq" -v form="$form" -v mf="$fwd" -v pf="$pf" -v mb="$bwd" -v pb="$pb" \
      'BEGIN { printf "%-5s %-21s %-5s %-6s %12.2f %12.2f %+7.1f%% %12.2f %12.2f %+7.1f%%\n", np, pat, seq, form, mf, pf,
               100 * (pf - mf) / mf, mb, pb, 100 * (pb - mb) / mb }'
  done || exit 1
done
