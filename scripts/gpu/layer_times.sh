#!/bin/bash
# layer_times.sh — where each layer's wall time goes in `sparsering-exec attn --layers N` on 4 GPUs of one host: the
# run multi_vs_peer.sh calls mtraining-all-runs (Qwen2.5-3B, MTraining's vs-topp:0.95 on the striped:128 double ring
# over 2 "nodes", the forward on the runs form, --skip-empty-sends, --repeat 2, --predict), LAYERS layers (default 3)
# at SEQ (default 512K), with SR_LAYER_TIMES=1: every layer's wall time split into its parts (set-up, inputs filled
# and uploaded, the untimed and the timed repetition, the prediction, ...; rank 0's and the largest rank's), and
# SR_SETUP_TIMES=1: the set-up's phases, every rank, on stderr. 2026-11-28 call J took about 10 s a layer there,
# of which its set-up and kernels were 1-4 s; this says where the rest goes (results/exec/2026-11-28-cpu-attn-layer-
# overhead: --predict's forward-form accounting, then serial).
#
# Run from the repository root: bash scripts/gpu/layer_times.sh   (LAYERS=36: the whole model, as multi_vs_peer.sh)
# NP (default: the GPUs nvidia-smi lists), LAYERS, SEQ, PRED (default --predict; PRED= runs without it), CLUSTER_FILE
# (default: call J's calibrated 4-GPU cluster when NP is 4, else models/clusters/h200-1x2.json as 2 "nodes"),
# LIMIT (seconds, default 420), SR_BIN (default bin), OUT (default /tmp/sr-layer-times).
# SR_DRY=1: the CPU backend with tiny-test at 1/256 of SEQ (tests/test_layer_times_script.c).
# Prints every layer's parts, then each part's mean over the layers (rank 0) and the run's wall time; logs in $OUT.
set -o pipefail
OUT=${OUT:-/tmp/sr-layer-times}
L=$OUT
S=$OUT/summary.txt
B=${SR_BIN:-bin}
mkdir -p "$OUT"
: >"$S"
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN SR_LAYER_TIMES=1 SR_SETUP_TIMES=1
. scripts/gpu/exec_steps.sh  # say, tokens, cluster, launch
if [ -n "${SR_DRY:-}" ]; then
  NP=${NP:-4} BACKEND=cpu MODEL=tiny-test
else
  NP=${NP:-$(nvidia-smi -L 2>/dev/null | wc -l)} BACKEND=cuda MODEL=qwen2.5-3b
fi
if [ "$NP" -lt 4 ] || [ $((NP % 2)) != 0 ]; then echo "layer_times.sh: needs an even count of 4 or more ranks (NP=$NP)"; exit 2; fi
LAYERS=${LAYERS:-3} SEQ=${SEQ:-512K} LIMIT=${LIMIT:-420}
PRED=${PRED---predict}
. scripts/gpu/mpi.sh  # MPIRUN, MAKE_MPI, sr_exec_ready
if [ -z "${SR_DRY:-}" ]; then
  ready=$(sr_exec_ready "$OUT/build.log") || { say "$ready: failed"; tail -30 "$OUT/build.log"; exit 1; }
  say "$ready"
  nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,memory.total --format=csv >"$OUT/gpu.txt" 2>&1
fi
CAL=results/exec/2026-11-28-h200x4-layer-512k-mean-vs-context-parallel/call-J/h200-nodes-4-calibrated.json
if [ -n "${CLUSTER_FILE:-}" ]; then CN=$CLUSTER_FILE
elif [ "$NP" = 4 ] && [ -f "$CAL" ] && [ -z "${SR_DRY:-}" ]; then CN=$CAL
else CAL= CN=$(cluster $NP) || exit 1
fi
n=$(tokens $SEQ)
say "== layer_times.sh: $LAYERS layer(s) of MTraining (vs-topp:0.95, --fwd-runs) at $SEQ ($n tokens) on $NP ranks, backend $BACKEND, cluster $CN, ${PRED:-no prediction} ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg))"
t0=$(date +%s.%N)
timeout "$LIMIT" $(launch $NP) $B/sparsering-exec attn --backend $BACKEND --model $MODEL --cluster "$CN" --seq "$n" \
  --strategy mtraining --fwd-runs --skip-empty-sends --layers "$LAYERS" --repeat 2 $PRED >"$OUT/attn.log" 2>"$OUT/setup.log"
rc=$?
t1=$(date +%s.%N)
grep -E "start-up|layer [0-9]+: (set up in|fwd|wall)|^attn|rror|failed" "$OUT/attn.log" | tee -a "$S"
[ $rc -eq 124 ] && say "attn: TIMED OUT after $LIMIT s" || say "attn: exit $rc"
# The mean of each part over the layers (rank 0's parts; in brackets the mean of the largest rank's).
awk -v wall="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" '
  / layer [0-9]+: wall / {
    n++; w += $4; wm += $11
    s = $0; sub(/^[^)]*\): /, "", s); sub(/ s$/, "", s)
    k = split(s, parts, ", ")
    for (i = 1; i <= k; i++) {
      m = split(parts[i], f, " "); name = f[1]; for (j = 2; j < m - 1; j++) name = name " " f[j]
      own[i] += f[m - 1]; big = f[m]; gsub(/[()]/, "", big); most[i] += big; names[i] = name
    }
  }
  END {
    if (!n) { print "no layer finished"; exit }
    printf "== the mean over %d layer(s), seconds (rank 0; the largest rank in brackets): wall %.3f (%.3f)\n", n, w / n, wm / n
    for (i = 1; i <= k; i++) printf "  %-28s %8.3f (%8.3f)\n", names[i], own[i] / n, most[i] / n
    printf "the whole run: %s s wall (mpirun start to exit)\n", wall
  }' "$OUT/attn.log" | tee -a "$S"
exit $rc
