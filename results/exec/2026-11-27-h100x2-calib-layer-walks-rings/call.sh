#!/bin/bash
# Call 5 (2 x H100): calibrate at W = 2 with the layer-shaped calls, then dense rings and MTraining at 256K on the two
# GPUs, predicted on that calibration (the new rule validated on a 2-GPU ring in the same call).
O=${OUT:-/tmp/out}; mkdir -p $O/logs
. scripts/gpu/mpi.sh
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
python3 -c "
import json; c=json.load(open('models/clusters/h100-1x4-calibrated.json')); c['gpus_per_node']=2; c['name']='h100-1x2'; c['description']='two GPUs of h100-1x4-calibrated'
json.dump(c, open('$O/h100-1x2.json','w'), indent=1)"
R="$MPIRUN --oversubscribe --bind-to none -np 2"
t0=$(date +%s)
timeout 100 $R bin/sparsering-exec calibrate --backend cuda --cluster $O/h100-1x2.json --out $O/h100-1x2-calibrated.json --log $O/logs/calib.csv > $O/logs/calibrate.log 2>&1
echo "calibrate: exit $? $(( $(date +%s) - t0 )) s"; grep -E "GEMM|full tiles|ring step beyond" $O/logs/calibrate.log
for r in "zigzag-ring" "striped-ring" "dense-ring" "mtraining --pattern vs-topp:0.95"; do
  n=$(echo $r | cut -d' ' -f1)
  timeout 70 $R bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster $O/h100-1x2-calibrated.json --seq 256K --strategy $r --layers 1 --repeat 2 --predict > $O/logs/l_${n}_256K.log 2>&1
  echo "$n 256K: exit $? t=$(( $(date +%s) - t0 ))"; grep -E "^attn|predict" $O/logs/l_${n}_256K.log | cut -c1-220
done
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
