#!/bin/bash
# layer_vs_cudnn.sh — one Qwen2.5-3B attention layer forward + backward on ONE GPU (`sparsering-exec attn`, one rank)
# next to cuDNN's dense causal layer (SDPA, GQA, kernels/bench/peers.py --cudnn --seqs) in the same call: issue 21's
# layer goal (mtraining with vs-topp:0.95 at least 8x faster than cuDNN's dense layer at 128K, 12x at 512K).
# Ours (RUNS, default "dense topp moba"): dense (contiguous, one rank: our dense causal kernels), mtraining
# vs-topp:0.95 (topp; topp-runs: the same with its forward on the runs form, --fwd-runs) at each length, --repeat 2
# (the second repetition timed), --predict beside each; topp-all and topp-all-runs: the same over all the model's
# layers (--layers 36; each layer's pattern differs: layer 0's is one draw, the mean layer is the model's), the
# table's row the mean per layer; at MOBA_SEQS (default 128K) MoBA's gating ($MOBA, default
# moba:4096:12, contiguous) on vertical-slash inputs (--inputs vs: on random inputs every 128-row tile's union of
# choices is every block, so MoBA is dense), issue 30's layer goal. Each run's "work" line gives the kept and
# computed pairs as shares of the causal ones. The table last: fwd, bwd, fwd+bwd ms and cuDNN's layer over ours.
# Run from the repository root: bash scripts/gpu/layer_vs_cudnn.sh   (SEQS, default "128K 512K")
set -o pipefail
OUT=${OUT:-/tmp/sr-layer-out}
W=/tmp/sr-layer-logs
BUDGET=${SR_BUDGET_S:-480}
SEQS=${SEQS:-128K 512K}
MOBA=${MOBA:-moba:4096:12}
MOBA_SEQS=${MOBA_SEQS:-128K}
RUNS=${RUNS:-dense topp moba}  # topp-runs: vs-topp:0.95 with the forward on the runs form (--fwd-runs)
STEP_KEEP='^attn |predicted|layer 0: (fwd|work)|rror|failed'
. scripts/gpu/one_gpu_common.sh  # S, log, CL, X, step

# the peer first, so that a call cut short by its time limit still has it beside whatever of ours ran
log "cuDNN (SDPA, GQA) dense causal at $SEQS"
timeout 240 python3 kernels/bench/peers.py --cudnn --seqs "$(echo $SEQS | tr ' ' ,)" >"$W/cudnn.log" 2>&1
echo "exit $?" >>"$W/cudnn.log"
cat "$W/cudnn.log" >>"$S"

for seq in $SEQS; do
  log "ours at $seq"
  [[ " $RUNS " == *" dense "* ]] && step dense-$seq 200 attn --backend cuda --model qwen2.5-3b --cluster "$CL" \
    --seq $seq --layout contiguous --schedule ring --pattern dense --repeat 2 --predict
  [[ " $RUNS " == *" topp "* ]] && step topp-$seq 200 attn --backend cuda --model qwen2.5-3b --cluster "$CL" \
    --seq $seq --strategy mtraining --pattern vs-topp:0.95 --repeat 2 --predict
  [[ " $RUNS " == *" topp-runs "* ]] && step topp-runs-$seq 200 attn --backend cuda --model qwen2.5-3b --cluster "$CL" \
    --seq $seq --strategy mtraining --pattern vs-topp:0.95 --fwd-runs --repeat 2 --predict
  [[ " $RUNS " == *" topp-all "* ]] && step topp-all-$seq 300 attn --backend cuda --model qwen2.5-3b --cluster "$CL" \
    --seq $seq --strategy mtraining --pattern vs-topp:0.95 --layers 36 --repeat 2 --predict
  [[ " $RUNS " == *" topp-all-runs "* ]] && step topp-all-runs-$seq 300 attn --backend cuda --model qwen2.5-3b \
    --cluster "$CL" --seq $seq --strategy mtraining --pattern vs-topp:0.95 --fwd-runs --layers 36 --repeat 2 --predict
  if [[ " $RUNS " == *" moba "* && " $MOBA_SEQS " == *" $seq "* ]]; then
    step moba-$seq 200 attn --backend cuda --model qwen2.5-3b --cluster "$CL" --seq $seq --layout contiguous \
      --schedule ring --pattern "$MOBA" --inputs vs --repeat 2 --predict
  fi
done

# the table: ours from the timed repetition's "layer 0: fwd X ms, bwd Y ms" line, cuDNN from peers.py's rows
{
  echo "== one layer fwd+bwd, $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  printf "%-6s %-28s %10s %10s %10s %12s\n" seq run "fwd ms" "bwd ms" "total ms" "cuDNN/ours"
  for seq in $SEQS; do
    n=$(echo $seq | sed 's/K$//')
    read cf cb < <(awk -v n="${n}K" '$1 == "SDPA" && $4 == n { print $5, $7 }' "$W/cudnn.log")
    [ -n "$cf" ] && awk -v s=$seq -v f=$cf -v b=$cb 'BEGIN { printf "%-6s %-28s %10.2f %10.2f %10.2f %12s\n", s, "cuDNN SDPA dense", f, b, f + b, "1.00x" }'
    for r in $RUNS; do
      [ -f "$W/$r-$seq.log" ] || continue
      if [[ $r == topp-all* ]]; then  # the mean per layer over the model's layers (attn's closing line)
        read f b < <(grep -oE "layer\(s\): fwd [0-9.]+ ms bwd [0-9.]+ ms per layer" "$W/$r-$seq.log" 2>/dev/null | tail -1 |
          awk '{print $3, $6}')
      else
        read f b < <(grep -oE "layer 0: fwd [0-9.]+ ms, bwd [0-9.]+ ms" "$W/$r-$seq.log" 2>/dev/null | tail -1 | awk '{print $4, $7}')
      fi
      [ -z "$f" ] && { printf "%-6s %-28s %s\n" $seq $r "missing (see $r-$seq.log)"; continue; }
      case $r in dense) name="ours dense" ;; topp) name="ours mtraining vs-topp:0.95" ;;
        topp-runs) name="ours vs-topp:0.95 --fwd-runs" ;; topp-all) name="ours vs-topp:0.95 (36 mean)" ;;
        topp-all-runs) name="ours --fwd-runs (36 mean)" ;; *) name="ours $MOBA" ;; esac
      awk -v s=$seq -v nm="$name" -v f=$f -v b=$b -v cf="$cf" -v cb="$cb" 'BEGIN {
        printf "%-6s %-28s %10.2f %10.2f %10.2f %12s\n", s, nm, f, b, f + b, (cf > 0 ? sprintf("%.2fx", (cf + cb) / (f + b)) : "-") }'
    done
  done
} | tee -a "$S"
tar czf "$OUT/logs.tgz" -C "$W" . 2>/dev/null
