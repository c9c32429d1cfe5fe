#!/bin/bash
# Call 1 (4 GPUs, one job each): racecheck of both GPU tests on the every-lane build; the lane-0 vs every-lane A/B on
# VS-like and the mix; the trainer's per-layer selective recomputation (gpu-check, then vs the compiled peer at 64K);
# ncu of AdaSpa's wgmma masses kernel.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
NG=$(nvidia-smi -L | wc -l); echo "GPUs: $NG"; cat $O/gpu.txt
g() { if [ "$NG" -ge 4 ]; then echo $1; else echo $(( $1 % NG )); fi; }
(
  export CUDA_VISIBLE_DEVICES=$(g 0)
  OUT=$O/san1 SAN_TESTS=gpu-test SAN_TOOLS=racecheck SAN_LIMIT_S=430 bash scripts/gpu/kernels_sanitize_run.sh
) > $O/job0.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$(g 1)
  OUT=$O/san2 SAN_TESTS=gpu-test-vs SAN_TOOLS=racecheck SAN_LIMIT_S=280 bash scripts/gpu/kernels_sanitize_run.sh
  s=$(date +%s)
  timeout 150 ncu --set full --import-source no -k "regex:adaspa.*wg|wgmma.*mass|mass.*wg" -c 1 -f -o /tmp/adaspa-wg \
    ./bin/sparsering-bench-adaspa --n 65536 > $O/ncu-adaspa-run.log 2>&1
  echo "ncu adaspa exit $? $(( $(date +%s) - s )) s"
  ncu -i /tmp/adaspa-wg.ncu-rep --page details > $O/ncu-adaspa.txt 2>&1
  ncu -i /tmp/adaspa-wg.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $O/ncu-adaspa-sass.csv.gz
) > $O/job1.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$(g 2)
  for r in 1 2; do for b in every lane0; do
    d=.gpu-k/main; [ $b = lane0 ] && d=.gpu-k/lane1
    echo "== $b run $r"; timeout 100 $d/sparsering-bench-attn --mix --defaults 2>&1 | grep -E "^(vs-like|qwen mix|runs form)" | tee -a $O/ab-$b.txt
  done; done
) > $O/job2.log 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$(g 3)
  for p in bf16 tf32; do echo "== train-gpu-check $p"; timeout 60 bin/sparsering-exec train-gpu-check --model tiny-25m --seq 128 --precision $p --time-steps 0 2>&1 | tail -25; done
  OUT=$O/peer RUNS='compiled dense topp' LIMIT_S=150 bash scripts/gpu/train_vs_peer.sh 64K 2>&1 | tail -40
) > $O/job3.log 2>&1 &
t0=$(date +%s)
while [ $(jobs -r | wc -l) -gt 0 ] && [ $(( $(date +%s) - t0 )) -lt 545 ]; do sleep 15; echo "t=$(( $(date +%s) - t0 )) running $(jobs -r | wc -l)"; done
for j in 0 1 2 3; do echo "===== job$j"; tail -60 $O/job$j.log; done
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
