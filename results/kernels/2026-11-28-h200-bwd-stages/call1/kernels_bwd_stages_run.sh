#!/bin/bash
# kernels_bwd_stages_run.sh — the backward tile kernel's Q/dO ring with two stages (the default) against three
# (SR_BWD_STAGES=3), on ONE GPU (nvidia-h200), in one call of about 4 minutes (SR_BUDGET_S, default 240), with
# prebuilt bin/ binaries (sm_90a; run from the repository root; logs under $OUT):
#   1. bin/sparsering-gpu-test --bwd: every backward variant against the CPU reference, with runs 2t, 2ts and 5t
#      (2, 2s and 5 on three stages; 2t's dK and dV must equal 2's bit for bit);
#   2. cuDNN SDPA (GQA) at 16K and 64K, dense causal (kernels/bench/peers.py --cudnn --seqs 16K,64K);
#   3. for stages 2 and 3, twice, alternating: bin/sparsering-bench-attn --fast --defaults (the default backward on
#      dense causal 16K and 64K and the VS-like mask at 128K); then, the same way in the time left, one Qwen2.5-3B
#      attention layer, vs-topp:0.95 at 128K, 1 layer x 2 repeats (sparsering-exec attn, the layer of the profile
#      that found the stage waits);
#   4. a table of the backward's milliseconds: each row's two runs per stage count, and cuDNN's.
# A step that would not fit the budget left is skipped and says so.
O=${OUT:-/tmp/out}; mkdir -p $O
B=${SR_BUDGET_S:-240}
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt 2>&1
# The binaries link cJSON and GSL: from the carried .devdeps where the machine lacks them.
[ -f .devdeps/env.sh ] && . .devdeps/env.sh
. scripts/gpu/mpi.sh
export PYTHONUNBUFFERED=1
unset SR_BWD_STAGES SR_BWD_VARIANT
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
# lim WANT: WANT seconds, or what is left of the budget less 5 s; 0 when under 15 s are left.
lim() { local l=$(( B - 5 - $(el) )); [ $l -lt 15 ] && { echo 0; return; }; [ $l -lt $1 ] && echo $l || echo $1; }
git rev-parse --short HEAD > $O/commit.txt 2>/dev/null

L=$(lim 110); timeout $L bin/sparsering-gpu-test --bwd > $O/gpu-test-bwd.log 2>&1
echo "gpu-test --bwd: exit $? $(el) s; $(tail -1 $O/gpu-test-bwd.log)"
grep -E "FAIL|differ|trap|error" $O/gpu-test-bwd.log | cut -c1-200 | head -20
grep -E "by backward variant" $O/gpu-test-bwd.log | tail -2 | cut -c1-400

L=$(lim 40)
if [ $L -gt 0 ]; then
  timeout $L python3 kernels/bench/peers.py --cudnn --seqs 16K,64K > $O/peers-cudnn.log 2>&1
  echo "peers --cudnn: exit $? $(el) s"
else echo "peers --cudnn: skipped (budget)"; fi

A="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster models/clusters/h200-1x1-calibrated.json --seq 128K --strategy mtraining --pattern vs-topp:0.95 --layers 1 --repeat 2"
for r in 1 2; do for s in 2 3; do
  L=$(lim 55)
  if [ $L -gt 0 ]; then
    SR_BWD_STAGES=$s timeout $L bin/sparsering-bench-attn --fast --defaults > $O/bench-s$s-r$r.log 2>&1
    echo "bench s$s r$r: exit $? $(el) s"
  else echo "bench s$s r$r: skipped (budget)"; fi
done; done
# The layer last: the benchmark's rows come first when the budget runs short.
for r in 1 2; do for s in 2 3; do
  L=$(lim 30)
  if [ $L -gt 0 ]; then
    SR_BWD_STAGES=$s timeout $L $MPIRUN --oversubscribe --bind-to none -np 1 $A > $O/attn128-s$s-r$r.log 2>&1
    echo "attn s$s r$r: exit $? $(el) s"
  else echo "attn s$s r$r: skipped (budget)"; fi
done; done

# The table: backward ms (bench: the "bwd ms" column, third from last; attn: "bwd X ms per layer").
bw() { awk -v m="$2" -v n="$3" '$0 ~ "^"m" " && ($2 == n || $3 == n) { print $(NF-2) }' $1 2>/dev/null | head -1; }
ab() { sed -n 's/.* bwd \([0-9.]*\) ms per layer.*/\1/p' $1 2>/dev/null | head -1; }
{
  echo "backward ms (two runs each)      2 stages          3 stages"
  for row in "dense causal|16K" "dense causal|64K" "vs-like|128K"; do
    m=${row%|*}; n=${row#*|}
    printf "%-30s %8s %8s   %8s %8s\n" "$m $n" $(for s in 2 3; do for r in 1 2; do v=$(bw $O/bench-s$s-r$r.log "$m" $n); echo ${v:--}; done; done)
  done
  printf "%-30s %8s %8s   %8s %8s\n" "vs-topp:0.95 layer 128K" $(for s in 2 3; do for r in 1 2; do v=$(ab $O/attn128-s$s-r$r.log); echo ${v:--}; done; done)
  for n in 16K 64K; do
    v=$(awk -v n=$n '/^SDPA cuDNN \(GQA\)/ && $4 == n { print $(NF-1) }' $O/peers-cudnn.log 2>/dev/null | head -1)
    printf "%-30s %8s\n" "cuDNN SDPA (GQA) dense $n" ${v:--}
  done
} | tee $O/table.txt
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
echo "done $(el) s"
