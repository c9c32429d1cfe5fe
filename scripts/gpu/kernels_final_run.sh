#!/bin/bash
# kernels_final_run.sh — the kernels' table of record in one call on ONE GPU, prebuilt binaries: the GPU test of
# every backward variant (--bwd), bench-attn --fast (dense causal 16K / 64K, VS-like 128K; every backward variant),
# the budget mix (--mix --defaults, dumped), peers.py --mix --check (FlexAttention on the identical masks, our
# outputs against torch), peers.py --cudnn (SDPA cuDNN at 16K, 64K, 128K), compute-sanitizer memcheck of the small
# cases; SHAPES=1 (the default) also bench --shapes and peers.py --shapes (dense causal 128K, MHA 16/16, d 64);
# PEERS_MIX=0 skips FlexAttention (about 200 s). Logs in $OUT/kernels.tgz; the tables are printed last.
# Run from the repository root: bash scripts/gpu/kernels_final_run.sh
set -o pipefail
OUT=${OUT:-/tmp/sr-kfinal-out}
L=/tmp/sr-kfinal-logs
mkdir -p "$OUT" "$L" /tmp/sr-dump
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$L/gpu.txt"
s=$(date +%s); timeout 150 ./bin/sparsering-gpu-test --bwd >"$L/gpu-test.log" 2>&1
echo "gpu-test --bwd: exit $?, $(tail -1 "$L/gpu-test.log"), $(($(date +%s) - s)) s" | tee "$L/status.txt"
s=$(date +%s); timeout 150 ./bin/sparsering-bench-attn --fast >"$L/bench.log" 2>&1
echo "bench --fast: exit $?, $(($(date +%s) - s)) s" | tee -a "$L/status.txt"
s=$(date +%s); timeout 200 ./bin/sparsering-bench-attn --mix --defaults --dump /tmp/sr-dump >"$L/mix.log" 2>&1
echo "bench --mix: exit $?, $(($(date +%s) - s)) s" | tee -a "$L/status.txt"
s=$(date +%s); timeout 120 python3 kernels/bench/peers.py --cudnn >"$L/cudnn.log" 2>&1
echo "peers --cudnn: exit $?, $(($(date +%s) - s)) s" | tee -a "$L/status.txt"
if [ "${SHAPES:-1}" = 1 ]; then  # the dense goals' other shapes: 128K, MHA 16/16, d 64, ours then cuDNN
  s=$(date +%s); timeout 150 ./bin/sparsering-bench-attn --shapes >"$L/shapes.log" 2>&1
  echo "bench --shapes: exit $?, $(($(date +%s) - s)) s" | tee -a "$L/status.txt"
  s=$(date +%s); timeout 120 python3 kernels/bench/peers.py --shapes >"$L/cudnn-shapes.log" 2>&1
  echo "peers --shapes: exit $?, $(($(date +%s) - s)) s" | tee -a "$L/status.txt"
fi
if [ "${PEERS_MIX:-1}" = 1 ]; then
  s=$(date +%s); timeout 200 python3 kernels/bench/peers.py --mix --check /tmp/sr-dump >"$L/peers-mix.log" 2>&1
  echo "peers --mix --check: exit $?, $(($(date +%s) - s)) s" | tee -a "$L/status.txt"
fi
s=$(date +%s); timeout 100 compute-sanitizer --tool memcheck ./bin/sparsering-gpu-test --small --bwd >"$L/memcheck.log" 2>&1
echo "memcheck: exit $?, $(grep -E 'ERROR SUMMARY' "$L/memcheck.log" | tail -1), $(($(date +%s) - s)) s" | tee -a "$L/status.txt"
python3 kernels/bench/table.py "$L"/bench.log "$L"/mix.log "$L"/shapes.log "$L"/cudnn.log "$L"/cudnn-shapes.log \
  "$L"/peers-mix.log >"$L/table.txt" 2>&1
tar czf "$OUT/kernels.tgz" -C "$L" .
echo "== tables"
cat "$L/table.txt"
grep -E "^(mask|dense|vs-like|qwen|runs)" "$L/bench.log" "$L/mix.log" "$L/shapes.log" 2>/dev/null | cut -c1-220
grep -vE "^\s*$" "$L/cudnn.log" | tail -6
[ -f "$L/cudnn-shapes.log" ] && grep -E "SDPA" "$L/cudnn-shapes.log"
[ -f "$L/peers-mix.log" ] && tail -25 "$L/peers-mix.log"
