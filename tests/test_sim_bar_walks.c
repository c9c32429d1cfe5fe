// test_sim_bar_walks.c — the bars' compute chunks and their walks counted from the pattern (sim/bar_walks.h) against
// the executor's (tiles_build, tiles_transpose, sa_bar_chunks_build: kernels/bar_chunks.c) on small hand-made
// patterns, and cost_bar_grid_chunks (sim/cost.h) on them.
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"
#include "sim/bar_walks.h"
#include "sim/cost.h"
#include "tests/test.h"
#include "tests/tiles_fixture.h"

// The executor's compute chunks of cell (q, s) and their walks' 64-row steps (two a query tile of a chunk's list).
static void executor_chunks(const pattern *p, const layout *l, int q, int s, int heads, double *chunks, double *steps) {
  sr_error e;
  tile_index t;
  tile_index_t tt;
  sa_bar_chunks bc;
  *chunks = *steps = 0;
  CHECK_EQ_INT(tiles_build(p, 0, l, q, &t, &e), SR_OK);
  CHECK_EQ_INT(tiles_transpose(&t, s, l->rank_count[s], &tt, &e), SR_OK);
  CHECK_EQ_INT(sa_bar_chunks_build(&tt, heads, heads, &bc, &e), SR_OK);
  *chunks = bc.n_hchunks;
  for (int32_t c = 0; c < bc.n_hchunks; c++) *steps += 2.0 * (double)(bc.hc_q_cnt[c + 1] - bc.hc_q_cnt[c]);
  sa_bar_chunks_free(&bc);
  tiles_transpose_free(&tt);
  tiles_free(&t);
}

// Verticals every `step` tokens from `first` (heap copy: the pattern frees its lists).
static void verticals(head_pattern *h, int64_t n, int64_t first, int64_t step) {
  h->kind = PATTERN_VS;
  h->n_vertical = 0;
  h->vertical = malloc(sizeof(int32_t) * (size_t)(n / step + 2));
  for (int64_t k = first; k < n; k += step) h->vertical[h->n_vertical++] = (int32_t)k;
}

// Verticals only (no slashes): every column is a bar in each query tile from its own on, so the count is the
// executor's, chunks and steps, on one rank and on two (each cell).
TEST(bar_walks_count_the_executors_chunks_and_steps_of_verticals) {
  sr_error e;
  for (int W = 1; W <= 2; W++) {
    enum { N = 9000, H = 3 };
    layout l;
    fx_layout(0, N, W, 1, &l);
    pattern p;
    CHECK_EQ_INT(pattern_alloc(&p, N, 1, H, &e), SR_OK);
    verticals(pattern_head(&p, 0, 0), N, 5, 37);   // 243 keys: 4 chunks on one rank
    verticals(pattern_head(&p, 0, 1), N, 100, 400);  // 23 keys: one chunk
    verticals(pattern_head(&p, 0, 2), N, 0, 64);     // 141 keys, 3 chunks
    bar_walks b;
    CHECK_EQ_INT(bar_walks_open(&l, &b, &e), SR_OK);
    double *cw = calloc((size_t)2 * W * W, sizeof *cw);
    for (int h = 0; h < H; h++) CHECK_EQ_INT(bar_walks_head(&b, pattern_head(&p, 0, h), N, cw), 0);
    for (int q = 0; q < W; q++)
      for (int s = 0; s < W; s++) {
        double chunks, steps;
        executor_chunks(&p, &l, q, s, H, &chunks, &steps);
        CHECK_EQ_INT((int64_t)cw[2 * (q * W + s)], (int64_t)chunks);
        CHECK_EQ_INT((int64_t)cw[2 * (q * W + s) + 1], (int64_t)steps);
      }
    if (W == 1) CHECK_EQ_INT((int64_t)cw[0], 4 + 1 + 3);
    free(cw);
    bar_walks_close(&b);
    pattern_free(&p);
    fx_layout_free(&l);
  }
}

// With slashes a column's tile may be an entry where it would be a bar: the count is then an upper bound, chunks and
// steps; the diagonal slash alone (offset 0) takes each column's own query tile only.
TEST(bar_walks_bound_the_executors_chunks_where_slashes_cover_columns) {
  sr_error e;
  enum { N = 6000 };
  layout l;
  fx_layout(0, N, 1, 1, &l);
  pattern p;
  CHECK_EQ_INT(pattern_alloc(&p, N, 1, 2, &e), SR_OK);
  for (int h = 0; h < 2; h++) {
    head_pattern *hp = pattern_head(&p, 0, h);
    verticals(hp, N, 3 + h, 29 + 10 * h);
    hp->n_slash = h + 1;
    hp->slash = malloc(sizeof(int32_t) * 2);
    hp->slash[0] = 0, hp->slash[1] = 700;
  }
  bar_walks b;
  CHECK_EQ_INT(bar_walks_open(&l, &b, &e), SR_OK);
  double cw[2] = {0, 0}, chunks, steps;
  for (int h = 0; h < 2; h++) CHECK_EQ_INT(bar_walks_head(&b, pattern_head(&p, 0, h), N, cw), 0);
  executor_chunks(&p, &l, 0, 0, 2, &chunks, &steps);
  CHECK(chunks > 0 && cw[0] >= chunks && cw[1] >= steps);
  CHECK(cw[0] <= chunks + 2);  // a head's last chunk at most
  bar_walks_close(&b);
  pattern_free(&p);
  fx_layout_free(&l);
}

// Heads whose bars come from blocks or selections are not counted (the caller keeps the work counts' chunks).
TEST(bar_walks_leave_heads_without_columns_to_the_work_counts) {
  sr_error e;
  layout l;
  fx_layout(0, 1024, 1, 1, &l);
  bar_walks b;
  CHECK_EQ_INT(bar_walks_open(&l, &b, &e), SR_OK);
  head_pattern hp;
  memset(&hp, 0, sizeof hp);
  double cw[2] = {0, 0};
  hp.kind = PATTERN_DENSE;
  CHECK_EQ_INT(bar_walks_head(&b, &hp, 1024, cw), 0);
  hp.kind = PATTERN_BLOCK;
  CHECK_EQ_INT(bar_walks_head(&b, &hp, 1024, cw), 1);
  hp.kind = PATTERN_WINDOW, hp.sinks = 70, hp.window = 128;  // 70 sinks: 2 chunks, from the first query tile
  CHECK_EQ_INT(bar_walks_head(&b, &hp, 1024, cw), 0);
  CHECK(cw[0] == 2 && cw[1] == 2 * 8 + 2 * 8);
  bar_walks_close(&b);
  fx_layout_free(&l);
}

// cost_bar_grid_chunks: without chunks the work counts' grid (cost_bar_grid_of, the same bits); with them the CTAs
// at the mean chunk's walk and the longest a head's first chunk's 2 q_tiles.
TEST(bar_grid_chunks_take_the_executors_chunks) {
  gpu_desc g;
  memset(&g, 0, sizeof g);
  g.bar_walk_us = 2, g.bar_walk_parts = 16;
  cost_bar_grid a, b;
  cost_bar_grid_of(&g, 16 * 256 * 64 * 3.0, 256, 16, 132, &a);
  cost_bar_grid_chunks(&g, 16 * 256 * 64 * 3.0, 256, 16, 132, 0, 0, &b);
  CHECK(memcmp(&a, &b, sizeof a) == 0);
  CHECK(a.chunks == 48 && a.steps == 48 * 512.0);
  // 100 chunks walking 30,000 steps: fair = ceil(30000 / 132) = 228, parts of max(64, 28) = 64 steps: the mean walk
  // (300 steps) in 5 parts, the longest (512) in 8.
  cost_bar_grid_chunks(&g, 1e6, 256, 16, 132, 100, 30000, &b);
  CHECK(b.chunks == 100 && b.steps == 30000 && b.ctas == 500 && b.longest == 64 && b.parts == 8);
  // Pairs: 100 / 16 = 6.25 chunks a head, 3 pairs and a quarter lone chunk, each walking the mean's 300 steps.
  g.bar_walk_pairs = 1;
  cost_bar_grid_chunks(&g, 1e6, 256, 16, 132, 100, 30000, &b);
  CHECK_REL(b.ctas, 16 * (3 * 10 + 0.25 * 5), 1e-12);
  CHECK_REL(b.steps, 16 * 3.25 * 300, 1e-12);
}
