# gbar's GPU check: the counting transposer and exact conversion (gpu-test-vs), then the plans built on the GPU
# against the host's (digest equality, --deterministic), then one 128K layer's set-up; then AdaSpa's masses under ncu
. scripts/gpu/mpi.sh
mkdir -p $OUT; L=$OUT
sed 's/"gpus_per_node": 2/"gpus_per_node": 1/' models/clusters/h200-1x2.json > /tmp/c1g.json
X="$MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec"
A="attn --backend cuda --model qwen2.5-3b --cluster /tmp/c1g.json"
timeout 90 bin/sparsering-gpu-test-vs > $L/gpu-test-vs.log 2>&1; echo "gpu-test-vs: exit $? $(tail -1 $L/gpu-test-vs.log)"
grep -iE "fail|transp|exact" $L/gpu-test-vs.log | head -12
dig() { grep -h "digest layer" "$@" | sort | md5sum | cut -c1-12; }
for P in vs-topp:0.95 vs-preset:qwen2.5-3b; do for ib in gpu cpu; do
  timeout 90 $X $A --seq 16K --strategy mtraining --pattern $P --index-build $ib --deterministic --digest > $L/dig-$P-$ib.log 2>&1
  echo "$P digest index $ib: exit $? $(dig $L/dig-$P-$ib.log) $(grep -ciE 'out of memory|fell back' $L/dig-$P-$ib.log) oom/fallback lines"
done; done
timeout 60 $X $A --seq 4K --strategy mtraining --pattern vs-topp:0.95 --index-build gpu --check > $L/check4k.log 2>&1
echo "check 4K index gpu: exit $? $(grep -oE 'check worst.*' $L/check4k.log | head -2)"
timeout 120 $X $A --seq 128K --strategy mtraining --pattern vs-topp:0.95 --index-build gpu --repeat 2 > $L/t128.log 2>&1
echo "128K layer index gpu: exit $?"; grep -E "^attn|built|layer 0" $L/t128.log | head -6
echo "== ncu adaspa wgmma masses, 64K B=128"
timeout 200 ncu --set full --import-source yes -k regex:adaspa -c 2 -o $L/adaspa64k bin/sparsering-bench-adaspa --n 65536 --block 128 --reps 1 > $L/ncu.log 2>&1; echo "ncu exit $?"
timeout 60 ncu -i $L/adaspa64k.ncu-rep --page details --print-details all > $L/ncu-details.txt 2>&1
grep -E "^  [a-z_]+.*adaspa|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|No Eligible|One or More|L1/TEX Hit|Shared Memory" $L/ncu-details.txt | head -40
tar czf $L/ncu.tgz -C $L adaspa64k.ncu-rep ncu-details.txt 2>/dev/null; rm -f $L/adaspa64k.ncu-rep $L/ncu-details.txt
