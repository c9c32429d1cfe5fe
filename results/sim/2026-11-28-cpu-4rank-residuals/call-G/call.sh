#!/bin/bash
# Session 2026-11-28h, call G (4 H200 of one host): where the 4-rank sparse backward's 13% goes (issue 24): MTraining
# (vs-topp:0.95, forward on the runs form) layers 0-11 at 512K on 4 ranks as 2 "nodes" and at 128K on one GPU of the
# same host, each with --trace (the measured timeline, every kernel of every ring step).
O=${OUT:-/tmp/out}; mkdir -p $O
[ -f .devdeps/env.sh ] && . .devdeps/env.sh
. scripts/gpu/mpi.sh
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN SR_COMM_TIMEOUT=120
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
python3 scripts/cluster_nodes.py .gpu-c/cal4.json 4 $O/h200-nodes-4-calibrated.json
X="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --strategy mtraining --fwd-runs --repeat 2"
t0=$(date +%s)
timeout 130 $MPIRUN --oversubscribe --bind-to none -np 4 $X --cluster $O/h200-nodes-4-calibrated.json --seq 512K --layers 12 \
  --skip-empty-sends --trace $O/trace-4r-512k.json > $O/l4-512k.log 2>&1
echo "4 ranks 512K: exit $? $(( $(date +%s) - t0 )) s"; grep -E "layer (0|11): fwd|^attn" $O/l4-512k.log | cut -c1-200
CUDA_VISIBLE_DEVICES=0 timeout 70 $MPIRUN --oversubscribe --bind-to none -np 1 $X --cluster models/clusters/h200-1x1-calibrated.json \
  --seq 128K --layers 12 --trace $O/trace-1r-128k.json > $O/l1-128k.log 2>&1
echo "1 GPU 128K: exit $? $(( $(date +%s) - t0 )) s"; grep -E "layer (0|11): fwd|^attn" $O/l1-128k.log | cut -c1-200
gzip -f $O/trace-*.json 2>/dev/null; ls -la $O
