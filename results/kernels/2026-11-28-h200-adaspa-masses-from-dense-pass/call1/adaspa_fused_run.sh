#!/bin/bash
# AdaSpa's masses from the dense pass (branch fused), ONE GPU, about 6 minutes; prebuilt bin/ (sm_90a); logs under $OUT.
O=${OUT:-/tmp/out}; mkdir -p $O
[ -f .devdeps/env.sh ] && . .devdeps/env.sh
. scripts/gpu/mpi.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt 2>&1
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
CL=models/clusters/h200-1x1-calibrated.json
A="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster $CL --layout contiguous --schedule ring"
timeout 150 bin/sparsering-gpu-test-vs > $O/gpu-test-vs.log 2>&1
echo "gpu-test-vs: exit $? $(el) s; $(tail -1 $O/gpu-test-vs.log)"
grep -E "^adaspa" $O/gpu-test-vs.log | grep -E "fused|FAIL" | cut -c1-170
grep -E "FAIL" $O/gpu-test-vs.log | head -5 | cut -c1-170
for b in 128 64; do
  timeout 60 $MPIRUN --oversubscribe --bind-to none -np 1 $A --seq 4K --pattern adaspa-online:0.8:$b --inputs vs --layers 2 --repeat 1 --check > $O/check4k-b$b.log 2>&1
  echo "check 4K B$b: exit $? $(el) s"; grep -E "search:|check layer|rror" $O/check4k-b$b.log | cut -c1-240
done
timeout 150 bin/sparsering-bench-adaspa --n 65536,131072 --block 128 --reps 7 > $O/bench-b128.log 2>&1
echo "bench B128: exit $? $(el) s"; cat $O/bench-b128.log | cut -c1-250
timeout 60 bin/sparsering-bench-adaspa --n 65536 --block 64 --reps 5 > $O/bench-b64.log 2>&1
echo "bench B64: exit $? $(el) s"; grep -E "^65536" $O/bench-b64.log | cut -c1-250
for f in 1 0 1 0; do
  SR_ADASPA_FUSED=$f timeout 60 $MPIRUN --oversubscribe --bind-to none -np 1 $A --seq 64K --pattern adaspa-online:0.9 --inputs vs --repeat 1 > $O/attn64-f$f-$(el).log 2>&1
  echo "attn 64K fused=$f: exit $? $(el) s"; grep -hE "search:|layer 0: fwd" $(ls -t $O/attn64-f$f-*.log | head -1) | cut -c1-260
done
timeout 120 $MPIRUN --oversubscribe --bind-to none -np 1 compute-sanitizer --tool memcheck $A --seq 4K --pattern adaspa-online:0.8:128 --inputs vs --layers 1 --repeat 1 > $O/memcheck-4k.log 2>&1
echo "memcheck attn 4K: exit $? $(el) s; $(grep -E 'ERROR SUMMARY' $O/memcheck-4k.log | tail -1)"
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
echo "done $(el) s"
