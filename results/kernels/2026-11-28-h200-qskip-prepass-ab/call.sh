#!/bin/bash
# Session 2026-11-28f, call I (one H200): branch qskip with kernels/quad_bits.cu: the forward's and the backward tile
# kernel's quadrant skips reading the bytes worked out before each call.
O=${OUT:-/tmp/out}; mkdir -p $O
OUT=$O SR_BUDGET_S=560 bash .gpu-c/kernels_qskip_run.sh 2>&1 | tee $O/console.txt
