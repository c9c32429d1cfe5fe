#!/bin/bash
# Session 2026-11-28f, call G (one H200): branch qskip (rebased on main 98968c0): the forward's quadrant skip.
O=${OUT:-/tmp/out}; mkdir -p $O
OUT=$O SR_BUDGET_S=560 bash .gpu-c/kernels_qskip_run.sh 2>&1 | tee $O/console.txt
