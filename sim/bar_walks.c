// bar_walks.c — the bar kernel's compute chunks and their walks from the pattern's columns (bar_walks.h).
//
// The executor's chunks (kernels/bar_chunks.c, sa_bar_chunks_build, lines 57-78): a query head's bar keys of the
// transposed index, ascending, cut into chunks of 64 (`for (f = hb[ih]; f < hb[ih + 1]; f += CHUNK)`), each walking
// the ascending union of the query tiles its keys are listed in (hc_q_idx), two 64-row steps a tile. A bar key is a
// column (a VS vertical, a WINDOW sink) that some query tile after it lists as a bar (plan/tiles.c: a column is a
// bar in every query tile after it whose KV tile holding it is not a tile entry), so a (head, query rank, source)
// cell's keys are the head's columns the source holds at or before the query rank's last position, and chunk c's
// walk starts at its first key: the query tiles whose last position is at or after it (the same estimate as the
// memory model's, sim/attn_memory.c, count_keys). What it leaves out: a column that every query tile after it covers
// by a tile entry is no key (the count is an upper bound), and the tiles after a chunk's first key where every key
// of the chunk is covered are not walked (the steps are an upper bound). On the vs-topp:0.95 layer 0 of Qwen2.5-3B
// at 64K on one rank: 718 chunks where the executor forms 699, 487,296 steps where its chunks walk 447,244 (the work
// counts' chunks: 384 of 1,024 steps, 393,216; results/sim/2026-11-28-cpu-bar-chunks).
#include <stdlib.h>
#include <string.h>

#include "plan/tiles.h"
#include "sim/bar_walks.h"

// The count visits each column once a query rank: a head of 10,000 verticals on 4 ranks is 40,000 visits, but
// Llama-3.1-70B at 4M on 1024 ranks (bench-sim's, its 64 heads and 80 layers) took the simulator from 19 s to over
// 10 minutes. Beyond this many visits a head, the caller keeps the work counts' chunks (bar_walks_head returns 1).
#define BAR_WALKS_MAX_VISITS 262144.0

void bar_walks_close(bar_walks *b) {
  free(b->tile_off), free(b->tile_last), free(b->last_q), free(b->keys), free(b->touched);
  memset(b, 0, sizeof *b);
}

int bar_walks_open(const layout *l, bar_walks *b, sr_error *e) {
  memset(b, 0, sizeof *b);
  int W = l->world;
  b->l = l, b->W = W;
  b->tile_off = malloc(sizeof(int64_t) * (size_t)(W + 1));
  b->last_q = calloc((size_t)W, sizeof(int64_t));
  if (!b->tile_off || !b->last_q) goto oom;
  b->tile_off[0] = 0;
  for (int q = 0; q < W; q++) b->tile_off[q + 1] = b->tile_off[q] + sr_cdiv(l->rank_count[q], TILE);
  if (!(b->tile_last = malloc(sizeof(int64_t) * (size_t)sr_max64(1, b->tile_off[W])))) goto oom;
  for (int q = 0; q < W; q++)
    for (int64_t t = b->tile_off[q]; t < b->tile_off[q + 1]; t++)
      b->tile_last[t] = layout_global(l, q, sr_min64((t - b->tile_off[q] + 1) * TILE, l->rank_count[q]) - 1);
  for (int q = 0; q < W; q++) b->last_q[q] = -1;
  for (int64_t k = 0; k < l->n_runs; k++)
    b->last_q[l->runs[k].rank] = sr_max64(b->last_q[l->runs[k].rank], l->runs[k].global + l->runs[k].len - 1);
  return SR_OK;
oom:
  bar_walks_close(b);
  return sr_internal_error(e, 0, "bar walks: out of memory");
}

int64_t bar_walks_tiles_after(const bar_walks *b, int q, int64_t p) {
  int64_t lo = b->tile_off[q], hi = b->tile_off[q + 1], end = hi;
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (b->tile_last[mid] < p) lo = mid + 1;
    else hi = mid;
  }
  return end - lo;
}

int bar_walks_head(bar_walks *b, const head_pattern *hp, int64_t n_tokens, double *cw) {
  if (hp->kind == PATTERN_DENSE) return 0;  // no bars
  if (hp->kind != PATTERN_VS && hp->kind != PATTERN_WINDOW) return 1;
  int W = b->W;
  int64_t n = hp->kind == PATTERN_VS ? hp->n_vertical : sr_min64(hp->sinks, n_tokens);
  if ((double)n * W > BAR_WALKS_MAX_VISITS) return 1;
  if (!b->keys) {  // at the first head counted (a layer of heads beyond the bound allocates nothing)
    b->keys = calloc((size_t)W * W, sizeof(int64_t));
    b->touched = malloc(sizeof(int64_t) * (size_t)W * W);
    if (!b->keys || !b->touched) return 1;
  }
  for (int64_t i = 0; i < n; i++) {  // ascending: a cell's keys come in the order the executor cuts them
    int64_t col = hp->kind == PATTERN_VS ? hp->vertical[i] : i, local;
    int32_t src;
    if (layout_locate(b->l, col, &src, &local)) continue;
    for (int q = 0; q < W; q++) {
      if (col > b->last_q[q]) continue;
      int64_t x = (int64_t)q * W + src;
      if (b->keys[x] == 0) b->touched[b->n_touched++] = x;
      if (b->keys[x] % 64 == 0) cw[2 * x] += 1, cw[2 * x + 1] += 2.0 * (double)bar_walks_tiles_after(b, q, col);
      b->keys[x]++;
    }
  }
  for (int64_t k = 0; k < b->n_touched; k++) b->keys[b->touched[k]] = 0;
  b->n_touched = 0;
  return 0;
}
