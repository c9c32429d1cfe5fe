#!/bin/sh
# The compact bars' columns of one layer (Qwen2.5-3B layer 0, vs-topp:0.95, 128K tokens, striped:128) before and
# after: `sparsering bench-bar-cols` on the worktree's build, and the same command linked with 6401d3a's
# plan/tiles_bars.c (the "before" binary; before-shim.c gives it tiles_bar_cols_find as the old dist_bar_cols's two
# serial calls). Run from the worktree root after `make bin/sparsering`; ROUNDS (default 3) rounds, interleaved.
set -e
here=results/plan/2026-11-28-cpu-bar-cols-speed
B=/tmp/sr-barcols-before
mkdir -p $B
FLAGS="-I. -D_GNU_SOURCE -DSR_HAVE_CUDA=1 -I/usr/local/cuda/include -std=c11 -O2 -fPIC -g"
git show 6401d3a:plan/tiles_bars.c > $B/tiles_bars.c
mpicc $FLAGS -c $B/tiles_bars.c -o $B/tiles_bars.o
mpicc $FLAGS -c $here/before-shim.c -o $B/shim.o
mpicc -o $B/sparsering -Wl,--whole-archive build/release/cli/*.o -Wl,--no-whole-archive $B/tiles_bars.o $B/shim.o \
  build/release/libsparsering.a -lcjson -lgsl -lgslcblas -lm -lpthread
for r in $(seq 1 ${ROUNDS:-3}); do
  for case in "--world 1 --rank 0" "--world 4 --rank 3"; do
    echo "== round $r: before, $case ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg))"
    $B/sparsering bench-bar-cols --seq 128K $case --fwd-runs --runs 3 --threads 1
    for t in 1 4; do
      echo "== round $r: after, $case, $t thread(s) ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg))"
      ./bin/sparsering bench-bar-cols --seq 128K $case --fwd-runs --runs 3 --threads $t
    done
  done
done
