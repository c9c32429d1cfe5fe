#!/bin/bash
# python_check.sh — the Python package on ONE GPU (issue 28): sparsering.torch against torch SDPA (dense) and
# FlexAttention (an explicit vertical-slash mask), the GPU online estimate against the CPU reference, the
# Hugging Face backend (a tiny Qwen2 against sdpa, and trained next to our trainer), and with STAGES
# including bench the Qwen2.5-3B shape's training step at 128K (all 36 layers unless N_LAYERS; SEQ), SDPA against
# sparsering on each pattern of BENCH_PATTERNS (default "vs-topp:0.95 vs-online:0.95"; each decoder layer runs its
# own layer of a synthetic pattern, as our trainer does), with each one's peak memory and a fixed pattern's mean
# kept and computed shares over the layers; patterns that would end past BENCH_BUDGET_S (540 s from the stage's
# start) are skipped, so `bash scripts/gpu/python_check.sh bench` fits one 600 s GPU call (carry build/release and
# the libraries: building them here takes minutes).
# Needs torch on the machine (transformers for the hf and bench stages; they are skipped without it).
#
# Run from the repository root: bash scripts/gpu/python_check.sh [STAGES]   (default: dense vs online hf)
# The libraries (build/release/libsparsering{,_cuda}.so) are built here for sm_90a unless carried, and
# bin/sparsering-exec too when the hf stage runs (it trains beside the HF model); logs in $OUT (python_check.log,
# build.log, summary.txt).
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
STAGES=${1:-dense vs online hf}
case " $STAGES " in  # only the hf stage runs our trainer
  *" hf "*) ready=$(sr_exec_ready "$OUT/build-exec.log") ||
              { echo "$ready: failed (the hf stage's trainer comparison fails)" | tee -a "$S"; } ;;
esac
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" 2>&1 | tee -a "$S"
python3 -c "import transformers; print('transformers', transformers.__version__)" 2>&1 | tail -1 | tee -a "$S"
PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} timeout 1500 python3 tests/py/gpu_torch_check.py $STAGES 2>&1 |
  tee "$OUT/python_check.log"
rc=$?
grep -E "^(PASS|FAIL|SKIP)|passed, .* failed" "$OUT/python_check.log" >>"$S"
exit $rc
