// vs_layout.c — a layout's local tiles as flat tables for the GPU conversion of VS patterns (vs_gpu.h):
// the global segments of every local tile, each tile's first and last global position, and every global
// token's rank and local index. Host code, so the tables are tested on the CPU (tests/test_vs_layout.c).
#include <stdlib.h>
#include <string.h>

#include "kernels/vs_gpu.h"
#include "plan/util.h"

void vs_layout_tables_free(vs_layout_tables *t) {
  free(t->tile_base), free(t->seg_off), free(t->seg_g), free(t->seg_len), free(t->tile_gmin), free(t->tile_gmax);
  free(t->key_rank), free(t->key_local);
  memset(t, 0, sizeof *t);
}

int vs_layout_tables_build(const layout *l, vs_layout_tables *t, sr_error *e) {
  memset(t, 0, sizeof *t);
  int W = l->world;
  // Bars are emitted per source in global order, which is the source's local order only when every rank's
  // runs ascend in global position (true of contiguous, zigzag and striped; not of permutations).
  for (int64_t x = 1; x < l->n_runs; x++)
    if (l->runs[x].rank == l->runs[x - 1].rank && l->runs[x].global < l->runs[x - 1].global)
      return sr_input_error(e, NULL, "layout", "the GPU conversion needs each rank's local order to follow global order "
                                               "(contiguous, zigzag, striped); %s does not", layout_kind_name(l->kind));
  t->world = W;
  t->n_tokens = l->n_tokens;
  t->tile_base = calloc((size_t)W + 1, sizeof *t->tile_base);
  if (!t->tile_base) return sr_internal_error(e, 0, "vs layout: out of memory");
  for (int r = 0; r < W; r++) t->tile_base[r + 1] = t->tile_base[r] + sr_cdiv(l->rank_count[r], TILE);
  t->all_tiles = t->tile_base[W];
  // A tile's segments: the runs it overlaps, cut at the tile's edges; at most runs + tiles segments in all.
  int64_t cap = l->n_runs + t->all_tiles + 1;
  t->seg_off = malloc(((size_t)t->all_tiles + 1) * sizeof *t->seg_off);
  t->seg_g = malloc((size_t)cap * sizeof *t->seg_g);
  t->seg_len = malloc((size_t)cap * sizeof *t->seg_len);
  t->tile_gmin = malloc(((size_t)t->all_tiles + 1) * sizeof *t->tile_gmin);
  t->tile_gmax = malloc(((size_t)t->all_tiles + 1) * sizeof *t->tile_gmax);
  t->key_rank = malloc((size_t)l->n_tokens * sizeof *t->key_rank);
  t->key_local = malloc((size_t)l->n_tokens * sizeof *t->key_local);
  if (!t->seg_off || !t->seg_g || !t->seg_len || !t->tile_gmin || !t->tile_gmax || !t->key_rank || !t->key_local) {
    vs_layout_tables_free(t);
    return sr_internal_error(e, 0, "vs layout: out of memory for %lld tiles", (long long)t->all_tiles);
  }
  int64_t ns = 0;
  for (int r = 0; r < W; r++) {
    int64_t x = l->rank_run_begin[r], end = l->rank_run_begin[r + 1];
    for (int64_t j = 0; j < t->tile_base[r + 1] - t->tile_base[r]; j++) {
      int64_t flat = t->tile_base[r] + j, a = j * TILE, b = sr_min64(a + TILE, l->rank_count[r]);  // local [a, b)
      t->seg_off[flat] = (int32_t)ns;
      t->tile_gmin[flat] = INT64_MAX, t->tile_gmax[flat] = -1;
      while (x < end && l->runs[x].local + l->runs[x].len <= a) x++;
      for (int64_t y = x; y < end && a < b; y++) {
        const layout_run *run = &l->runs[y];
        int64_t off = a - run->local, len = sr_min64(run->len - off, b - a);
        t->seg_g[ns] = run->global + off;
        t->seg_len[ns] = (int32_t)len;
        t->tile_gmin[flat] = sr_min64(t->tile_gmin[flat], run->global + off);
        t->tile_gmax[flat] = sr_max64(t->tile_gmax[flat], run->global + off + len - 1);
        ns++;
        a += len;
      }
    }
  }
  t->seg_off[t->all_tiles] = (int32_t)ns;
  t->n_segs = ns;
  for (int64_t x = 0; x < l->n_runs; x++)
    for (int64_t u = 0; u < l->runs[x].len; u++) {
      t->key_rank[l->runs[x].global + u] = l->runs[x].rank;
      t->key_local[l->runs[x].global + u] = (int32_t)(l->runs[x].local + u);
    }
  return SR_OK;
}
