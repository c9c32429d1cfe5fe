// walks.c — the bar compute chunks of one layer of a VS pattern on one rank as the executor builds them
// (tiles_build, tiles_transpose, sa_bar_chunks_build: the host's copies of what the GPU index holds), against the
// simulator's chunks (cost_bar_grid_of: ceil(bars a head / (q_tiles x 64)) a head, each listing every query tile).
// For backward variant 4 (a CTA a chunk and part of its walk) and 5 (a CTA a pair of a head's chunks walking their
// merged lists), parts by bw_bar_parts (kernels/sa_bwd.cuh) on 132 SMs: the CTAs that walk, their 64-row steps, the
// steps at a given step time over the SMs, and a greedy list schedule of the launch (16 CTAs a chunk, bars_ws_launch;
// those without a part cost `empty_us`); and the whole walk of the kernels before 34159d3 (a CTA a chunk, 264 slots).
// Analysis only (issue 24, results/sim/2026-11-28-cpu-bars-ws-rate/README.md); build and run from the repository root:
//   mpicc -I. -D_GNU_SOURCE -std=c11 -O2 -o /tmp/walks results/sim/2026-11-28-cpu-bars-ws-rate/walks.c
//     build/release/libsparsering.a -lcjson -lgsl -lgslcblas -lm -lpthread
//   /tmp/walks MODEL SEQ PATTERN LAYER [step_us_v4 step_us_v5 empty_us]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"
#include "plan/pattern.h"
#include "plan/plan.h"
#include "plan/tiles.h"
#include "traces/trace.h"

#define SLOTS 132
#define SPLITS 16

// bw_bar_parts (kernels/sa_bwd.cuh) with splits 16 and no cap: parts of an eighth of the even share, at least 64 steps.
static int64_t parts_of(int64_t all, int64_t total) {
  int64_t fair = (all + SLOTS - 1) / SLOTS, ps = fair / 8 > 64 ? fair / 8 : 64, p = (total + ps - 1) / ps;
  return p < SPLITS ? p : SPLITS;
}
// The ascending union of two ascending lists (bp_walk).
static int64_t merged(const int32_t *a, int64_t na, const int32_t *b, int64_t nb) {
  int64_t i = 0, j = 0, n = 0;
  for (; i < na || j < nb; n++) {
    if (j >= nb || (i < na && a[i] < b[j])) i++;
    else if (i >= na || b[j] < a[i]) j++;
    else i++, j++;
  }
  return n;
}
// Jobs t[0..n) in order, each on the first of `slots` to free: the makespan.
static double lsched(const double *t, int64_t n, int slots) {
  double *s = calloc((size_t)slots, sizeof *s), mx = 0;
  for (int64_t i = 0; i < n; i++) {
    int m = 0;
    for (int k = 1; k < slots; k++)
      if (s[k] < s[m]) m = k;
    s[m] += t[i];
  }
  for (int k = 0; k < slots; k++) mx = s[k] > mx ? s[k] : mx;
  free(s);
  return mx;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: walks MODEL SEQ PATTERN LAYER [step_us_v4 step_us_v5 empty_us]\n");
    return 2;
  }
  double w4 = argc > 5 ? atof(argv[5]) : 1.672, w5 = argc > 6 ? atof(argv[6]) : 2.648, eu = argc > 7 ? atof(argv[7]) : 0;
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
  int layer = atoi(argv[4]), H = p.model.num_heads, KVH = p.model.num_kv_heads;
  tile_index ti;
  tile_index_t tt;
  sa_bar_chunks bc;
  if (tiles_build(&pat, layer, &p.layout, 0, &ti, &e) || tiles_transpose(&ti, 0, p.layout.rank_count[0], &tt, &e) ||
      sa_bar_chunks_build(&tt, H, KVH, &bc, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  int64_t n = bc.n_hchunks, all = 2 * bc.hc_q_cnt[n], qt = tt.n_qtiles, bars = 0, keys = 0;
  for (int64_t x = 0; x < tt.n_bar_keys; x++) bars += tt.bar_q_cnt[x + 1] - tt.bar_q_cnt[x];
  double model_k = ceil((double)bars / H / (qt * 64.0));
  double *t4 = malloc(sizeof(double) * n * SPLITS), *t5 = malloc(sizeof(double) * n * SPLITS), *tw = malloc(sizeof(double) * n);
  int64_t c4 = 0, st4 = 0, c5 = 0, st5 = 0, n4 = 0, n5 = 0;
  for (int64_t c = 0; c < n; c++) {  // variant 4: launch order c x 16 + part
    int64_t total = 2 * (bc.hc_q_cnt[c + 1] - bc.hc_q_cnt[c]), parts = parts_of(all, total);
    st4 += total, keys += bc.hc_n[c], tw[c] = (double)total;
    for (int k = 0; k < SPLITS; k++)
      if (k < parts && total) t4[n4++] = (double)total / parts * w4, c4++;
      else if (eu > 0) t4[n4++] = eu;
  }
  for (int64_t c = 0, place = 0; c < n; c++) {  // variant 5: a chunk at an even place of its head's walks the pair
    place = c > 0 && bc.hc_head[c - 1] == bc.hc_head[c] ? place + 1 : 0;
    int pair = c + 1 < n && bc.hc_head[c + 1] == bc.hc_head[c];
    int64_t na = bc.hc_q_cnt[c + 1] - bc.hc_q_cnt[c], nb = pair ? bc.hc_q_cnt[c + 2] - bc.hc_q_cnt[c + 1] : 0;
    int64_t total = 2 * (na + nb), parts = parts_of(all, total);
    int64_t m = place & 1 ? 0 : 2 * (pair ? merged(bc.hc_q_idx + bc.hc_q_cnt[c], na, bc.hc_q_idx + bc.hc_q_cnt[c + 1], nb) : na);
    st5 += m;
    for (int k = 0; k < SPLITS; k++)
      if (!(place & 1) && k < parts && m) t5[n5++] = (double)m / parts * w5, c5++;
      else if (eu > 0) t5[n5++] = eu;
  }
  printf("layer %d: q_tiles %lld, bar entries %lld, distinct (head, key) %d, compute chunks %lld (the model's: %.0f), "
         "keys a chunk %.1f\n", layer, (long long)qt, (long long)bars, tt.n_bar_keys, (long long)n, H * model_k,
         (double)keys / n);
  printf("  v4: CTAs that walk %lld, steps %lld (the model's %.0f), listed %.3f of a step's 64 keys, steps x %.3f us / %d "
         "%.3f ms, list schedule %.3f ms\n", (long long)c4, (long long)st4, 2.0 * qt * H * model_k, (double)bars * 2 / st4 / 64.0,
         w4, SLOTS, st4 * w4 / SLOTS / 1e3, lsched(t4, n4, SLOTS) / 1e3);
  printf("  v5: CTAs that walk %lld, steps %lld, steps x %.3f us / %d %.3f ms, list schedule %.3f ms (%lld CTAs launched)\n",
         (long long)c5, (long long)st5, w5, SLOTS, st5 * w5 / SLOTS / 1e3, lsched(t5, n5, SLOTS) / 1e3, (long long)n * SPLITS);
  int64_t longest = 0;
  for (int64_t c = 0; c < n; c++) longest = tw[c] > longest ? (int64_t)tw[c] : longest;
  printf("  whole walks (264 slots): list schedule %.0f steps (longest chunk %lld); the model: %.0f chunks of %lld steps, "
         "%.0f waves, %.0f steps\n", lsched(tw, n, 264), (long long)longest, H * model_k, (long long)(2 * qt),
         ceil(H * model_k / 264), ceil(H * model_k / 264) * 2 * qt);
  printf("  compute chunks a head:");
  for (int h = 0; h < H; h++) {
    int k = 0;
    for (int64_t c = 0; c < n; c++) k += bc.hc_head[c] == h;
    printf(" %d", k);
  }
  printf("\n");
  free(t4), free(t5), free(tw);
  sa_bar_chunks_free(&bc);
  tiles_transpose_free(&tt);
  tiles_free(&ti);
  pattern_free(&pat);
  plan_free(&p);
  return 0;
}
