#!/bin/bash
# Call 6 (2 x H100): the forward with 4 stages at d = 64 (branch d64st) against main's 2, alternately, after the GPU
# test of the 4-stage build; the runs form's faster GPU build (branch runsfast) checked and timed on the other GPU.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
NG=$(nvidia-smi -L | wc -l)
t0=$(date +%s)
( export CUDA_VISIBLE_DEVICES=0
  timeout 60 .gpu-k/d64/sparsering-gpu-test --small > $O/gpu-test-small-d64.log 2>&1
  echo "gpu-test --small (4 stages at d 64): exit $? $(tail -1 $O/gpu-test-small-d64.log)"
  for b in main d64 main d64; do
    [ $(( $(date +%s) - t0 )) -gt 230 ] && break
    timeout 110 .gpu-k/$b/sparsering-bench-attn --shapes > $O/shapes-$b-$(date +%s).log 2>&1
    echo "== $b t=$(( $(date +%s) - t0 ))"; grep -E "^dense" $O/shapes-$b-*.log | tail -5 | cut -c1-120
  done ) > $O/job0.log 2>&1 &
if [ -d .gpu-k/runsfast ]; then
( export CUDA_VISIBLE_DEVICES=$(( 1 % NG ))
  cp .gpu-k/runsfast/sparsering-exec .gpu-k/runsfast/sparsering-gpu-test-vs bin/ && OUT=$O/runs bash scripts/gpu/runs_gpu_check.sh ) > $O/job1.log 2>&1 &
fi
while [ $(jobs -r | wc -l) -gt 0 ] && [ $(( $(date +%s) - t0 )) -lt 330 ]; do sleep 15; done
for j in 0 1; do echo "===== job$j"; tail -40 $O/job$j.log 2>/dev/null; done
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
