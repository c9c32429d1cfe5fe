#!/bin/bash
# exec_fwd_runs_run.sh — the executor's forward on the runs form (`--fwd-runs`, plan.spec.fwd_runs; plan/tiles_runs.c)
# against the tile form on the GPU machine. With no argument, one GPU (kind nvidia-h200): correctness against
# float64 dense attention (--check, seq 2000), then one layer of Qwen2.5-3B attention at 128K and 256K,
# contiguous layout, with MTraining's published budget mix (vs-preset:qwen2.5-3b) and the synthetic
# vs-topp:0.95, each with and without --fwd-runs (--repeat 5); one rank on a cluster of one H200 made from
# h200-1x2 in $OUT. With argument 2, two GPUs (kind nvidia-h200-x2, cluster h200-1x2): the check on 2 ranks
# (the mtraining strategy: striped:128, double ring; and USP), then the mtraining strategy at 256K with
# vs-topp:0.95 and with the budget mix, each with and without --fwd-runs.
# Prebuilt bin/sparsering-exec (carry it with .devdeps and .gpu-exec-mpi). Table last; logs in $OUT.
# Run from the repository root: bash scripts/gpu/exec_fwd_runs_run.sh [2]
set -o pipefail
OUT=${OUT:-/tmp/sr-out}
mkdir -p "$OUT"
. scripts/gpu/mpi.sh  # MPIRUN
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN
NP=${1:-1}
if [ "$NP" = 2 ]; then
  C=h200-1x2
  LAYOUTS=(--strategy mtraining)  # striped:128, double ring (one node: the ring of two)
  SEQS="256K"
  CHECK=(--strategy mtraining --schedule double-ring,usp)
else
  C=$OUT/h200-1x1.json
  python3 -c "
import json; c = json.load(open('models/clusters/h200-1x2.json'))
c['gpus_per_node'] = 1; c['description'] = 'one H200 of h200-1x2, for one-rank executor runs'
json.dump(c, open('$C', 'w'), indent=2)"
  LAYOUTS=(--layout contiguous --schedule ring)
  SEQS="128K 256K"
  CHECK=(--layout contiguous,striped:128 --schedule ring)
fi
X=($MPIRUN --oversubscribe --bind-to none -np "$NP" bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster "$C")
s=$(date +%s)
timeout 200 "${X[@]}" --seq 2000 "${CHECK[@]}" --pattern vs-topp:0.9,vs-preset:qwen2.5-3b --fwd-runs --check \
  >"$OUT/check.log" 2>&1
echo "check (--fwd-runs, seq 2000, $NP rank(s)): exit $? $(($(date +%s) - s)) s"
grep -E "^attn|max" "$OUT/check.log" | head -20
TAB=$OUT/table.txt
echo "ranks pattern seq form fwd_ms bwd_ms" >"$TAB"
for seq in $SEQS; do
  for pat in vs-preset:qwen2.5-3b vs-topp:0.95; do
    for form in tiles runs; do
      f=(); [ $form = runs ] && f=(--fwd-runs)
      log=$OUT/${pat%%:*}-$seq-$form.log
      s=$(date +%s)
      timeout 150 "${X[@]}" --seq $seq "${LAYOUTS[@]}" --pattern $pat --layers 1 --repeat 5 "${f[@]}" >"$log" 2>&1
      rc=$?
      line=$(grep -E "^attn " "$log" | tail -1)
      fwd=$(echo "$line" | sed -n 's/.*: fwd \([0-9.]*\) ms bwd \([0-9.]*\) ms.*/\1/p')
      bwd=$(echo "$line" | sed -n 's/.*: fwd \([0-9.]*\) ms bwd \([0-9.]*\) ms.*/\2/p')
      echo "$NP $pat $seq $form ${fwd:-?} ${bwd:-?}" >>"$TAB"
      echo "$pat $seq $form: exit $rc, $(($(date +%s) - s)) s"
    done
  done
done
column -t "$TAB" 2>/dev/null || cat "$TAB"
