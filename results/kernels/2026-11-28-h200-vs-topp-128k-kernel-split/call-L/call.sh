#!/bin/bash
# Session 2026-11-28f, call L (one H200): where a vs-topp:0.95 layer's attention time goes at 128K on the current
# default kernels (forward variant 5, backward variant 5), kernel by kernel (ncu durations), and full profiles of layer
# 1's forward, tile backward and bars' backward (pairs); main 98968c0's binaries.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
CL=models/clusters/h200-1x1-calibrated.json
A="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster $CL --seq 128K"
t0=$(date +%s)
timeout 50 $MPIRUN --oversubscribe --bind-to none -np 1 $A --strategy mtraining --pattern vs-topp:0.95 --layers 2 --repeat 2 > $O/attn128.log 2>&1; echo "attn128 $? $(( $(date +%s)-t0 ))"
timeout 80 $MPIRUN --oversubscribe --bind-to none -np 1 ncu --metrics gpu__time_duration.sum --csv --log-file $O/ncu-k.csv $A --strategy mtraining --pattern vs-topp:0.95 --layers 2 --repeat 1 > $O/ncu-k.log 2>&1; echo "ncu-k $? $(( $(date +%s)-t0 ))"
prof() {  # NAME KERNEL SKIP
  local s=$(date +%s)
  timeout 60 $MPIRUN --oversubscribe --bind-to none -np 1 ncu --set full --import-source no -k "regex:$2" --launch-skip "$3" -c 1 -f -o "/tmp/$1" \
    $A --strategy mtraining --pattern vs-topp:0.95 --layers 2 --repeat 1 >"$O/$1-run.log" 2>&1
  echo "$1: ncu exit $?, $(($(date +%s) - s)) s"
  ncu -i "/tmp/$1.ncu-rep" --page details >"$O/$1.txt" 2>&1
  ncu -i "/tmp/$1.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip >"$O/$1-sass.csv.gz"
}
# layer 1 is the second call of each kernel
prof bwd-l1 'sa_bwd_ws_kernel' 1
prof pair-l1 sa_bwd_ws_pair_kernel 1
echo "total $(( $(date +%s)-t0 )) s"
cd $O && tar czf all.tgz --exclude=all.tgz .
