#!/bin/bash
# train_phases.sh — where a training step's time goes, on ONE GPU (kind nvidia-h100-x1 or nvidia-h200), for issue 22:
# the Qwen2.5-3B shape (random init) at SEQ tokens, 3 steps (the first a warm-up) with --phase-times
# (docs/train.md: the step's seconds by class of work, the launch gaps and host waits as "unaccounted"), for
# dense-ring and for MTraining's vs-topp:0.95. BASE=1 also runs each without the flag (the events' cost: compare
# the step lines). About 1-2 minutes a run at 64K; TRAIN_S bounds each. Logs and CSVs under $OUT/logs, the summary
# (each run's step and phase lines) last.
#
# Run from the repository root: bash scripts/gpu/train_phases.sh SEQ [EXTRA...]   (e.g. 64K; EXTRA: more train flags)
set -o pipefail
SEQ=${1:?usage: bash scripts/gpu/train_phases.sh SEQ [EXTRA...]}
shift
OUT=${OUT:-/tmp/sr-phases-out}
W="$OUT/logs"
. scripts/gpu/train_common.sh  # S, log, X, CL1 (one-GPU cluster), Open MPI

# one training run: NAME, then train's flags; the log keeps everything, the summary the step and phase lines
run() {
  local name=$1
  shift
  timeout "${TRAIN_S:-300}" $X train --backend cuda --cluster "$CL1" --model qwen2.5-3b --seq "$SEQ" --steps 3 \
    --loss all --csv "$W/csv/$name.csv" --label "$name" "$@" >"$W/$name.log" 2>&1
  local rc=$?
  echo "exit $rc" >>"$W/$name.log"
  { echo "-- $name (exit $rc): $*"; grep -E "^train: .*(memory|plans|recompute|GEMMs)|^step|^phases|^sparsering|rror|failed" "$W/$name.log"; } >>"$S"
}

log "Qwen2.5-3B shape at $SEQ, one GPU, 3 steps (the first a warm-up), --phase-times${*:+, extra: $*}"
for cfg in dense-ring mtraining; do
  P=(--strategy $cfg); [ $cfg = mtraining ] && P+=(--pattern vs-topp:0.95)
  run $cfg-$SEQ-phases "${P[@]}" --phase-times "$@"
  [ -n "${BASE:-}" ] && run $cfg-$SEQ-base "${P[@]}" "$@"
done
log "done"
cat "$S"
