#!/bin/bash
# Session 2026-11-28b, call 7 (2 GPUs): the device-made patterns without their stand-in's copies (merge c5033d8) on
# the GPU: vs-online's check at 2000 tokens and its 256K layer on two ranks (exec_run.sh "vson"), then AdaSpa's check
# on one (adaspa_run.sh check).
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version --format=csv > $O/gpu.txt
OUT=$O/vson SR_NO_BUILD=1 SR_BUDGET_S=200 timeout 230 bash scripts/gpu/exec_run.sh "vson" > $O/vson.console 2>&1; echo "exec_run vson: exit $?"
grep -E "check|plan device bytes|memory per GPU|memory predicted|fwd .* ms, bwd|faster" $O/vson/summary.txt | head -20
mkdir -p $O/vlogs && tar xzf $O/vson/logs.tgz -C $O/vlogs 2>/dev/null; grep -h "plan device bytes\|memory" $O/vlogs/c_mtraining_256Kvs.log
CUDA_VISIBLE_DEVICES=0 OUT=$O/adaspa SR_BUDGET_S=150 timeout 170 bash scripts/gpu/adaspa_run.sh check > $O/adaspa.console 2>&1; echo "adaspa check: exit $?"
tail -12 $O/adaspa/summary.txt
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
