#!/bin/bash
# AdaSpa's masses from a pass without output (no P V), third build: gpu-test-vs, bench, attn 64K, train 32K A/B.
O=${OUT:-/tmp/out}; mkdir -p $O
[ -f .devdeps/env.sh ] && . .devdeps/env.sh
. scripts/gpu/mpi.sh
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt 2>&1
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
CL=models/clusters/h200-1x1-calibrated.json
A="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster $CL --layout contiguous --schedule ring"
timeout 150 bin/sparsering-gpu-test-vs > $O/gpu-test-vs.log 2>&1
echo "gpu-test-vs: exit $? $(el) s; $(tail -1 $O/gpu-test-vs.log)"
grep -E "^adaspa" $O/gpu-test-vs.log | grep -E "fused|FAIL" | cut -c1-100,150-260
for b in 128 64; do
  timeout 60 $MPIRUN --oversubscribe --bind-to none -np 1 $A --seq 4K --pattern adaspa-online:0.8:$b --inputs vs --layers 2 --repeat 1 --check > $O/check4k-b$b.log 2>&1
  echo "check 4K B$b: exit $? $(el) s"; grep -E "check layer|rror" $O/check4k-b$b.log | cut -c1-200
done
timeout 150 bin/sparsering-bench-adaspa --n 65536,131072 --block 128 --reps 7 > $O/bench-b128.log 2>&1
echo "bench B128: exit $? $(el) s"; grep -E "^(N |65536|131072)" $O/bench-b128.log | cut -c1-280
timeout 80 bin/sparsering-bench-adaspa --n 65536,131072 --block 64 --reps 5 > $O/bench-b64.log 2>&1
echo "bench B64: exit $? $(el) s"; grep -E "^(65536|131072)" $O/bench-b64.log | cut -c1-280
for f in 1 0; do
  SR_ADASPA_FUSED=$f timeout 60 $MPIRUN --oversubscribe --bind-to none -np 1 $A --seq 64K --pattern adaspa-online:0.9 --inputs vs --repeat 1 > $O/attn64-f$f.log 2>&1
  echo "attn 64K fused=$f: exit $? $(el) s"; grep -hE "search:" $O/attn64-f$f.log | cut -c60-300
done
T="bin/sparsering-exec train --backend cuda --model qwen2.5-3b --cluster $CL --strategy adaspa --pattern adaspa-online:0.9 --seq 32K --steps 4 --data passkey --loss all --lr 1e-4"
for f in 1 0 1 0; do
  SR_ADASPA_FUSED=$f timeout 100 $MPIRUN --oversubscribe --bind-to none -np 1 $T --csv $O/train32-f$f-$(el).csv > $O/train32-f$f-$(el).log 2>&1
  echo "train 32K fused=$f: exit $? $(el) s"; grep -hE "^train: (adaspa|done)|tokens/s|rror" $(ls -t $O/train32-f$f-*.log | head -1) | cut -c1-250 | tail -4
done
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
echo "done $(el) s"
