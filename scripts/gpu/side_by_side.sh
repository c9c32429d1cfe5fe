#!/bin/bash
# side_by_side.sh — one-GPU jobs side by side on a machine of several GPUs (e.g. kind nvidia-h100-x4): job i runs
# on GPU i (CUDA_VISIBLE_DEVICES=i) with its own OUT=$OUT/job<i>, its output in $OUT/job<i>/console.log; the
# script waits for all and prints the last lines of each. A one-GPU job's figures are its own GPU's: jobs share
# the host's CPUs and PCIe but not a GPU.
# Run from the repository root: bash scripts/gpu/side_by_side.sh "JOB0" "JOB1" ...   (each JOB a bash command line)
OUT=${OUT:-/tmp/sr-sbs-out}
TAIL=${TAIL:-25}
n=$(nvidia-smi -L | wc -l)
[ "$#" -le "$n" ] || { echo "side_by_side.sh: $# jobs but $n GPUs" >&2; exit 2; }
i=0
for job in "$@"; do
  mkdir -p "$OUT/job$i"
  echo "job$i on GPU $i: $job" | tee "$OUT/job$i/command.txt"
  (CUDA_VISIBLE_DEVICES=$i OUT=$OUT/job$i bash -c "$job" >"$OUT/job$i/console.log" 2>&1; echo "exit $?" >>"$OUT/job$i/console.log") &
  i=$((i + 1))
done
wait
for ((j = 0; j < i; j++)); do
  echo "=== job$j: $(cat "$OUT/job$j/command.txt")"
  tail -n "$TAIL" "$OUT/job$j/console.log"
done
