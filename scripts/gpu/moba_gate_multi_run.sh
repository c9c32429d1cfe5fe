#!/bin/bash
# moba_gate_multi_run.sh — MoBA's gate on the GPU over several ranks (--moba-gate gpu with 2 ranks: partial block sums
# and bit sets all-gathered over NCCL and combined on the device, exec/online_gate_gpu.c; issue 30) on TWO GPUs of one
# host (kind nvidia-h100-x2 or nvidia-h200-x2; CUDA_VISIBLE_DEVICES=0,1). The contract is the host gate's selection bit
# for bit, so every comparison is one of equality. Stages:
#   digest  attn, Qwen2.5-3B heads, 16K, ring over layouts contiguous, zigzag and striped:128 (one run a gate), patterns
#           moba:4096:12 (4 blocks: every row keeps every earlier block unscored) and moba:512:3 (32 blocks: the top-k
#           scores), --inputs vs (on random inputs each 128-row group's union is every block, which would hide a wrong
#           score), --deterministic --digest, with --moba-gate gpu and host: each (layout, pattern)'s digests equal or
#           DIFFER (--deterministic: the backward's float atomics would change the digest run to run). CHECK16=1 adds
#           --check (float64 dense reference on the host: minutes at 16K, past this script's budget)
#   split   the same at 2K on striped:32, where a 128-row group's rows sit on both ranks (the GPU gate's mixed-group
#           warps and the bit sets' OR), moba:256:4 and moba:512:2, with --check (float64 dense attention masked by
#           the selection) and the digests of both gates
#   time    one layer at 128K, moba:4096:12, zigzag, --repeat 2: forward and backward ms with the gpu and the host gate
#   train   tiny-25m at 32K, moba:2048:8, 2 steps, --deterministic, zigzag ring: the losses of both gates (17 digits,
#           from --csv) equal or DIFFER
# Every step has its own timeout; none starts after SR_BUDGET_S (default 235) seconds. Logs in $OUT/logs.tgz, the
# summary table in $OUT/summary.txt, printed last. Run from the repository root:
#   bash scripts/gpu/moba_gate_multi_run.sh [STAGES]   (default: digest split time train)
# A prebuilt bin/sparsering-exec is used when it runs here (carry .devdeps and .gpu-exec-mpi), else it is built;
# SR_BIN names another folder of binaries (the dry run's test).
# SR_DRY=1: the CPU backend, tiny-test, short lengths, the host gate in place of gpu (the CPU backend refuses it) and
# one rank for the trainer (the CPU trainer gates on one rank only), to check the script's plumbing without GPUs.
set -o pipefail
T0=$(date +%s)
T_END=$((T0 + ${SR_BUDGET_S:-235}))
OUT=${OUT:-/tmp/sr-moba-multi-out}
L=${SR_LOGS:-/tmp/sr-moba-multi-logs}
B=${SR_BIN:-bin}
rm -rf "$L"
mkdir -p "$L" "$OUT"
S=$OUT/summary.txt
: >"$S"
STAGES=${1:-digest split time train}
has() { [[ " $STAGES " == *" $1 "* ]]; }
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN SR_COMM_TIMEOUT=${SR_COMM_TIMEOUT:-120}
. scripts/gpu/exec_steps.sh  # say, step, launch
. scripts/gpu/mpi.sh         # MPIRUN, sr_exec_ready

if [ -n "${SR_DRY:-}" ]; then
  BACKEND=cpu MODEL=tiny-test TMODEL=tiny-test GPU_GATE=host
  SEQ_D=2K PAT_D=moba:256:4,moba:512:2 SEQ_S=2K SEQ_T=4K PAT_T=moba:512:3 SEQ_TR=1K PAT_TR=moba:128:2
  CL=models/clusters/h200-1x2.json
  TRUN=$(launch 1) TCL=models/clusters/h100-1x1-calibrated.json  # the CPU trainer gates on one rank only
else
  BACKEND=cuda MODEL=qwen2.5-3b TMODEL=tiny-25m GPU_GATE=gpu
  SEQ_D=16K PAT_D=moba:4096:12,moba:512:3 SEQ_S=2K SEQ_T=128K PAT_T=moba:4096:12 SEQ_TR=32K PAT_TR=moba:2048:8
  export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0,1}
  nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>&1 | tee "$L/gpu.txt"
  ready=$(sr_exec_ready "$L/build.log") || { say "$ready: failed"; tail -30 "$L/build.log" | tee -a "$S"; exit 1; }
  say "$ready"
  # two GPUs of this machine's kind as the cluster (a plan's world must equal the job's ranks)
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
    *H100*) base=models/clusters/h100-1x4-calibrated.json ;;
    *) base=models/clusters/h200-1x2-calibrated.json ;;
  esac
  CL=$L/gpu-1x2.json
  python3 -c "
import json
c = json.load(open('$base'))
c['nodes'], c['gpus_per_node'] = 1, 2
c.pop('inter_node', None)
c['description'] = 'two GPUs of $base'
json.dump(c, open('$CL', 'w'), indent=1)" || { say "cannot write the cluster from $base"; exit 1; }
  TRUN=$(launch 2) TCL=$CL
fi
say "== moba_gate_multi_run.sh stages: $STAGES, 2 ranks, backend $BACKEND, cluster $CL (budget ${SR_BUDGET_S:-235} s)"
RUN=$(launch 2)
A=(attn --backend $BACKEND --model $MODEL --cluster "$CL" --schedule ring)

# digests LOG: "layout pattern layerN digest" for every digest line, the configuration from the "attn" line after it
digests() {
  awk -F' [|] ' '/^  digest layer/ { split($0, a, " "); d[a[3] + 0] = a[4] }
    /^attn / { lay = substr($1, 6); p = substr($3, 1, index($3, ": ") - 1)
               for (i in d) print lay, p, "layer" i, d[i]; delete d }' "$1" 2>/dev/null | sort
}
# compare NAME GPU_LOG HOST_LOG: a table row per (layout, pattern, layer): the two digests, equal or DIFFER
compare() {
  digests "$2" >"$L/$1.gpu.dig"
  digests "$3" >"$L/$1.host.dig"
  if [ ! -s "$L/$1.gpu.dig" ] || [ ! -s "$L/$1.host.dig" ]; then echo "$1: no digests (see $1-*.log) DIFFER" >>"$L/table.txt"; return; fi
  join -j1 <(awk '{ print $1 "/" $2 "/" $3, $4 }' "$L/$1.gpu.dig" | sort) <(awk '{ print $1 "/" $2 "/" $3, $4 }' "$L/$1.host.dig" | sort) \
    -a1 -a2 -e missing -o 0,1.2,2.2 |
    awk -v n="$1" '{ printf "%-7s %-38s gpu %-16s host %-16s %s\n", n, $1, $2, $3, ($2 == $3 && $2 != "missing") ? "equal" : "DIFFER" }' >>"$L/table.txt"
}
: >"$L/table.txt"

if has digest; then
  say "(digest) $SEQ_D, layouts contiguous, zigzag, striped:128, $PAT_D, --inputs vs: gpu gate against host gate"
  extra=()
  [ -n "${CHECK16:-}" ] && extra=(--check)
  for g in gpu host; do
    gate=$g; [ $g = gpu ] && gate=$GPU_GATE
    step digest-$g "${DIGEST_LIMIT:-75}" $RUN $B/sparsering-exec "${A[@]}" --seq $SEQ_D --layout contiguous,zigzag,striped:128 \
      --pattern $PAT_D --inputs vs --moba-gate $gate --deterministic --digest "${extra[@]}"
    grep -E "^attn |rror|failed|refus" "$L/digest-$g.log" | sed "s/^/   /" | tee -a "$S"
  done
  compare digest "$L/digest-gpu.log" "$L/digest-host.log"
fi

if has split; then
  say "(split) $SEQ_S on striped:32 (groups split over the ranks), moba:256:4 and moba:512:2, --check with the gpu gate"
  for g in gpu host; do
    gate=$g; [ $g = gpu ] && gate=$GPU_GATE
    chk=(); [ $g = gpu ] && chk=(--check)
    step split-$g 60 $RUN $B/sparsering-exec "${A[@]}" --seq $SEQ_S --layout striped:32 --pattern moba:256:4,moba:512:2 \
      --inputs vs --moba-gate $gate --deterministic --digest "${chk[@]}"
    grep -E "^attn |check layer|rror|failed|refus" "$L/split-$g.log" | sed "s/^/   /" | tee -a "$S"
  done
  compare split "$L/split-gpu.log" "$L/split-host.log"
  c=$(grep -cE "^attn .*check .* ok" "$L/split-gpu.log" 2>/dev/null)
  echo "split   --check of the gpu gate (float64 dense attention under its selection): ${c:-0} of 2 ok" >>"$L/table.txt"
fi

if has time; then
  say "(time) one layer at $SEQ_T, $PAT_T, zigzag, --repeat 2: gpu gate, then host gate"
  for g in gpu host; do
    gate=$g; [ $g = gpu ] && gate=$GPU_GATE
    step time-$g "${TIME_LIMIT:-100}" $RUN $B/sparsering-exec "${A[@]}" --seq $SEQ_T --layout zigzag --pattern $PAT_T \
      --moba-gate $gate --repeat 2
    grep -E "^attn |rror|failed|refus" "$L/time-$g.log" | sed "s/^/   /" | tee -a "$S"
    t=$(grep -E "^attn " "$L/time-$g.log" 2>/dev/null | tail -1 | grep -oE "fwd [0-9.]+ ms bwd [0-9.]+ ms")
    printf "time    %-38s %s\n" "$SEQ_T zigzag $PAT_T $g gate" "${t:-no timing line (see time-$g.log)}" >>"$L/table.txt"
  done
fi

if has train; then
  say "(train) $TMODEL at $SEQ_TR, $PAT_TR, 2 steps, --deterministic: gpu gate, then host gate"
  for g in gpu host; do
    gate=$g; [ $g = gpu ] && gate=$GPU_GATE
    step train-$g "${TRAIN_LIMIT:-90}" $TRUN $B/sparsering-exec train --backend $BACKEND --model $TMODEL --cluster "$TCL" \
      --layout zigzag --schedule ring --seq $SEQ_TR --pattern $PAT_TR --steps 2 --moba-gate $gate --deterministic \
      --csv "$L/train-$g.csv"
    grep -E "^step|rror|failed|refus" "$L/train-$g.log" | sed "s/^/   /" | tee -a "$S"
  done
  for st in 1 2; do  # the csv's data rows in order (its header first)
    lg=$(awk -F, -v s=$st 'NR == s + 1 { print $3 }' "$L/train-gpu.csv" 2>/dev/null)
    lh=$(awk -F, -v s=$st 'NR == s + 1 { print $3 }' "$L/train-host.csv" 2>/dev/null)
    r=DIFFER; [ -n "$lg" ] && [ "$lg" = "$lh" ] && r=equal
    printf "train   %-38s gpu %-22s host %-22s %s\n" "loss step $st" "${lg:-missing}" "${lh:-missing}" "$r" >>"$L/table.txt"
  done
fi

tar czf "$OUT/logs.tgz" -C "$L" . 2>/dev/null
say "== [$(( $(date +%s) - T0 ))s] done"
{ echo "== summary: the GPU gate on 2 ranks against the host gate ($(head -1 "$L/gpu.txt" 2>/dev/null | cut -d, -f2 || echo cpu))"
  cat "$L/table.txt"
  d=$(grep -c DIFFER "$L/table.txt"); e=$(grep -c " equal$" "$L/table.txt")
  echo "== $e equal, $d DIFFER"; } | tee -a "$S"
