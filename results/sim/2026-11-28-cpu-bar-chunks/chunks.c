// chunks.c — the bars' compute chunks and their walks' steps of a VS pattern's layers on one rank: the executor's
// (tiles_build, tiles_transpose, sa_bar_chunks_build) against the simulator's count from the pattern's columns
// (sim/bar_walks.c) and the work counts' (ceil(bars a head / (q_tiles x 64)) chunks of 2 q_tiles steps).
// Analysis only (results/sim/2026-11-28-cpu-bar-chunks/README.md); build and run from the repository root:
//   mpicc -I. -D_GNU_SOURCE -std=c11 -O2 -o /tmp/chunks results/sim/2026-11-28-cpu-bar-chunks/chunks.c
//     build/release/libsparsering.a -lcjson -lgsl -lgslcblas -lm -lpthread
//   /tmp/chunks MODEL SEQ PATTERN FIRST_LAYER LAST_LAYER
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"
#include "plan/pattern.h"
#include "plan/plan.h"
#include "plan/tiles.h"
#include "sim/bar_walks.h"
#include "traces/trace.h"

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: chunks MODEL SEQ PATTERN FIRST_LAYER LAST_LAYER\n");
    return 2;
  }
  sr_error e;
  sr_error_clear(&e);
  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.strategy, sizeof s.strategy, "mtraining");
  snprintf(s.model, sizeof s.model, "%s", argv[1]);
  s.seq = atoll(argv[2]);
  snprintf(s.pattern, sizeof s.pattern, "%s", argv[3]);
  snprintf(s.cluster, sizeof s.cluster, "h200-1x1-calibrated");
  plan p;
  pattern pat;
  if (plan_build(&s, &p, &e) || pattern_source_load(p.spec.pattern, &p.model, p.spec.seq, p.spec.seed, 0, &pat, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  int H = p.model.num_heads, KVH = p.model.num_kv_heads;
  printf("layer  chunks: executor  sim  counts   steps: executor  sim  counts   (sim / executor)\n");
  double sx = 0, ss = 0, sc = 0, tx = 0, ts = 0, tc = 0;
  int n_layers = 0;
  for (int layer = atoi(argv[4]); layer <= atoi(argv[5]); layer++, n_layers++) {
    tile_index ti;
    tile_index_t tt;
    sa_bar_chunks bc;
    if (tiles_build(&pat, layer, &p.layout, 0, &ti, &e) || tiles_transpose(&ti, 0, p.layout.rank_count[0], &tt, &e) ||
        sa_bar_chunks_build(&tt, H, KVH, &bc, &e)) {
      fprintf(stderr, "%s\n", e.msg);
      return 1;
    }
    int64_t bars = 0, qt = tt.n_qtiles;
    double steps = 0;
    for (int64_t x = 0; x < tt.n_bar_keys; x++) bars += tt.bar_q_cnt[x + 1] - tt.bar_q_cnt[x];
    for (int32_t c = 0; c < bc.n_hchunks; c++) steps += 2.0 * (double)(bc.hc_q_cnt[c + 1] - bc.hc_q_cnt[c]);
    bar_walks b;
    double cw[2] = {0, 0};
    int unknown = 0;
    if (bar_walks_open(&p.layout, &b, &e)) return 1;
    for (int h = 0; h < H; h++) unknown |= bar_walks_head(&b, pattern_head(&pat, layer, h), p.layout.n_tokens, cw);
    bar_walks_close(&b);
    double k = H * ceil((double)bars / H / (qt * 64.0));
    printf("%5d  %8d %6.0f %6.0f   %9.0f %9.0f %9.0f   %.3f %.3f%s\n", layer, bc.n_hchunks, cw[0], k, steps, cw[1],
           k * 2 * qt, cw[0] / bc.n_hchunks, cw[1] / steps, unknown ? " (not counted)" : "");
    sx += bc.n_hchunks, ss += cw[0], sc += k, tx += steps, ts += cw[1], tc += k * 2 * qt;
    sa_bar_chunks_free(&bc);
    tiles_transpose_free(&tt);
    tiles_free(&ti);
  }
  printf("all %d: chunks %.0f %.0f %.0f (sim %.3f, counts %.3f of the executor's); steps %.0f %.0f %.0f (sim %.3f, "
         "counts %.3f)\n", n_layers, sx, ss, sc, ss / sx, sc / sx, tx, ts, tc, ts / tx, tc / tx);
  pattern_free(&pat);
  plan_free(&p);
  return 0;
}
