#!/bin/bash
# moba_gate_run.sh — MoBA's gate on the GPU (--moba-gate gpu, kernels/moba_gpu.h, issue 30) on ONE GPU (kind
# nvidia-h200 or nvidia-h100-x1). Stages, each well within one call:
#   test    bin/sparsering-gpu-test-moba (the gate, its execution form, the forward over it and the backward's
#           transposed index, bit for bit against the CPU reference; built here with make when missing), then
#           moba:256:4 and moba:512:2 at 2K tokens (Qwen2.5-3B heads) with --check against float64 dense attention
#           masked by the selection, for --moba-gate gpu and host
#   time    one layer of Qwen2.5-3B attention at 64K (--repeat 3): dense, moba:4096:12 with the host gate (the
#           measured path: 1563.6 ms forward on an H100, results/gating/2026-11-27-h100-moba-cuda) and with the GPU
#           gate; then the GPU gate at 128K; a table of forward and backward ms last
# Every run has its own time limit; none starts after SR_BUDGET_S (540) seconds. Logs in $OUT/logs.tgz, the summary
# in $OUT/summary.txt, printed last. Run from the repository root: bash scripts/gpu/moba_gate_run.sh [STAGES] (default
# "test time"). A prebuilt bin/sparsering-exec is used when it runs here (carry .devdeps and .gpu-exec-mpi).
set -o pipefail
OUT=${OUT:-/tmp/sr-moba-gate-out}
W=/tmp/sr-moba-gate-logs
STAGES=${1:-test time}
BUDGET=${SR_BUDGET_S:-540}
STEP_KEEP='^attn |check layer|rror|failed|refus'
. scripts/gpu/one_gpu_common.sh  # S, log, CL, X, step

if [[ $STAGES == *test* ]]; then
  log "(test) the GPU gate against the CPU reference, bit for bit"
  [ -x bin/sparsering-gpu-test-moba ] || make -j8 bin/sparsering-gpu-test-moba >"$W/build-test.log" 2>&1
  timeout 180 bin/sparsering-gpu-test-moba >"$W/gpu-test-moba.log" 2>&1
  { echo "-- gpu-test-moba (exit $?)"; cat "$W/gpu-test-moba.log"; } >>"$S"
  for gate in gpu host; do
    step check-$gate 150 attn --backend cuda --model qwen2.5-3b --cluster "$CL" --seq 2K --layout contiguous \
      --schedule ring --pattern moba:256:4,moba:512:2 --moba-gate $gate --check
  done
fi

if [[ $STAGES == *time* ]]; then
  log "(time) one layer of Qwen2.5-3B attention: dense, moba:4096:12 with the host gate and the GPU gate"
  A=(attn --backend cuda --model qwen2.5-3b --cluster "$CL" --layout contiguous --schedule ring --repeat 3)
  step dense-64K 120 "${A[@]}" --seq 64K --pattern dense
  step host-64K 150 "${A[@]}" --seq 64K --pattern moba:4096:12 --moba-gate host
  step gpu-64K 120 "${A[@]}" --seq 64K --pattern moba:4096:12 --moba-gate gpu
  step gpu-128K 150 "${A[@]}" --seq 128K --pattern moba:4096:12 --moba-gate gpu
  echo "-- forward and backward per layer (ms), the last repetition's line" >>"$S"
  for r in dense-64K host-64K gpu-64K gpu-128K; do
    l=$(grep -E "^attn .*fwd [0-9.]+ ms bwd" "$W/$r.log" 2>/dev/null | tail -1)
    echo "$r: $(echo "$l" | grep -oE "fwd [0-9.]+ ms bwd [0-9.]+ ms" || echo "no timing line (see $r.log)")" | tee -a "$S"
  done
fi

tar czf "$OUT/logs.tgz" -C "$W" . 2>/dev/null
log "done"
echo "== summary"
cat "$S"
