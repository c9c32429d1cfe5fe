#!/bin/bash
# adaspa_run.sh — AdaSpa's block search as a pattern source (adaspa-online, issue 26) on ONE GPU (kind nvidia-h200 or
# nvidia-h100-x1). Stages, each a call of at most about 9 minutes:
#   check   the CUDA search against float64 dense attention under the mask it searched (Qwen2.5-3B heads, 4K tokens,
#           B = 128 and 64, --check), and the GPU test of the search kernels against the CPU reference
#           (bin/sparsering-gpu-test-vs, when built)
#   cost    one layer of Qwen2.5-3B attention (16 heads of 128) at 64K and 128K on one GPU: dense (--repeat 3, the
#           last forward timed) and adaspa-online:0.9 (--repeat 2: the first repetition runs the dense pass and a
#           search, the second the LSE-cached search alone, AdaSpa's cached search on the same inputs); the search
#           line gives the dense pass, the LSE-cached search and the mask's conversion, and the summary the search
#           over the dense forward beside it (the goal: at most 0.5); --predict beside each
#   kern    the block-mass kernels side by side (bin/sparsering-bench-adaspa, built here for sm_90a when absent):
#           one dense causal forward of Qwen2.5-3B heads (16/2, d 128) at 64K and 128K, the masses by mma.sync, by
#           wgmma (its default share of exponentials on the FMA pipes) and by wgmma with ex2.approx alone
#           (wgmma0), at B = 128 and B = 64; then the GPU test of both kernels against the float64 reference
#           (bin/sparsering-gpu-test-vs, adaspa cases); the summary's table: kernel, 64K and 128K ms, ratio to the
#           dense forward
#   pkpre   the passkey recipe's packed stages (scripts/gpu/train_one.sh's defaults, call c16's recipe: tiny-25m,
#           3,000 steps of 64 x 512 tokens, then 300 of 8 x 4K, PoSE to 32K), checkpoints in $W/ck-*: they stay on
#           the machine for pk32k while it is held
#   pk32k   32K, from pkpre's model: 50 steps of 8 samples each for dense, MTraining's estimate (vs-online:0.95:64:128)
#           and AdaSpa's search (adaspa-online:0.9, a search every step; ADASPA_CFGS adds e.g. "0.9:128:4" = every
#           4 steps), 200 held-out samples each by exact match; the table: exact match, mean tokens/s of the steps
#           after the first, and the search counters
# Every run has its own time limit; none starts after SR_BUDGET_S (540) seconds. Logs in $OUT/logs.tgz, the summary
# in $OUT/summary.txt, printed last. Run from the repository root: bash scripts/gpu/adaspa_run.sh [STAGES] (default
# "check cost"; "kern" alone for the kernels' comparison; then "pkpre", then "pk32k" on the same held machine). A prebuilt bin/sparsering-exec is used when it
# runs here (carry .devdeps and .gpu-exec-mpi), else it is built (nvcc, sm_90a).
set -o pipefail
OUT=${OUT:-/tmp/sr-adaspa-out}
W=/tmp/sr-adaspa-logs
STAGES=${1:-check cost}
BUDGET=${SR_BUDGET_S:-540}
STEP_KEEP='^attn |search|predicted|check layer|^eval|^train: (tiny|qwen|adaspa|done)|rror|failed'
. scripts/gpu/one_gpu_common.sh  # S, log, CL, X, step

if [[ $STAGES == *check* ]]; then
  log "(check) the CUDA search vs float64 dense attention under its own mask, Qwen2.5-3B heads, 4K tokens"
  for b in 128 64; do
    step check-b$b 120 attn --backend cuda --model qwen2.5-3b --cluster "$CL" --seq 4K --layout contiguous \
      --schedule ring --pattern adaspa-online:0.8:$b --inputs vs --layers 2 --repeat 2 --check
  done
  if [ -x bin/sparsering-gpu-test-vs ]; then
    timeout 120 bin/sparsering-gpu-test-vs >"$W/gpu-test-vs.log" 2>&1
    { echo "-- gpu-test-vs (exit $?)"; grep -iE "adaspa|fail|pass" "$W/gpu-test-vs.log"; } >>"$S"
  fi
fi

if [[ $STAGES == *cost* ]]; then
  log "(cost) one layer of Qwen2.5-3B attention on one GPU: the search next to one dense forward"
  for seq in 64K 128K; do
    step dense-$seq 120 attn --backend cuda --model qwen2.5-3b --cluster "$CL" --seq $seq --layout contiguous \
      --schedule ring --pattern dense --repeat 3 --predict
    step adaspa-$seq 200 attn --backend cuda --model qwen2.5-3b --cluster "$CL" --seq $seq --layout contiguous \
      --schedule ring --pattern adaspa-online:0.9 --inputs vs --repeat 2 --predict
    # the dense forward of the timed repetition, and the LSE-cached search of the second (the cached LSE's) one
    fwd=$(grep -oE "layer 0: fwd [0-9.]+ ms" "$W/dense-$seq.log" | tail -1 | awk '{print $4}')
    srch=$(grep -oE "last LSE-cached search [0-9.]+ ms" "$W/adaspa-$seq.log" | tail -1 | awk '{print $4}')
    dns=$(grep -oE "last dense pass [0-9.]+ ms" "$W/adaspa-$seq.log" | tail -1 | awk '{print $4}')
    awk -v s="$seq" -v f="$fwd" -v x="$srch" -v d="$dns" 'BEGIN {
      if (f > 0 && x > 0) printf "%s: dense forward %.3f ms; dense pass %.3f ms; LSE-cached search %.3f ms = %.3f x the dense forward (goal <= 0.5)\n", s, f, d, x, x / f;
      else printf "%s: search or dense forward missing (see the logs)\n", s }' | tee -a "$S"
  done
fi

if [[ $STAGES == *kern* ]]; then
  log "(kern) AdaSpa's block masses: mma.sync and wgmma beside one dense forward, Qwen2.5-3B heads, 64K and 128K"
  if [ ! -x bin/sparsering-bench-adaspa ] || [ ! -x bin/sparsering-gpu-test-vs ]; then
    timeout 300 make -j"$(nproc)" "${MAKE_MPI[@]}" CUDA_ARCH="-gencode=arch=compute_90a,code=sm_90a" \
      bin/sparsering-bench-adaspa bin/sparsering-gpu-test-vs >"$W/build-kern.log" 2>&1 || log "build failed: $W/build-kern.log"
  fi
  for b in 128 64; do
    timeout 150 bin/sparsering-bench-adaspa --n 65536,131072 --block $b --reps 5 >"$W/bench-adaspa-b$b.log" 2>&1
    echo "-- bench-adaspa B = $b (exit $?)" >>"$S"
    cat "$W/bench-adaspa-b$b.log" >>"$S"
    # the short table: kernel, 64K ms, 128K ms, ratio to the dense forward at each
    awk -v b=$b '$1 == 65536 || $1 == 131072 { n = $1 == 65536 ? 1 : 2; f[n] = $2; t["mma", n] = $3; t["wgmma", n] = $5;
        t["wgmma0", n] = $7 }
      END { printf "B = %d: %-14s %9s %9s %7s %7s\n", b, "kernel", "64K ms", "128K ms", "x fwd", "x fwd";
        printf "B = %d: %-14s %9.3f %9.3f %7.3f %7.3f\n", b, "dense forward", f[1], f[2], 1, 1;
        split("mma wgmma wgmma0", k, " ");
        for (i = 1; i <= 3; i++) printf "B = %d: %-14s %9.3f %9.3f %7.3f %7.3f\n", b, k[i], t[k[i], 1], t[k[i], 2],
          (f[1] > 0 ? t[k[i], 1] / f[1] : 0), (f[2] > 0 ? t[k[i], 2] / f[2] : 0) }' "$W/bench-adaspa-b$b.log" | tee -a "$S"
  done
  timeout 240 bin/sparsering-gpu-test-vs >"$W/gpu-test-vs-kern.log" 2>&1
  { echo "-- gpu-test-vs (exit $?)"; grep -iE "adaspa|paths|fail" "$W/gpu-test-vs-kern.log"; } >>"$S"
fi

# the passkey recipe (scripts/gpu/train_one.sh's defaults): one run, its CSV and log kept
PKM=${PK_MODEL:-tiny-25m}
CK=$W/ck
train() { local name=$1 lim=$2; shift 2; step "$name" "$lim" train --backend cuda --model $PKM --cluster "$CL" \
  --csv "$W/csv/$name.csv" --label "$name" "$@"; }

if [[ $STAGES == *pkpre* ]]; then
  log "(pkpre) passkey, $PKM: 3,000 steps of 64 x 512 tokens, then 300 of 8 x 4K (PoSE to 32K), dense"
  train pkA 240 --strategy dense-ring --seq 32K --pack 64 --loss keys --lr 1e-3 --warmup 50 --cosine --steps 3000 \
    --eval 256 --quiet --ckpt $CK-A --ckpt-every 200 --pose 32K
  train pkB 60 --strategy dense-ring --seq 32K --pack 8 --loss keys --lr 2e-4 --warmup 10 --cosine --steps 300 \
    --eval 256 --quiet --init $CK-A --ckpt $CK-B --ckpt-every 100 --pose 32K
fi

if [[ $STAGES == *pk32k* ]]; then
  if ! ls -d $CK-B/step-* >/dev/null 2>&1; then log "(pk32k) no checkpoint in $CK-B: run pkpre first on this machine"; else
    log "(pk32k) 32K, 50 steps of 8 samples from pkpre's model: dense, vs-online, adaspa-online; 200 held-out samples"
    cfgs="dense vs-online:0.95:64:128 adaspa-online:0.9 ${ADASPA_CFGS:+$(for c in $ADASPA_CFGS; do echo adaspa-online:$c; done)}"
    for c in $cfgs; do
      case $c in
        dense) P=(--strategy dense-ring --pattern dense) ;;
        vs-online*) P=(--strategy mtraining --pattern $c) ;;
        adaspa-online*) a=${c#adaspa-online:}; k=$(echo $a | cut -s -d: -f3)
          P=(--strategy adaspa --pattern adaspa-online:$(echo $a | cut -d: -f1-2) --search-every ${k:-1}) ;;
      esac
      n=pk32-${c//:/-}
      train $n 240 "${P[@]}" --seq 32K --loss keys --lr 5e-5 --warmup 5 --cosine --steps 50 --batch 8 --eval 200 \
        --init $CK-B
    done
    echo "== passkey at 32K: exact match and tokens/s (mean of the steps after the first)" | tee -a "$S"
    for c in $cfgs; do
      n=pk32-${c//:/-}
      em=$(grep -oE "exact match [0-9]+/[0-9]+ \([0-9.]+%\)" "$W/$n.log" | tail -1)
      tps=$(awk -F, 'NR > 2 {s += $6; k++} END {if (k) printf "%.0f", s / k}' "$W/csv/$n.csv" 2>/dev/null)
      printf "%-28s %-28s %s tok/s\n" "$c" "${em:-?}" "${tps:-?}" | tee -a "$S"
    done
  fi
fi

tar czf "$OUT/logs.tgz" -C "$W" --exclude 'ck*' . 2>/dev/null
log "done"
echo "== summary"
cat "$S"
