#!/bin/bash
# Session 2026-11-28, call 2 (4 GPUs, one job each): the forward's exponentials partly on the FMA pipes (SR_FWD_POLY64 /
# SR_FWD_POLY128 builds p4 = 4/2 and p8 = 8/4 of 16 n8 tiles) against the default build, cuDNN in each job; p4 / p8
# through the GPU test.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
NG=$(nvidia-smi -L | wc -l); echo "GPUs: $NG"
g() { if [ "$NG" -ge 4 ]; then echo $1; else echo $(( $1 % NG )); fi; }
shapes_ab() {  # GPU, variant
  export CUDA_VISIBLE_DEVICES=$(g $1)
  timeout 60 python3 kernels/bench/peers.py --shapes > $O/cudnn-shapes-$1.log 2>&1; echo "peers --shapes: exit $?"
  for r in 1 2; do for v in main $2; do
    s=$(date +%s); timeout 80 .gpu-k/$v/sparsering-bench-attn --shapes --fwd-only > $O/shapes-$1-$v-$r.log 2>&1
    echo "$v run $r: exit $? $(( $(date +%s) - s )) s"; grep -E "^dense" $O/shapes-$1-$v-$r.log | awk '{print $1,$2,$3,$5,$6}'
  done; done
}
( shapes_ab 0 p4 ) > $O/job0.log 2>&1 &
( shapes_ab 1 p8 ) > $O/job1.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$(g 2)
  timeout 60 python3 kernels/bench/peers.py --cudnn > $O/cudnn-2.log 2>&1; echo "peers --cudnn: exit $?"
  for v in main p4 p8 main; do
    s=$(date +%s); timeout 100 .gpu-k/$v/sparsering-bench-attn --fast --fwd-only > $O/fast-$v.log 2>&1
    echo "$v: exit $? $(( $(date +%s) - s )) s"; grep -E "^(dense|vs-like)" $O/fast-$v.log | awk '{print $1,$2,$3,$5,$6}'
  done
) > $O/job2.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$(g 3)
  for v in p4 p8; do
    s=$(date +%s); timeout 150 .gpu-k/$v/sparsering-gpu-test > $O/gpu-test-$v.log 2>&1
    echo "gpu-test $v: exit $? $(( $(date +%s) - s )) s, $(tail -1 $O/gpu-test-$v.log)"
  done
  s=$(date +%s); timeout 100 compute-sanitizer --tool memcheck .gpu-k/p8/sparsering-gpu-test --small > $O/memcheck-p8.log 2>&1
  echo "memcheck p8: exit $?, $(grep -E 'ERROR SUMMARY' $O/memcheck-p8.log | tail -1), $(( $(date +%s) - s )) s"
) > $O/job3.log 2>&1 &
t0=$(date +%s)
while [ $(jobs -r | wc -l) -gt 0 ] && [ $(( $(date +%s) - t0 )) -lt 500 ]; do sleep 15; echo "t=$(( $(date +%s) - t0 )) running $(jobs -r | wc -l)"; done
for j in 0 1 2 3; do echo "===== job$j"; tail -40 $O/job$j.log; done
echo "===== cudnn"; grep -hE "cudnn|ms" $O/cudnn-shapes-0.log $O/cudnn-2.log | head -30
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
