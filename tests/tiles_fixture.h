// tiles_fixture.h — small layouts and random patterns for the pattern/tile tests, built by hand from an
// owner-per-token array so the tests do not depend on plan/layout.c, plus the brute-force references.
#ifndef SR_TILES_FIXTURE_H
#define SR_TILES_FIXTURE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan/layout.h"
#include "plan/pattern.h"
#include "plan/tile_index.h"
#include "plan/tiles.h"

// ---------------------------------------------------------------------------------------------
// layouts from an owner array: rank r's local order is its tokens in ascending global order

static layout_run *fx_sort_runs;
static inline int fx_cmp_by_global(const void *a, const void *b) {
  int64_t x = fx_sort_runs[*(const int64_t *)a].global, y = fx_sort_runs[*(const int64_t *)b].global;
  return (x > y) - (x < y);
}

static inline void fx_layout_from_owner(const int32_t *owner, int64_t n, int W, layout_kind kind, int64_t g, layout *l) {
  memset(l, 0, sizeof *l);
  l->kind = kind;
  l->n_tokens = n;
  l->world = W;
  l->granularity = g;
  l->rank_count = calloc((size_t)W, sizeof *l->rank_count);
  l->runs = calloc((size_t)n, sizeof *l->runs);
  l->rank_run_begin = calloc((size_t)W + 1, sizeof *l->rank_run_begin);
  for (int r = 0; r < W; r++) {
    l->rank_run_begin[r] = l->n_runs;
    int64_t prev = -2;
    for (int64_t t = 0; t < n; t++) {
      if (owner[t] != r) continue;
      if (t == prev + 1) l->runs[l->n_runs - 1].len++;
      else l->runs[l->n_runs++] = (layout_run){.global = t, .local = l->rank_count[r], .len = 1, .rank = r};
      l->rank_count[r]++;
      prev = t;
    }
  }
  l->rank_run_begin[W] = l->n_runs;
  l->by_global = calloc((size_t)l->n_runs + 1, sizeof *l->by_global);
  for (int64_t i = 0; i < l->n_runs; i++) l->by_global[i] = i;
  fx_sort_runs = l->runs;
  qsort(l->by_global, (size_t)l->n_runs, sizeof *l->by_global, fx_cmp_by_global);
}

static inline void fx_layout_free(layout *l) {
  free(l->rank_count);
  free(l->runs);
  free(l->rank_run_begin);
  free(l->by_global);
  memset(l, 0, sizeof *l);
}

// kind 0 contiguous, 1 zigzag, 2 striped with granularity g; remainders go to the first ranks/chunks.
static inline void fx_layout(int kind, int64_t n, int W, int64_t g, layout *l) {
  int32_t *owner = malloc((size_t)n * sizeof *owner);
  if (kind == 0) {
    int64_t t = 0;
    for (int r = 0; r < W; r++)
      for (int64_t c = 0; c < n / W + (r < n % W); c++) owner[t++] = r;
  } else if (kind == 1) {
    int64_t t = 0;
    for (int c = 0; c < 2 * W; c++)
      for (int64_t x = 0; x < n / (2 * W) + (c < n % (2 * W)); x++) owner[t++] = c < W ? c : 2 * W - 1 - c;
  } else {
    for (int64_t t = 0; t < n; t++) owner[t] = (int32_t)((t / g) % W);
  }
  fx_layout_from_owner(owner, n, W, kind == 0 ? LAYOUT_CONTIGUOUS : kind == 1 ? LAYOUT_ZIGZAG : LAYOUT_STRIPED, g, l);
  free(owner);
}

// ---------------------------------------------------------------------------------------------
// random heads (a small LCG: test inputs only)

static inline uint64_t fx_rand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

static inline int fx_cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

// Sort and deduplicate; returns the new count.
static inline int32_t fx_unique(int32_t *a, int32_t n) {
  qsort(a, (size_t)n, sizeof *a, fx_cmp_i32);
  int32_t m = 0;
  for (int32_t i = 0; i < n; i++)
    if (m == 0 || a[i] != a[m - 1]) a[m++] = a[i];
  return m;
}

// A VS head with sinks, a local window, clustered and scattered verticals, and slashes at tile edges.
static inline void fx_vs_head(head_pattern *h, int64_t n, uint64_t *seed) {
  h->kind = PATTERN_VS;
  int32_t cap = 400;
  h->vertical = malloc((size_t)cap * sizeof(int32_t));
  h->slash = malloc((size_t)cap * sizeof(int32_t));
  int32_t nv = 0, ns = 0;
  int64_t sinks = (int64_t)(fx_rand(seed) % 3) * 64;  // 0, 64 or 128: a whole first tile sometimes
  for (int64_t k = 0; k < sinks && k < n; k++) h->vertical[nv++] = (int32_t)k;
  int64_t run0 = (int64_t)(fx_rand(seed) % (uint64_t)n);  // a clustered run of verticals
  for (int64_t k = run0; k < run0 + 40 && k < n; k++) h->vertical[nv++] = (int32_t)k;
  for (int x = 0; x < 30; x++) h->vertical[nv++] = (int32_t)(fx_rand(seed) % (uint64_t)n);
  int64_t win = 1 + (int64_t)(fx_rand(seed) % 200);
  for (int64_t d = 0; d < win && d < n; d++) h->slash[ns++] = (int32_t)d;
  const int64_t edges[] = {127, 128, 129, 255, 256, 384, 500};
  for (int x = 0; x < 7; x++)
    if (edges[x] < n && fx_rand(seed) % 2) h->slash[ns++] = (int32_t)edges[x];
  for (int x = 0; x < 20; x++) h->slash[ns++] = (int32_t)(fx_rand(seed) % (uint64_t)n);
  h->n_vertical = fx_unique(h->vertical, nv);
  h->n_slash = fx_unique(h->slash, ns);
}

static inline void fx_block_head(head_pattern *h, int64_t n, int32_t block, uint64_t *seed) {
  h->kind = PATTERN_BLOCK;
  h->block = block;
  h->n_blocks = (n + block - 1) / block;
  h->row_words = (h->n_blocks + 63) / 64;
  h->mask = calloc((size_t)(h->n_blocks * h->row_words), sizeof(uint64_t));
  for (int64_t p = 0; p < h->n_blocks; p++)
    for (int64_t c = 0; c < h->n_blocks; c++)
      if (c == p || fx_rand(seed) % 3 == 0) h->mask[p * h->row_words + c / 64] |= 1ull << (c % 64);
}

// Fill a one-layer pattern: head h gets kind (h % 5): VS, VS, WINDOW, BLOCK, DENSE.
static inline void fx_mixed_pattern(pattern *p, int64_t n, int heads, uint64_t seed) {
  sr_error e;
  pattern_alloc(p, n, 1, heads, &e);
  for (int h = 0; h < heads; h++) {
    head_pattern *hp = pattern_head(p, 0, h);
    switch (h % 5) {
      case 0:
      case 1: fx_vs_head(hp, n, &seed); break;
      case 2:
        hp->kind = PATTERN_WINDOW;
        hp->sinks = (int64_t)(fx_rand(&seed) % 100);
        hp->window = 1 + (int64_t)(fx_rand(&seed) % 300);
        break;
      case 3: fx_block_head(hp, n, h % 2 ? 64 : 96, &seed); break;
      default: hp->kind = PATTERN_DENSE;
    }
  }
}

#endif
