#!/bin/bash
# python_check.sh — the Python package on ONE GPU (issue 28): sparsering.torch against torch SDPA (dense) and
# FlexAttention (an explicit vertical-slash mask), the GPU online estimate against the CPU reference, the
# Hugging Face backend (a tiny Qwen2 against sdpa, and trained next to our trainer), and with STAGES
# including bench the Qwen2.5-3B-shaped step at 128K, SDPA against sparsering (N_LAYERS, SEQ).
# Needs torch on the machine (transformers for the hf and bench stages; they are skipped without it).
#
# Run from the repository root: bash scripts/gpu/python_check.sh [STAGES]   (default: dense vs online hf)
# The libraries (build/release/libsparsering{,_cuda}.so) and bin/sparsering-exec are built here for sm_90a
# unless carried; logs in $OUT (python_check.log, build.log, summary.txt).
set -o pipefail
OUT=${OUT:-/tmp/sr-python-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
S="$OUT/summary.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$S"
. scripts/gpu/mpi.sh
ARCH="-gencode=arch=compute_90a,code=sm_90a"
# the libraries: a carried build works when its CUDA library loads here
if ! python3 -c "import ctypes; ctypes.CDLL('build/release/libsparsering_cuda.so')" 2>/dev/null; then
  echo "building the shared libraries" | tee -a "$S"
  timeout 400 make -j"$(nproc)" "${MAKE_MPI[@]}" CUDA_ARCH="$ARCH" python-libs >"$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log" | tee -a "$S"; exit 1; }
fi
ready=$(sr_exec_ready "$OUT/build-exec.log") || { echo "$ready: failed (the hf stage's trainer comparison fails)" | tee -a "$S"; }
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" 2>&1 | tee -a "$S"
python3 -c "import transformers; print('transformers', transformers.__version__)" 2>&1 | tail -1 | tee -a "$S"
PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} timeout 1500 python3 tests/py/gpu_torch_check.py ${1:-dense vs online hf} 2>&1 |
  tee "$OUT/python_check.log"
rc=$?
grep -E "^(PASS|FAIL|SKIP)|passed, .* failed" "$OUT/python_check.log" >>"$S"
exit $rc
