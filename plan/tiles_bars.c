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

#include "plan/parallel.h"
#include "plan/tiles_internal.h"

void tiles_bar_cols_free(tile_bar_cols *c) {
  if (!c) return;
  free(c->col_cnt);
  free(c->col_key);
  memset(c, 0, sizeof *c);
}

// One head's columns as they are found: key[cnt[s], cnt[s + 1]) of source s (W + 1 offsets); last: the largest last
// key of its lists (-1 when none); negative: a list holds a negative key; beyond: a key past the marks' limit was
// left out (a list not ascending).
typedef struct {
  int32_t *key;
  int64_t n, cap;
  int64_t *cnt;
  int32_t last;
  int negative, beyond;
} head_cols;

// A thread's scratch: marks over keys [0, span), zero between heads, grown to the largest key met; the check's table.
typedef struct {
  uint8_t *mark;
  int64_t span;
  int64_t *first, first_cap;
} cols_scratch;

static int marks_grow(cols_scratch *sc, int64_t k) {
  int64_t span = sc->span;
  while (span <= k) span *= 2;
  uint8_t *m = realloc(sc->mark, (size_t)span);
  if (!m) return -1;
  memset(m + sc->span, 0, (size_t)(span - sc->span));
  sc->mark = m, sc->span = span;
  return 0;
}

// Append the marked keys of the marks to c, clearing them; whole zero words skipped (a source's columns are a few
// thousand of its keys). Returns 0, or -1 on out of memory.
static int marks_take(cols_scratch *sc, head_cols *c) {
  for (int64_t w = 0; w < sc->span; w += 8) {
    uint64_t word;
    memcpy(&word, sc->mark + w, 8);
    if (!word) continue;
    for (int64_t k = w; k < w + 8; k++) {
      if (!sc->mark[k]) continue;
      sc->mark[k] = 0;
      if (c->n == c->cap) {
        int32_t *g = realloc(c->key, (size_t)(c->cap = c->cap ? 2 * c->cap : 1024) * sizeof *g);
        if (!g) return -1;
        c->key = g;
      }
      c->key[c->n++] = (int32_t)k;
    }
  }
  return 0;
}

// Mark the keys of list [k, end), the marks grown up to limit (-1: the list's last key, which bounds an ascending
// list's); negative keys and keys past the limit are only noted. Returns 0, or -1 on out of memory.
static int list_mark(cols_scratch *sc, const int32_t *k, const int32_t *end, int32_t limit, head_cols *c) {
  if (k < end && end[-1] > c->last) c->last = end[-1];
  for (;;) {
    uint32_t top = (uint32_t)(sc->span - 1);  // unsigned: a negative key is past it too
    uint8_t *mark = sc->mark;
    for (; end - k >= 4; k += 4) {  // four at a time, one branch (a layer's lists hold tens of millions of keys)
      uint32_t k0 = (uint32_t)k[0], k1 = (uint32_t)k[1], k2 = (uint32_t)k[2], k3 = (uint32_t)k[3];
      if ((k0 > top) | (k1 > top) | (k2 > top) | (k3 > top)) break;  // taken one at a time below
      mark[k0] = 1, mark[k1] = 1, mark[k2] = 1, mark[k3] = 1;
    }
    for (; k < end && (uint32_t)*k <= top; k++) mark[*k] = 1;
    if (k == end) return 0;
    if (*k < 0) c->negative = 1;
    else if (*k > (limit < 0 ? end[-1] : limit)) c->beyond = 1;  // no marks grown for a key no list ends with
    else if (marks_grow(sc, *k)) return -1;
    else sc->mark[*k] = 1;
    k++;
  }
}

// Head h's columns of every source into c (its cnt of W + 1 allocated), the marks grown up to limit (list_mark).
// Returns 0, or -1 on out of memory.
static int head_cols_find(const tile_index *t, int h, int32_t limit, cols_scratch *sc, head_cols *c) {
  int W = t->world;
  int64_t nq = t->n_qtiles;
  c->n = 0, c->last = -1, c->negative = c->beyond = 0;
  for (int s = 0; s < W; s++) {
    for (int64_t i = 0; i < nq; i++) {
      int64_t o = ((int64_t)h * nq + i) * (W + 1) + s;
      if (list_mark(sc, t->bar_idx + t->bar_cnt[o], t->bar_idx + t->bar_cnt[o + 1], limit, c)) return -1;
    }
    c->cnt[s] = c->n;
    if (marks_take(sc, c)) return -1;
  }
  c->cnt[W] = c->n;
  return 0;
}

// The first key of head h, in source, query tile and list order, that is negative or past top (the largest last key
// of any list: a list not ascending hides a larger key than its last), with *bad set; 0 when none.
static int head_bad_key(const tile_index *t, int h, int32_t top, int32_t *bad) {
  int W = t->world;
  for (int s = 0; s < W; s++)
    for (int64_t i = 0; i < t->n_qtiles; i++) {
      int64_t o = ((int64_t)h * t->n_qtiles + i) * (W + 1) + s;
      for (int64_t a = t->bar_cnt[o]; a < t->bar_cnt[o + 1]; a++)
        if (t->bar_idx[a] < 0 || t->bar_idx[a] > top) return *bad = t->bar_idx[a], 1;
    }
  return 0;
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

// The checks walk a cell's entries in key order instead of searching them for every column: the columns between two
// covered intervals (a tile entry's TILE keys; a run's keys up to the next run's first, as covered() reads it) are
// a slice of the source's columns, compared with the list at once. A source's columns are found by tile:
// first[j] is the first column at or after key j * TILE (j <= tiles; first[tiles] = n).
typedef struct {
  const int32_t *key;
  int64_t n, tiles;
  const int64_t *first;
} cols_by_tile;

// The index of the first column at or after key v.
static int64_t cols_at(const cols_by_tile *c, int64_t v) {
  if (v <= 0) return 0;
  int64_t j = v / TILE;
  if (j >= c->tiles) return c->n;
  int64_t x = c->first[j];
  while (x < c->first[j + 1] && c->key[x] < v) x++;
  return x;
}

// Whether the first n uncovered columns of c in the cell o (tile entries and runs) are list[0, n).
static int cell_exact(const tile_index *t, const cols_by_tile *c, int64_t o, const int32_t *list, int64_t n) {
  const int32_t *tile = t->tile_idx + t->tile_cnt[o], *tile_end = t->tile_idx + t->tile_cnt[o + 1];
  const int32_t *rk = t->run_cnt ? t->run_key + t->run_cnt[o] : NULL;
  const int32_t *rk_end = t->run_cnt ? t->run_key + t->run_cnt[o + 1] : NULL;
  const uint8_t *rl = t->run_cnt ? t->run_len + t->run_cnt[o] : NULL;
  int64_t x = 0, w = 0;  // the next column to look at, the next list entry to meet
  while (w < n) {
    // the next covered interval [lo, hi): the tile entry or the run that starts first
    int64_t lo = INT64_MAX, hi = INT64_MAX;
    if (tile < tile_end) lo = (int64_t)*tile * TILE, hi = lo + TILE;
    if (rk < rk_end && *rk < lo) {
      lo = *rk, hi = (int64_t)*rk + *rl;
      if (rk + 1 < rk_end && rk[1] < hi) hi = rk[1];  // keys from the next run's start on are its (covered(): the last)
      rk++, rl++;
    } else if (tile < tile_end) {
      tile++;
    }
    int64_t y = lo == INT64_MAX ? c->n : sr_max64(x, cols_at(c, lo)), m = sr_min64(y - x, n - w);
    if (m > 0 && memcmp(c->key + x, list + w, (size_t)m * sizeof *list)) return 0;
    w += m;
    if (lo == INT64_MAX) return w == n;  // no entries left: the columns ran out before the list did
    x = sr_max64(x, cols_at(c, hi));
  }
  return 1;
}

// Tiles enough for the columns key[0, n) (one past the largest key's).
static int64_t cols_tiles(const int32_t *key, int64_t n) {
  int64_t tiles = 0;
  for (int64_t x = 0; x < n; x++) tiles = sr_max64(tiles, key[x] / TILE + 1);
  return tiles;
}

// Whether every list of head h is the first uncovered columns of its source, the columns of source s being
// key[cnt[s], cnt[s + 1]); first (W x (tiles + 1), tiles past every column's) is scratch. Columns that do not
// ascend from key 0 give 0 (the columns' builder never makes them).
static int head_exact(const tile_index *t, int h, const int32_t *key, const int64_t *cnt, int64_t tiles, int64_t *first) {
  int W = t->world, ok = 1;
  for (int s = 0; ok && s < W; s++) {  // each source's columns by tile
    const int32_t *k = key + cnt[s];
    int64_t n = cnt[s + 1] - cnt[s], *f = first + s * (tiles + 1), x = 0;
    for (int64_t j = 0; j <= tiles; j++) {
      for (; x < n && k[x] < j * TILE; x++) ok &= x == 0 ? k[x] >= 0 : k[x] >= k[x - 1];
      f[j] = x;
    }
    ok &= x == n;
  }
  for (int64_t i = 0; ok && i < t->n_qtiles; i++) {
    int64_t c = ((int64_t)h * t->n_qtiles + i) * (W + 1);
    for (int s = 0; ok && s < W; s++) {
      cols_by_tile by = {key + cnt[s], cnt[s + 1] - cnt[s], tiles, first + s * (tiles + 1)};
      ok = cell_exact(t, &by, c + s, t->bar_idx + t->bar_cnt[c + s], t->bar_cnt[c + s + 1] - t->bar_cnt[c + s]);
    }
  }
  return ok;
}

int tiles_bars_compact_exact(const tile_index *t, const tile_bar_cols *cols) {
  int W = t->world;
  if (cols->heads != t->heads || cols->world != W) return 0;
  int64_t tiles = cols_tiles(cols->col_key, cols->n_cols);
  int64_t *first = malloc((size_t)(W * (tiles + 1)) * sizeof *first);
  int ok = first != NULL;
  for (int h = 0; ok && h < t->heads; h++) ok = head_exact(t, h, cols->col_key, cols->col_cnt + (int64_t)h * W, tiles, first);
  free(first);
  return ok;
}

// tiles_bar_cols_find's heads, one an sr_parallel_for item: each finds its columns, then (exact wanted) checks its
// lists against them while they are still in cache.
typedef struct {
  const tile_index *t;
  int32_t limit;          // the marks' limit (head_cols_find)
  const int *redo;        // the heads of the items, NULL: item h is head h
  cols_scratch *scratch;  // [threads]
  head_cols *cols;        // [heads]
  int *exact;             // [heads], NULL: not checked
} cols_job;

static int cols_item(void *ctx, int item, int thread, sr_error *e) {
  cols_job *j = ctx;
  int h = j->redo ? j->redo[item] : item, W = j->t->world;
  cols_scratch *sc = &j->scratch[thread];
  head_cols *c = &j->cols[h];
  if (head_cols_find(j->t, h, j->limit, sc, c)) return sr_internal_error(e, 0, "tiles: out of memory for the bars' columns");
  if (!j->exact || c->negative || c->beyond) return SR_OK;  // redone, or an invalid key reported
  int64_t tiles = 1;
  for (int s = 0; s < W; s++)
    if (c->cnt[s + 1] > c->cnt[s]) tiles = sr_max64(tiles, c->key[c->cnt[s + 1] - 1] / TILE + 1);
  if (sc->first_cap < W * (tiles + 1)) {
    free(sc->first);
    sc->first_cap = W * (tiles + 1);
    if (!(sc->first = malloc((size_t)sc->first_cap * sizeof *sc->first)))
      return sc->first_cap = 0, sr_internal_error(e, 0, "tiles: out of memory for the bars' columns");
  }
  j->exact[h] = head_exact(j->t, h, c->key, c->cnt, tiles, sc->first);
  return SR_OK;
}

// The heads' columns into out, in head order.
static int cols_gather(const tile_index *t, const head_cols *hc, tile_bar_cols *out) {
  int W = t->world;
  int64_t n = 0;
  for (int h = 0; h < t->heads; h++) n += hc[h].n;
  out->heads = t->heads, out->world = W, out->n_cols = n;
  out->col_cnt = malloc(((size_t)t->heads * W + 1) * sizeof *out->col_cnt);
  out->col_key = malloc((size_t)n * sizeof *out->col_key + 1);
  if (!out->col_cnt || !out->col_key) return -1;
  n = 0;
  for (int h = 0; h < t->heads; h++) {
    for (int s = 0; s < W; s++) out->col_cnt[(int64_t)h * W + s] = n + hc[h].cnt[s];
    if (hc[h].n) memcpy(out->col_key + n, hc[h].key, (size_t)hc[h].n * sizeof *out->col_key);
    n += hc[h].n;
  }
  out->col_cnt[(int64_t)t->heads * W] = n;
  return 0;
}

// The first invalid key, as a serial scan meets it: a negative one, or one past the largest last key of any list.
static int cols_valid(const tile_index *t, const head_cols *hc, sr_error *e) {
  int W = t->world;
  int32_t top = -1, bad = 0;
  for (int h = 0; h < t->heads; h++) top = hc[h].last > top ? hc[h].last : top;
  for (int h = 0; h < t->heads; h++) {
    int past = hc[h].negative || hc[h].beyond;  // or a column (the largest of a source: its last) past top
    for (int s = 0; s < W && !past; s++) past = hc[h].cnt[s + 1] > hc[h].cnt[s] && hc[h].key[hc[h].cnt[s + 1] - 1] > top;
    if (past && head_bad_key(t, h, top, &bad))
      return sr_input_error(e, NULL, "bar_idx", "key %d negative or not ascending", bad);
  }
  return SR_OK;
}

// Heads with a list not ascending and a key in it past its last: found again with the marks grown up to the largest
// last key of any list (a key past that is invalid: cols_valid names it).
static int cols_redo(cols_job *j, int threads, sr_error *e) {
  int H = j->t->heads, n = 0, *redo = malloc((size_t)H * sizeof *redo + 1);
  if (!redo) return sr_internal_error(e, 0, "tiles: out of memory for the bars' columns");
  for (int h = 0; h < H; h++) {
    j->limit = j->cols[h].last > j->limit ? j->cols[h].last : j->limit;
    if (j->cols[h].beyond) redo[n++] = h;
  }
  j->redo = redo;
  int rc = sr_parallel_for(n, threads, cols_item, j, e);
  j->redo = NULL;
  free(redo);
  return rc;
}

int tiles_bar_cols_find(const tile_index *t, int threads, tile_bar_cols *out, int *exact, sr_error *e) {
  memset(out, 0, sizeof *out);
  int W = t->world, H = t->heads;
  threads = (int)sr_max64(1, sr_min64(threads, H));
  cols_job j = {.t = t, .limit = -1};
  j.scratch = calloc((size_t)threads, sizeof *j.scratch);
  j.cols = calloc((size_t)H + 1, sizeof *j.cols);
  j.exact = exact ? calloc((size_t)H + 1, sizeof *j.exact) : NULL;
  int64_t *cnt = calloc((size_t)H * (W + 1) + 1, sizeof *cnt);
  int rc = !j.scratch || !j.cols || (exact && !j.exact) || !cnt ? -1 : 0;
  for (int x = 0; !rc && x < threads; x++)
    if (!(j.scratch[x].mark = calloc(4096, 1))) rc = -1;
    else j.scratch[x].span = 4096;
  if (rc) rc = sr_internal_error(e, 0, "tiles: out of memory for the bars' columns");
  for (int h = 0; !rc && h < H; h++) j.cols[h].cnt = cnt + (int64_t)h * (W + 1);
  if (!rc) rc = sr_parallel_for(H, threads, cols_item, &j, e);
  if (!rc) rc = cols_redo(&j, threads, e);
  if (!rc) rc = cols_valid(t, j.cols, e);
  if (!rc && cols_gather(t, j.cols, out)) rc = sr_internal_error(e, 0, "tiles: out of memory for the bars' columns");
  if (!rc && exact) {
    *exact = 1;
    for (int h = 0; h < H; h++) *exact &= j.exact[h];
  }
  if (rc) tiles_bar_cols_free(out);
  for (int x = 0; j.scratch && x < threads; x++) free(j.scratch[x].mark), free(j.scratch[x].first);
  for (int h = 0; j.cols && h < H; h++) free(j.cols[h].key);
  free(j.scratch), free(j.cols), free(j.exact), free(cnt);
  return rc;
}

int tiles_bar_cols_build(const tile_index *t, tile_bar_cols *out, sr_error *e) {
  return tiles_bar_cols_find(t, 1, out, NULL, e);
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
