#!/bin/bash
# AdaSpa's masses from the dense pass, second build (per-block sums in the softmax, lg2.approx by the quad's lanes).
O=${OUT:-/tmp/out}; mkdir -p $O
[ -f .devdeps/env.sh ] && . .devdeps/env.sh
. scripts/gpu/mpi.sh
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt 2>&1
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
CL=models/clusters/h200-1x1-calibrated.json
A="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster $CL --layout contiguous --schedule ring"
timeout 150 bin/sparsering-gpu-test-vs > $O/gpu-test-vs.log 2>&1
echo "gpu-test-vs: exit $? $(el) s; $(tail -1 $O/gpu-test-vs.log)"
grep -E "^adaspa" $O/gpu-test-vs.log | grep -E "fused|FAIL" | cut -c1-170
timeout 60 $MPIRUN --oversubscribe --bind-to none -np 1 $A --seq 4K --pattern adaspa-online:0.8:128 --inputs vs --layers 2 --repeat 1 --check > $O/check4k-b128.log 2>&1
echo "check 4K B128: exit $? $(el) s"; grep -E "check layer|rror" $O/check4k-b128.log | cut -c1-200
timeout 150 bin/sparsering-bench-adaspa --n 65536,131072 --block 128 --reps 7 > $O/bench-b128.log 2>&1
echo "bench B128: exit $? $(el) s"; grep -E "^(N |65536|131072)" $O/bench-b128.log | cut -c1-250
timeout 80 bin/sparsering-bench-adaspa --n 65536,131072 --block 64 --reps 5 > $O/bench-b64.log 2>&1
echo "bench B64: exit $? $(el) s"; grep -E "^(65536|131072)" $O/bench-b64.log | cut -c1-250
for f in 1 0; do
  SR_ADASPA_FUSED=$f timeout 60 $MPIRUN --oversubscribe --bind-to none -np 1 $A --seq 64K --pattern adaspa-online:0.9 --inputs vs --repeat 1 > $O/attn64-f$f.log 2>&1
  echo "attn 64K fused=$f: exit $? $(el) s"; grep -hE "search:" $O/attn64-f$f.log | cut -c60-300
done
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
echo "done $(el) s"
