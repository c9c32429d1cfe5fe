#!/bin/sh
# train-tiny-trace.sh — issue 25's recipe for attention with structure we made ourselves: train a small model
# on the Debian documentation corpus (scripts/build-corpus.sh), then record its attention on held-out text as
# the trainer's online vertical-slash estimate (`sparsering-exec train --pattern vs-online:P --trace`, learning
# rate 0), beside the same recording of the untrained (random-init) model, and summarise both with
# `sparsering trace stats` (density per head, where the work sits, imbalance per layout).
#
# Usage: sh scripts/train-tiny-trace.sh OUT
# Environment (defaults: the CPU run of results/traces/2026-11-27-cpu-tiny-test-trace):
#   MODEL tiny-test   SEQ 2K   STEPS 260   LR 1e-3   WARMUP 20   SEED 1   BACKEND cpu
#   TOPP "0.9 0.5"    the top-p masses recorded        RANKS 2,4,8   the imbalance table's rank counts
#   CKPT_EVERY 20     steps between checkpoints
#   CKPT FILE|DIR     an existing model.safetensors or checkpoint directory: skip the training, record that model
#   WORK build/tiny-trace   the corpus split, the one-GPU cluster file, the checkpoint and the traces (not for git)
# On the GPU: BACKEND=cuda MODEL=tiny-25m SEQ=32K STEPS=1500 CKPT_EVERY=500 RANKS=8,32,64 ran on one H200
# (results/traces/2026-11-27-h200-tiny25m-trained-trace; its traces are traces/samples/tiny25m-trained-*). The
# issue's passkey curriculum before the corpus, 64K tokens and the exact top-p pattern are not in this recipe.
# Writes OUT/train.csv, OUT/train.log and OUT/{trained,random}-pP.{txt,log} (the stats and the recording runs);
# the checkpoint and the traces stay in WORK.
set -e
out=${1:?usage: sh scripts/train-tiny-trace.sh OUT}
MODEL=${MODEL:-tiny-test} SEQ=${SEQ:-2K} STEPS=${STEPS:-260} LR=${LR:-1e-3} WARMUP=${WARMUP:-20} SEED=${SEED:-1}
BACKEND=${BACKEND:-cpu} TOPP=${TOPP:-"0.9 0.5"} RANKS=${RANKS:-2,4,8} CKPT_EVERY=${CKPT_EVERY:-20}
WORK=${WORK:-build/tiny-trace}
mkdir -p "$out" "$WORK"
sh scripts/build-corpus.sh build/corpus
# The corpus's last 381,531 bytes (on the development container; about 9%) are held out: the recordings read
# text the model never trained on.
head -c 3800000 build/corpus/debian-docs.txt >"$WORK/train.txt"
tail -c +3800001 build/corpus/debian-docs.txt >"$WORK/heldout.txt"
# One GPU: the shipped two-GPU node with one (a plan's world is the job's ranks).
sed 's/"gpus_per_node": 2/"gpus_per_node": 1/' models/clusters/h200-1x2.json >"$WORK/cluster-1x1.json"
common="--backend $BACKEND --model $MODEL --cluster $WORK/cluster-1x1.json --layout contiguous --schedule ring --seq $SEQ --seed $SEED"
if [ -z "$CKPT" ]; then
  date -u +"training started %Y-%m-%d %H:%M:%S UTC" >"$out/train.log"
  bin/sparsering-exec train $common --pattern dense --steps "$STEPS" --lr "$LR" --warmup "$WARMUP" --cosine \
    --data "$WORK/train.txt" --ckpt "$WORK/ckpt" --ckpt-every "$CKPT_EVERY" --csv "$out/train.csv" >>"$out/train.log" 2>&1
  date -u +"training ended %Y-%m-%d %H:%M:%S UTC" >>"$out/train.log"
  CKPT="$WORK/ckpt"
fi
for p in $TOPP; do
  for who in trained random; do
    init=""
    [ "$who" = trained ] && init="--init $CKPT"
    bin/sparsering-exec train $common --pattern "vs-online:$p" --steps 2 --lr 0 $init --data "$WORK/heldout.txt" \
      --trace "$WORK/$who-p$p.safetensors" --trace-steps 1,2 >"$out/$who-p$p.log" 2>&1
    bin/sparsering trace stats "$WORK/$who-p$p.safetensors" --ranks "$RANKS" >"$out/$who-p$p.txt"
  done
done
echo "wrote $out"
