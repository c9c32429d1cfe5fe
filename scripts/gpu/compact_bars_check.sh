#!/bin/bash
# compact_bars_check.sh — the compact bar form (plan/tiles_bars.c, kernels/bars_gpu.cu) against the stored lists on
# GPUs, as four one-GPU jobs: bash scripts/gpu/side_by_side.sh "bash scripts/gpu/compact_bars_check.sh 0" ... 3
#   0  the kernel tests (bin/sparsering-gpu-test: its "bars" cases expand every list on the GPU and compare with the
#      host's; bin/sparsering-gpu-test-vs)
#   1  vs-topp:0.95 at 16K, one rank: `attn --check` (float64 reference) with the index built on the GPU and on the
#      host, each with the compact bars and with SR_BARS=stored; then --deterministic --digest with both: equal or not
#   2  the same with vs-preset:qwen2.5-3b (its --check needs more than 95 s at 16K: the reference is float64 on the host)
#   3  the plan's device bytes at 128K and 512K (--plan-bytes-only) and one 128K layer timed with both forms
# Logs in $OUT (side_by_side.sh gives each job its own).
. scripts/gpu/mpi.sh
mkdir -p $OUT; L=$OUT
sed 's/"gpus_per_node": 2/"gpus_per_node": 1/' models/clusters/h200-1x2.json > /tmp/c1-$1.json
C=/tmp/c1-$1.json
X="$MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec"
A="attn --backend cuda --model qwen2.5-3b --cluster $C"
dig() { grep -h "digest layer" "$@" | sort | md5sum | cut -c1-12; }
case $1 in
0) timeout 150 bin/sparsering-gpu-test > $L/gpu-test.log 2>&1; echo "gpu-test: exit $? $(tail -1 $L/gpu-test.log)"
   grep -c "bars" $L/gpu-test.log | sed 's/^/bars lines: /'; grep -iE "fail|lists kept" $L/gpu-test.log | head -5
   timeout 60 bin/sparsering-gpu-test-vs > $L/gpu-test-vs.log 2>&1; echo "gpu-test-vs: exit $? $(tail -1 $L/gpu-test-vs.log)" ;;
1|2) P=vs-topp:0.95; [ $1 = 2 ] && P=vs-preset:qwen2.5-3b
   for ib in gpu cpu; do for b in compact stored; do
     SR_BARS=$([ $b = stored ] && echo stored) timeout ${CHECK_LIMIT:-60} $X $A --seq 16K --strategy mtraining --pattern $P --index-build $ib --check > $L/check-$ib-$b.log 2>&1
     echo "$P check index $ib bars $b: exit $? $(grep -oE 'check worst.*' $L/check-$ib-$b.log)"
   done; done
   for b in compact stored; do
     SR_BARS=$([ $b = stored ] && echo stored) timeout 60 $X $A --seq 16K --strategy mtraining --pattern $P --deterministic --digest > $L/dig-$b.log 2>&1
     echo "$P digest bars $b: exit $? $(dig $L/dig-$b.log)"
   done
   [ "$(dig $L/dig-compact.log)" = "$(dig $L/dig-stored.log)" ] && echo "GATE $P digests EQUAL" || echo "GATE $P digests DIFFER" ;;
3) for s in 128K 512K; do
     timeout 60 $X $A --seq $s --strategy mtraining --pattern vs-topp:0.95 --plan-bytes-only > $L/bytes-$s.log 2>&1
     echo "plan bytes $s: exit $?"; grep -E "plan device" $L/bytes-$s.log | cut -c1-300
   done
   for b in compact stored; do
     SR_BARS=$([ $b = stored ] && echo stored) timeout 90 $X $A --seq 128K --strategy mtraining --pattern vs-topp:0.95 --repeat 3 > $L/time-$b.log 2>&1
     echo "128K layer bars $b: exit $? $(grep -E 'layer 0: fwd' $L/time-$b.log)"
     grep -E "memory|MiB" $L/time-$b.log | head -3
   done ;;
esac
