#!/bin/bash
# variant_build.sh NAME "DEFINES" [binary...]: in $SM90_TREE (a checkout with a full sm_90a build), recompile the files in $VFILES
# (default kernels/sparse_attn_fwd_ws.cu) with DEFINES, replace them in a copy of the CUDA archive, link the binaries
# (default bench-attn and gpu-test) into $REPO/.gpu-k/NAME/.
set -e
REPO=${REPO:-$(pwd)}
N=$1; D=$2; shift 2
B=${*:-"bench/bench_attn:sparsering-bench-attn test/gpu_test:sparsering-gpu-test"}
cd "${SM90_TREE:?a checkout with a full sm_90a build}"
A="-gencode=arch=compute_90a,code=sm_90a"
V=/tmp/variant-$N; rm -rf $V; mkdir -p $V
cp build/release/libsparsering_cuda.a $V/cu.a
for f in ${VFILES:-kernels/sparse_attn_fwd_ws.cu}; do
  o=$V/$(basename $f).o
  /usr/local/cuda/bin/nvcc -std=c++17 -O3 $A -I. -DSR_HAVE_CUDA=1 $D -Xcompiler -fPIC -lineinfo -c $f -o $o
  ar t $V/cu.a | grep -qx "$(basename $f).o" || { echo "no member $(basename $f).o"; exit 1; }
  (cd $V && ar r cu.a $(basename $f).o)
done
mkdir -p $REPO/.gpu-k/$N
for pair in $B; do
  src=${pair%%:*}; out=${pair##*:}
  /usr/local/cuda/bin/nvcc -std=c++17 -O2 $A -I. -DSR_HAVE_CUDA=1 -o $REPO/.gpu-k/$N/$out kernels/$src.cu $V/cu.a build/release/libsparsering.a -lcjson -lgsl -lgslcblas -lm -lpthread 2>&1 | grep -v "Warning\|Remark\|^$" || true
done
ls -la $REPO/.gpu-k/$N
