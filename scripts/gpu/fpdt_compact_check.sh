#!/bin/bash
# fpdt_compact_check.sh — FPDT's plans in the compact bar form (exec/fpdt_plan.c: every chunk's index and every chunk
# pair's transpose as the rings upload them, the lists expanded call by call into the workspace) against the stored
# lists (SR_BARS=stored), on this machine's GPUs; under 3 minutes, a table last. From the repository root:
#   OUT=/tmp/fpdt-compact bash scripts/gpu/fpdt_compact_check.sh
#   1. one GPU: Qwen2.5-3B, 16K tokens in 4K chunks, vs-topp:0.95, `attn --check --digest --deterministic`, compact
#      and stored: both checks pass, the digests are equal (the same kernels on the same lists, bit for bit)
#   2. two GPUs, when two are visible: the same at 4K tokens in 1K chunks on 2 ranks (several chunk pairs a rank)
#   3. one rank, `--plan-bytes-only` at 256K and 1M in 64K chunks, compact and stored: the plan's device bytes, its
#      share of the workspace (with the expanded bars) and the host build times (chunk indices, compact columns,
#      the u(u+1)/2 pairs' transposes)
# The cluster of steps 1 and 3 is one GPU of this machine's kind (scripts/gpu/one_gpu_common.sh); logs in $OUT/logs.
OUT=${OUT:-/tmp/fpdt-compact}
W=$OUT/logs BUDGET=${BUDGET:-170} STEP_KEEP="check worst|digest layer|plan device|FPDT host build|set up in|Error|error"
. scripts/gpu/one_gpu_common.sh  # S, log, X (one rank), CL (one GPU), step
A=(attn --backend cuda --model qwen2.5-3b --strategy fpdt --pattern vs-topp:0.95)
bars() { [ "$1" = stored ] && echo stored; }
dig() { grep -h "digest layer" "$1" 2>/dev/null | md5sum | cut -c1-12; }
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)

# 1 and 2: the check and the digest both ways
for b in compact stored; do
  SR_BARS=$(bars $b) step "g1-$b" 60 "${A[@]}" --cluster "$CL" --seq 16K --fpdt-chunk 4K --check --digest --deterministic
done
if [ "$ngpu" -ge 2 ]; then
  X2=($MPIRUN --oversubscribe --bind-to none -np 2 bin/sparsering-exec)
  for b in compact stored; do
    s=$(date +%s)
    SR_BARS=$(bars $b) timeout 45 "${X2[@]}" "${A[@]}" --cluster models/clusters/h200-1x2.json --seq 4K --fpdt-chunk 1K \
      --check --digest --deterministic >"$W/g2-$b.log" 2>&1
    echo "exit $?" >>"$W/g2-$b.log"
    { echo "-- g2-$b ($(( $(date +%s) - s )) s)"; grep -E "$STEP_KEEP|^exit" "$W/g2-$b.log"; } >>"$S"
  done
else
  log "two ranks: skipped ($ngpu GPU visible)"
fi

# 3: the plans' device bytes at 256K and 1M, one rank
for n in 256K 1M; do
  for b in compact stored; do
    SR_BARS=$(bars $b) step "bytes-$n-$b" 70 "${A[@]}" --cluster "$CL" --seq $n --fpdt-chunk 64K --plan-bytes-only --layers 1
  done
done

# the table
field() { grep -oE "$2" "$1" 2>/dev/null | head -1 | grep -oE "[0-9.]+" | head -1; }
ok() { grep -q "check worst.* ok" "$1" 2>/dev/null && echo ok || echo FAIL; }
{
  echo
  echo "| run | compact | stored | |"
  echo "|---|---|---|---|"
  for g in g1 g2; do
    [ -f "$W/$g-compact.log" ] || continue
    eq=DIFFER
    [ "$(dig "$W/$g-compact.log")" = "$(dig "$W/$g-stored.log")" ] && grep -q "digest layer" "$W/$g-compact.log" && eq=equal
    echo "| $g: check, digest | $(ok "$W/$g-compact.log") $(dig "$W/$g-compact.log") | $(ok "$W/$g-stored.log") $(dig "$W/$g-stored.log") | digests $eq |"
  done
  for n in 256K 1M; do
    for k in "plan B:total [0-9]+" "workspace B:shared workspace of [0-9]+" "indices s:chunk indices [0-9.]+ s" \
             "columns s:compact columns [0-9.]+ s" "transposes s:bar chunks [0-9.]+ s" "set-up s:set up in [0-9.]+ s"; do
      echo "| $n ${k%%:*} | $(field "$W/bytes-$n-compact.log" "${k#*:}") | $(field "$W/bytes-$n-stored.log" "${k#*:}") | |"
    done
  done
} | tee -a "$S"
log "done"
