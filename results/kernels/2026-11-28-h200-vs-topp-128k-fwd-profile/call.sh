#!/bin/bash
# Session 2026-11-28g call 1 (one H200): AdaSpa's masses with the consumer warpgroups taking turns (SR_ADASPA_TURNS)
# against the default in one process; GPU test of the adaspa cases; the forward of a vs-topp:0.95 layer at 128K
# profiled (tile form and runs form, layer 1).
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
t0=$(date +%s)
timeout 60 bin/sparsering-bench-adaspa --n 65536,131072 --block 128 --reps 7 > $O/bench-b128.txt 2>&1; echo "bench128 $? $(( $(date +%s)-t0 ))"
timeout 60 bin/sparsering-bench-adaspa --n 65536,131072 --block 64 --reps 7 > $O/bench-b64.txt 2>&1; echo "bench64 $? $(( $(date +%s)-t0 ))"
timeout 150 bin/sparsering-gpu-test-vs > $O/gpu-test-vs.txt 2>&1; echo "gpu-test-vs $? $(( $(date +%s)-t0 ))"
timeout 60 bin/sparsering-bench-adaspa --n 65536,131072 --block 128 --reps 7 > $O/bench-b128-2.txt 2>&1; echo "bench128b $? $(( $(date +%s)-t0 ))"
CL=models/clusters/h200-1x1-calibrated.json
A="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster $CL --seq 128K --strategy mtraining --pattern vs-topp:0.95 --layers 2 --repeat 1"
prof() {  # NAME KERNEL SKIP EXTRA
  local s=$(date +%s)
  timeout 70 $MPIRUN --oversubscribe --bind-to none -np 1 ncu --set full --import-source no -k "regex:$2" --launch-skip "$3" -c 1 -f -o "/tmp/$1" \
    $A $4 >"$O/$1-run.log" 2>&1
  echo "$1: ncu exit $?, $(($(date +%s) - s)) s"
  ncu -i "/tmp/$1.ncu-rep" --page details >"$O/$1.txt" 2>&1
  ncu -i "/tmp/$1.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip >"$O/$1-sass.csv.gz"
}
prof fwd-l1 sa_fwd_ws_kernel 1 ""
prof fwdruns-l1 sa_fwd_ws_kernel 1 "--fwd-runs"
echo "total $(( $(date +%s)-t0 )) s"
cd $O && tar czf all.tgz --exclude=all.tgz .
