#!/bin/bash
# Session 2026-11-28c, call 1: where a vs-topp:0.95 layer's attention time goes, kernel by kernel (ncu durations), 64K one rank.
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
CL=models/clusters/h200-1x1-calibrated.json
A="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster $CL --seq 64K"
t0=$(date +%s)
timeout 120 $MPIRUN --oversubscribe --bind-to none -np 1 $A --strategy mtraining --pattern vs-topp:0.95 --layers 2 --repeat 3 > $O/attn64.log 2>&1; echo "attn64 $? $(( $(date +%s)-t0 ))"
timeout 120 $MPIRUN --oversubscribe --bind-to none -np 1 $A --strategy mtraining --pattern vs-topp:0.95 --layers 2 --repeat 3 --fwd-runs > $O/attn64-runs.log 2>&1; echo "attn64runs $? $(( $(date +%s)-t0 ))"
timeout 120 $MPIRUN --oversubscribe --bind-to none -np 1 $A --strategy dense-ring --layers 1 --repeat 3 > $O/dense64.log 2>&1; echo "dense64 $? $(( $(date +%s)-t0 ))"
timeout 150 $MPIRUN --oversubscribe --bind-to none -np 1 ncu --metrics gpu__time_duration.sum --csv --log-file $O/ncu-k.csv $A --strategy mtraining --pattern vs-topp:0.95 --layers 2 --repeat 2 > $O/ncu-k.log 2>&1; echo "ncu-k $? $(( $(date +%s)-t0 ))"
timeout 100 $MPIRUN --oversubscribe --bind-to none -np 1 ncu --metrics gpu__time_duration.sum --csv --log-file $O/ncu-dense.csv $A --strategy dense-ring --layers 1 --repeat 2 > $O/ncu-dense.log 2>&1; echo "ncu-dense $? $(( $(date +%s)-t0 ))"
prof() {  # NAME KERNEL SKIP
  local s=$(date +%s)
  timeout 120 $MPIRUN --oversubscribe --bind-to none -np 1 ncu --set full --import-source no -k "regex:$2" --launch-skip "$3" -c 1 -f -o "/tmp/$1" \
    $A --strategy mtraining --pattern vs-topp:0.95 --layers 2 --repeat 1 >"$O/$1-run.log" 2>&1
  echo "$1: ncu exit $?, $(($(date +%s) - s)) s"
  ncu -i "/tmp/$1.ncu-rep" --page details >"$O/$1.txt" 2>&1
  ncu -i "/tmp/$1.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip >"$O/$1-sass.csv.gz"
}
# layer 1 (9.4% kept) is the second call of each kernel
prof fwd-l1 sa_fwd_ws_kernel 1
prof bwd-l1 sa_bwd_ws_kernel 1
prof bars-l1 sa_bwd_bars_kernel 1
echo "total $(( $(date +%s)-t0 )) s"
cd $O && tar czf all.tgz --exclude=all.tgz . 
