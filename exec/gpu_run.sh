#!/bin/bash
# gpu_run.sh — the executor's measurements on the GPU machine (2 x H200, NVLink), in one call:
# build, correctness against dense attention, overlap of the dense striped ring, MTraining vs dense
# ring, calibration and the simulator's prediction vs measurement. Logs under $OUT, table last.
# Run from the repository root: bash exec/gpu_run.sh [STAGES]   (STAGES: any of a b c d; default "a b c d")
# Needs about 10 minutes of a 2-GPU machine; gpu_quick.sh is the short version (it made the figures in
# docs/exec.md). Do not pipe its output through tail: a call that times out then returns nothing.
# Note: the striped-ring strategy (G = 1) spends minutes in tiles_build above 64K (docs/exec.md).
set -o pipefail
OUT=${OUT:-/tmp/sr-exec-out}
W=/tmp/sr-exec-logs  # every log here; $OUT gets a tarball, the summary and the calibrated cluster (few files)
mkdir -p "$OUT" "$W"
STAGES=${1:-a b c d}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv >"$W/gpu.txt" 2>&1
nvidia-smi topo -m >>"$W/gpu.txt" 2>&1

# Open MPI: the machine's own, else the Debian packages carried in ../.gpu-exec-mpi (relocated).
MAKE_MPI=()
MPIRUN=mpirun
if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
  M=/tmp/mpi/usr
  if [ ! -x $M/bin/orterun ]; then for f in ../.gpu-exec-mpi/*.deb; do dpkg -x "$f" /tmp/mpi; done; fi
  export OPAL_PREFIX=$M PATH=$M/bin:$PATH
  export LD_LIBRARY_PATH=$M/lib/x86_64-linux-gnu:$M/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  MAKE_MPI=(CC="gcc -I$M/lib/x86_64-linux-gnu/openmpi/include"
            LDLIBS="-lcjson -lgsl -lgslcblas -lm -lpthread -L$M/lib/x86_64-linux-gnu/openmpi/lib -lmpi")
  MPIRUN=$M/bin/orterun
fi
echo "mpirun: $MPIRUN" >>"$W/gpu.txt"
make -j32 "${MAKE_MPI[@]}" CUDA_ARCH="-gencode=arch=compute_90,code=sm_90" bin/sparsering-exec bin/sparsering \
  >"$W/build.log" 2>&1 || { tail -40 "$W/build.log"; exit 1; }

RUN="$MPIRUN --oversubscribe --bind-to none -np 2"
X="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b"
log() { echo "== $*" | tee -a "$W/summary.txt"; }

if [[ $STAGES == *a* ]]; then
  log "(a) correctness vs dense masked attention (float64 CPU reference on the same bf16 inputs), seq 2000"
  timeout 300 $RUN $X --cluster h200-1x2 --seq 2000 --layout striped:128,zigzag,contiguous --schedule ring \
    --pattern dense,window:64:512,vs-like:64:256:64,block:0.3:128 --check --skip-empty-sends >"$W/a.log" 2>&1
  echo "exit $?" >>"$W/a.log"
  grep -E "^attn|exit|rank .* failed" "$W/a.log" | tee -a "$W/summary.txt"
  grep -qE "FAIL|failed|exit [^0]" "$W/a.log" && { echo "correctness failed: stopping"; tail -40 "$W/a.log"; exit 1; }
fi

if [[ $STAGES == *b* ]]; then
  log "(b) dense striped ring (striped-ring: striped G=1, ring, dense) forward+backward, one layer"
  for S in 128K 256K; do
    timeout 300 $RUN $X --cluster h200-1x2 --strategy striped-ring --seq $S --repeat 3 --csv "$W/b_$S.csv" \
      >"$W/b_$S.log" 2>&1
    grep -E "layer 0:|^attn|failed" "$W/b_$S.log" | tee -a "$W/summary.txt"
  done
fi

if [[ $STAGES == *c* ]]; then
  log "(c) MTraining (striped G=128, double ring, ${CPAT:-vs-topp:0.95}) vs dense ring (contiguous, ring, dense)"
  for S in 256K 512K; do
    for st in dense-ring mtraining; do
      P=(); [ $st = mtraining ] && [ -n "${CPAT:-}" ] && P=(--pattern "$CPAT")
      timeout 300 $RUN $X --cluster h200-1x2 --strategy $st "${P[@]}" --seq $S --repeat 2 --skip-empty-sends \
        >"$W/c_${st}_$S.log" 2>&1
      grep -E "layer 0:|^attn|failed" "$W/c_${st}_$S.log" | tee -a "$W/summary.txt"
    done
  done
fi

if [[ $STAGES == *d* ]]; then
  log "(d) calibration, then the simulator (calibrated cluster) vs measured"
  timeout 200 $RUN bin/sparsering-exec calibrate --backend cuda --cluster h200-1x2 --out "$W/h200-1x2-calibrated.json" \
    --log "$W/calib.csv" >"$W/calib.log" 2>&1
  cat "$W/calib.log" | tee -a "$W/summary.txt"
  for cfg in "striped-ring 64K" "striped-ring 128K" "zigzag-ring 64K" "zigzag-ring 128K" "dense-ring 64K" "dense-ring 128K" \
             ${DPAT:+"mtraining 128K"} ${DPAT:+"mtraining 256K"}; do
    set -- $cfg
    P=(); [ $1 = mtraining ] && P=(--pattern "$DPAT")
    timeout 200 $RUN $X --cluster "$W/h200-1x2-calibrated.json" --strategy $1 "${P[@]}" --seq $2 --repeat 2 \
      --predict >"$W/d_$1_$2.log" 2>&1
    echo "$1 $2: $(grep -E 'predicted' "$W/d_$1_$2.log")" | tee -a "$W/summary.txt"
  done
fi
cp "$W/summary.txt" "$OUT/" 2>/dev/null
cp "$W/h200-1x2-calibrated.json" "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$W" . 2>/dev/null
echo "== table"
cat "$W/summary.txt"
