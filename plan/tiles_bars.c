// tiles_bars.c — the bars' compact form (tiles.h, "compact bars"): a bar list is a cell's columns minus the
// keys its tile entries (and runs) already compute, so the columns of each (head, source) and the lists'
// lengths, which the index keeps anyway (bar_cnt, bar_q_cnt), give every list back.
//
// Why the first n uncovered keys: a column k is a bar of query tile i iff k is at or before the tile's last
// query position and no entry of the cell covers it. Where the local orders ascend with the global positions
// (every layout here), the columns in reach of a query tile are a prefix of the source's sorted columns, and
// those in reach of a key a suffix of the query tiles; so a cell's bars are the first bar_cnt-many uncovered
// columns, and a key's query tiles the last bar_q_cnt-many query tiles without an entry on its KV tile. The
// expansions below walk exactly that (the GPU's, kernels/bars_gpu.cu, walks the same), and *_exact compares
// them with the stored lists, so a plan keeps the compact form only where it gives the same lists.
#include <stdlib.h>
#include <string.h>

#include "plan/tiles_internal.h"

void tiles_bar_cols_free(tile_bar_cols *c) {
  if (!c) return;
  free(c->col_cnt);
  free(c->col_key);
  memset(c, 0, sizeof *c);
}

int tiles_bar_cols_build(const tile_index *t, tile_bar_cols *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  int W = t->world;
  int64_t nq = t->n_qtiles, slots = (int64_t)t->heads * W;
  out->heads = t->heads, out->world = W;
  out->col_cnt = calloc((size_t)slots + 1, sizeof *out->col_cnt);
  int32_t max_key = -1;  // the marks span the largest key of any list (each list ascends: its last is its largest)
  for (int64_t c = 0; c < (int64_t)t->heads * nq; c++)
    for (int64_t o = c * (W + 1); o < c * (W + 1) + W; o++)
      if (t->bar_cnt[o + 1] > t->bar_cnt[o] && t->bar_idx[t->bar_cnt[o + 1] - 1] > max_key)
        max_key = t->bar_idx[t->bar_cnt[o + 1] - 1];
  uint8_t *mark = calloc((size_t)max_key + 2, 1);
  int64_t cap = 1024, n = 0;
  out->col_key = malloc((size_t)cap * sizeof *out->col_key);
  if (!out->col_cnt || !mark || !out->col_key) goto oom;
  for (int h = 0; h < t->heads; h++)
    for (int s = 0; s < W; s++) {
      int32_t hi = -1;
      for (int64_t i = 0; i < nq; i++) {
        int64_t c = ((int64_t)h * nq + i) * (W + 1) + s;
        for (int64_t a = t->bar_cnt[c]; a < t->bar_cnt[c + 1]; a++) {
          int32_t k = t->bar_idx[a];
          if (k < 0 || k > max_key) {  // a list not ascending may hide a larger key than its last
            free(mark);
            tiles_bar_cols_free(out);
            return sr_input_error(e, NULL, "bar_idx", "key %d negative or not ascending", k);
          }
          mark[k] = 1, hi = hi > k ? hi : k;
        }
      }
      out->col_cnt[(int64_t)h * W + s] = n;
      for (int32_t k = 0; k <= hi; k++) {
        if (!mark[k]) continue;
        mark[k] = 0;
        if (n == cap) {
          int32_t *g = realloc(out->col_key, (size_t)(cap *= 2) * sizeof *g);
          if (!g) goto oom;
          out->col_key = g;
        }
        out->col_key[n++] = k;
      }
    }
  out->col_cnt[slots] = n, out->n_cols = n;
  free(mark);
  return SR_OK;
oom:
  free(mark);
  tiles_bar_cols_free(out);
  return sr_internal_error(e, 0, "tiles: out of memory for the bars' columns");
}

// Whether an entry of the cell whose tiles are tile_idx[t0, t1) and runs run_key[r0, r1) computes key k (the
// segments ascend: binary searches, as the GPU's expansion does).
static int covered(const tile_index *t, int64_t t0, int64_t t1, int64_t r0, int64_t r1, int32_t k) {
  int32_t j = k / TILE;
  int64_t lo = t0, hi = t1;
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (t->tile_idx[mid] < j) lo = mid + 1;
    else hi = mid;
  }
  if (lo < t1 && t->tile_idx[lo] == j) return 1;
  lo = r0, hi = r1;  // the last run starting at or before k
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (t->run_key[mid] <= k) lo = mid + 1;
    else hi = mid;
  }
  return lo > r0 && k < t->run_key[lo - 1] + t->run_len[lo - 1];
}

// The bars of cell c (offset of (head, query tile) x (W + 1)) for source s into out[0, n): 0, or -1 when the
// columns run out first.
static int cell_bars(const tile_index *t, const tile_bar_cols *cols, int h, int64_t c, int s, int32_t *out) {
  int64_t o = c + s, n = t->bar_cnt[o + 1] - t->bar_cnt[o], w = 0;
  int64_t r0 = t->run_cnt ? t->run_cnt[o] : 0, r1 = t->run_cnt ? t->run_cnt[o + 1] : 0;
  const int32_t *key = cols->col_key + cols->col_cnt[(int64_t)h * t->world + s];
  int64_t nk = cols->col_cnt[(int64_t)h * t->world + s + 1] - cols->col_cnt[(int64_t)h * t->world + s];
  for (int64_t x = 0; x < nk && w < n; x++)
    if (!covered(t, t->tile_cnt[o], t->tile_cnt[o + 1], r0, r1, key[x])) out[w++] = key[x];
  return w == n ? 0 : -1;
}

int tiles_bars_expand(const tile_index *t, const tile_bar_cols *cols, int32_t *bar_idx) {
  int W = t->world;
  for (int h = 0; h < t->heads; h++)
    for (int64_t i = 0; i < t->n_qtiles; i++) {
      int64_t c = ((int64_t)h * t->n_qtiles + i) * (W + 1);
      for (int s = 0; s < W; s++)
        if (cell_bars(t, cols, h, c, s, bar_idx + t->bar_cnt[c + s])) return -1;
    }
  return 0;
}

int tiles_bars_compact_exact(const tile_index *t, const tile_bar_cols *cols) {
  int W = t->world, ok = cols->heads == t->heads && cols->world == W;
  int64_t most = 0, cells = (int64_t)t->heads * t->n_qtiles * (W + 1);
  for (int64_t c = 0; ok && c < cells; c++)
    if (c % (W + 1) < W) most = sr_max64(most, t->bar_cnt[c + 1] - t->bar_cnt[c]);
  int32_t *buf = malloc((size_t)most * sizeof *buf + 1);
  if (!buf) return 0;
  for (int h = 0; ok && h < t->heads; h++)
    for (int64_t i = 0; ok && i < t->n_qtiles; i++) {
      int64_t c = ((int64_t)h * t->n_qtiles + i) * (W + 1);
      for (int s = 0; ok && s < W; s++)
        ok = !cell_bars(t, cols, h, c, s, buf) &&
             !memcmp(buf, t->bar_idx + t->bar_cnt[c + s], (size_t)(t->bar_cnt[c + s + 1] - t->bar_cnt[c + s]) * 4);
    }
  free(buf);
  return ok;
}

// The query tiles of bar key x into out[0, n): the last n without an entry on the key's KV tile, ascending;
// 0, or -1 when the query tiles run out first.
static int key_tiles(const tile_index_t *t, int64_t x, int32_t *out) {
  int64_t n = t->bar_q_cnt[x + 1] - t->bar_q_cnt[x], w = 0;
  int64_t kv = (int64_t)t->bar_key_head[x] * t->n_kvtiles + t->bar_key[x] / TILE;
  int64_t lo = t->kv_cnt[kv], at = t->kv_cnt[kv + 1];  // the KV tile's query tiles ascend: walked from the top
  for (int32_t i = t->n_qtiles - 1; i >= 0 && w < n; i--) {
    while (at > lo && t->q_idx[at - 1] > i) at--;
    if (at > lo && t->q_idx[at - 1] == i) continue;
    out[n - 1 - w++] = i;
  }
  return w == n ? 0 : -1;
}

int tiles_transpose_bars_expand(const tile_index_t *t, int32_t *bar_q_idx) {
  for (int64_t x = 0; x < t->n_bar_keys; x++)
    if (key_tiles(t, x, bar_q_idx + t->bar_q_cnt[x])) return -1;
  return 0;
}

int tiles_transpose_bars_compact_exact(const tile_index_t *t) {
  int32_t *buf = malloc(((size_t)t->n_qtiles + 1) * sizeof *buf);
  int ok = buf != NULL;
  for (int64_t x = 0; ok && x < t->n_bar_keys; x++) {
    int64_t n = t->bar_q_cnt[x + 1] - t->bar_q_cnt[x];
    ok = n <= t->n_qtiles && !key_tiles(t, x, buf) && !memcmp(buf, t->bar_q_idx + t->bar_q_cnt[x], (size_t)n * 4);
  }
  free(buf);
  return ok;
}
