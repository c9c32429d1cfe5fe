// tiles_scan.c — the exact classification of one query tile against every KV tile of every source rank:
// which KV tiles are entries (FULL or PARTIAL), which columns are bars, and how many kept pairs each holds.
//
// Local tiles may straddle runs of the layout (zigzag chunk ends, striped G < TILE), so a tile is a list
// of global segments and every test below runs per pair of segments, in closed form or by binary search:
// the q - k values of two segments form one interval [dmin, dmax], so "some kept offset" is one interval
// query on D and "every element kept" is a walk over D's gaps in that interval.
#include <stdlib.h>
#include <string.h>

#include "plan/tiles_internal.h"

#define D_INF ((int64_t)1 << 62)

// ---------------------------------------------------------------------------------------------
// scanner state

int tile_scan_init(tile_scan *s, const layout *l, sr_error *e) {
  memset(s, 0, sizeof *s);
  int rc = layout_tiles_init(l, &s->lt, e);
  if (rc) return rc;
  int64_t all = s->lt.tile_base[l->world];
  s->stamp = calloc((size_t)all + 1, sizeof *s->stamp);
  s->slot = calloc((size_t)all + 1, sizeof *s->slot);
  s->vk_begin = calloc((size_t)l->world + 1, sizeof *s->vk_begin);
  s->vt_first = calloc((size_t)all + 2, sizeof *s->vt_first);
  s->bar_n = calloc((size_t)l->world + 1, sizeof *s->bar_n);
  s->bar_rows = calloc((size_t)l->world + 1, sizeof *s->bar_rows);
  if (!s->stamp || !s->slot || !s->vk_begin || !s->vt_first || !s->bar_n || !s->bar_rows) {
    tile_scan_free(s);
    return sr_internal_error(e, 0, "tiles: out of memory for %lld tiles", (long long)all);
  }
  s->monotone = 1;
  for (int r = 0; r < l->world; r++)
    for (int64_t x = l->rank_run_begin[r] + 1; x < l->rank_run_begin[r + 1]; x++)
      if (l->runs[x].global < l->runs[x - 1].global) s->monotone = 0;
  return SR_OK;
}

void tile_scan_free(tile_scan *s) {
  layout_tiles_free(&s->lt);
  free(s->stamp);
  free(s->slot);
  free(s->tiles);
  free(s->bars);
  free(s->vk_begin);
  free(s->vk_local);
  free(s->vk_global);
  free(s->vt_first);
  free(s->bar_n);
  free(s->bar_rows);
  free(s->grp_bits);
  free(s->grp_buf);
  free(s->spans);
  memset(s, 0, sizeof *s);
}

// ---------------------------------------------------------------------------------------------
// a head's columns per source rank, so bars come out in (source, key) order without a search or a sort

typedef struct {
  int32_t local;
  int64_t global;
} col_key;

static int cmp_col_key(const void *a, const void *b) {
  int32_t x = ((const col_key *)a)->local, y = ((const col_key *)b)->local;
  return (x > y) - (x < y);
}

int tile_scan_head(tile_scan *s, const head_view *v, sr_error *e) {
  const layout *l = s->lt.l;
  int W = l->world;
  s->hv = v;
  memset(s->vk_begin, 0, ((size_t)W + 1) * sizeof *s->vk_begin);
  int64_t nk = v->k.n ? v->k.cum[v->k.n] : 0;
  if (nk > s->vk_cap) {
    int32_t *lo = realloc(s->vk_local, (size_t)nk * sizeof *lo);
    if (lo) s->vk_local = lo;
    int64_t *gl = realloc(s->vk_global, (size_t)nk * sizeof *gl);
    if (gl) s->vk_global = gl;
    if (!lo || !gl) return sr_internal_error(e, 0, "tiles: out of memory for %lld columns", (long long)nk);
    s->vk_cap = nk;
  }
  // Two walks of K against the runs in global order: count per rank, then place.
  for (int pass = 0; pass < 2; pass++) {
    int64_t *fill = s->vk_begin;
    for (int64_t y = 0, p = 0; y < v->k.n; y++)
      for (int64_t k = v->k.lo[y]; k <= v->k.hi[y];) {
        while (p < l->n_runs && l->runs[l->by_global[p]].global + l->runs[l->by_global[p]].len <= k) p++;
        if (p == l->n_runs || l->runs[l->by_global[p]].global > k)
          return sr_internal_error(e, 0, "tiles: key %lld outside the layout", (long long)k);
        const layout_run *run = &l->runs[l->by_global[p]];
        int64_t end = sr_min64(v->k.hi[y], run->global + run->len - 1);
        if (pass == 0) {
          fill[run->rank + 1] += end - k + 1;
        } else {
          for (int64_t x = k; x <= end; x++) {
            int64_t at = fill[run->rank]++;
            s->vk_local[at] = (int32_t)(run->local + x - run->global);
            s->vk_global[at] = x;
          }
        }
        k = end + 1;
      }
    if (pass == 0)
      for (int r = 0; r < W; r++) s->vk_begin[r + 1] += s->vk_begin[r];
    else  // fill[r] advanced to the end of rank r's columns, which is the begin of rank r + 1
      for (int r = W; r > 0; r--) s->vk_begin[r] = s->vk_begin[r - 1];
    if (pass == 1) s->vk_begin[0] = 0;
  }
  if (!s->monotone) {  // a permutation's local order is not the global one: sort each rank's columns
    col_key *tmp = NULL;
    for (int r = 0; r < W; r++) {
      int64_t a = s->vk_begin[r], n = s->vk_begin[r + 1] - a;
      if (n < 2) continue;
      col_key *t2 = realloc(tmp, (size_t)n * sizeof *t2);
      if (!t2) {
        free(tmp);
        return sr_internal_error(e, 0, "tiles: out of memory for %lld columns", (long long)n);
      }
      tmp = t2;
      for (int64_t x = 0; x < n; x++) tmp[x] = (col_key){s->vk_local[a + x], s->vk_global[a + x]};
      qsort(tmp, (size_t)n, sizeof *tmp, cmp_col_key);
      for (int64_t x = 0; x < n; x++) s->vk_local[a + x] = tmp[x].local, s->vk_global[a + x] = tmp[x].global;
    }
    free(tmp);
    return SR_OK;
  }
  // Monotone: each KV tile's columns are consecutive in its source's list.
  int64_t all = s->lt.tile_base[W];
  memset(s->vt_first, 0, ((size_t)all + 1) * sizeof *s->vt_first);
  for (int r = 0; r < W; r++)
    for (int64_t x = s->vk_begin[r]; x < s->vk_begin[r + 1]; x++) s->vt_first[s->lt.tile_base[r] + s->vk_local[x] / TILE + 1]++;
  for (int64_t f = 0; f < all; f++) s->vt_first[f + 1] += s->vt_first[f];
  return SR_OK;
}

static int push_tile(tile_scan *s, int32_t src, int32_t j) {
  if (s->n_tiles == s->cap_tiles) {
    int64_t cap = s->cap_tiles ? 2 * s->cap_tiles : 256;
    scan_tile *t = realloc(s->tiles, (size_t)cap * sizeof *t);
    if (!t) return -1;
    s->tiles = t;
    s->cap_tiles = cap;
  }
  s->tiles[s->n_tiles++] = (scan_tile){.src = src, .j = j, .kind = TILE_PARTIAL, .pairs = 0};
  return 0;
}

int tile_scan_push_bar(tile_scan *s, int32_t src, int32_t key, int64_t rows) {
  if (s->n_bars == s->cap_bars) {
    int64_t cap = s->cap_bars ? 2 * s->cap_bars : 256;
    scan_bar *b = realloc(s->bars, (size_t)cap * sizeof *b);
    if (!b) return -1;
    s->bars = b;
    s->cap_bars = cap;
  }
  s->bars[s->n_bars++] = (scan_bar){.src = src, .key = key, .rows = rows};
  return 0;
}

// ---------------------------------------------------------------------------------------------
// candidates: KV tiles holding some key of a global key range

// First by_global position whose run ends after t.
static int64_t by_global_at(const layout *l, int64_t t) {
  int64_t lo = 0, hi = l->n_runs;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    const layout_run *run = &l->runs[l->by_global[mid]];
    if (run->global + run->len <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

int tile_scan_mark_keys(tile_scan *s, int64_t ka, int64_t kb) {
  const layout *l = s->lt.l;
  if (ka < 0) ka = 0;
  if (kb > l->n_tokens - 1) kb = l->n_tokens - 1;
  for (int64_t p = by_global_at(l, ka); p < l->n_runs && ka <= kb; p++) {
    const layout_run *run = &l->runs[l->by_global[p]];
    if (run->global > kb) break;
    int64_t x0 = sr_max64(ka, run->global), x1 = sr_min64(kb, run->global + run->len - 1);
    int64_t j0 = (run->local + x0 - run->global) / TILE, j1 = (run->local + x1 - run->global) / TILE;
    for (int64_t j = j0; j <= j1; j++) {
      int64_t flat = s->lt.tile_base[run->rank] + j;
      if (s->stamp[flat] == s->scan_no) continue;
      s->stamp[flat] = s->scan_no;
      s->slot[flat] = s->n_tiles;
      if (push_tile(s, run->rank, (int32_t)j)) return -1;
    }
  }
  return 0;
}

static int mark_candidates(tile_scan *s, const head_view *v) {
  for (int a = 0; a < s->n_qs; a++) {
    int64_t qa = s->qs[a].g, qe = qa + s->qs[a].len - 1;
    if (!v->is_block) {
      // offsets of one group [d0, d1] reach keys [qa - d1, qe - d0]; groups only over-approximate
      for (int64_t g = 0; g < v->dg.n && v->dg.lo[g] <= qe; g++)
        if (tile_scan_mark_keys(s, qa - v->dg.hi[g], qe - v->dg.lo[g])) return -1;
      continue;
    }
    if (v->is_moba) return gated_mark_moba(s);
    const head_pattern *h = v->h;
    for (int64_t p = qa / h->block; p <= qe / h->block; p++) {
      int64_t qhi = sr_min64(qe, (p + 1) * h->block - 1);
      const uint64_t *row = h->mask + p * h->row_words;
      for (int64_t w = 0; w < h->row_words && w * 64 * h->block <= qhi; w++) {
        for (uint64_t bits = row[w]; bits; bits &= bits - 1) {
          int64_t c = w * 64 + __builtin_ctzll(bits);
          if (c * h->block > qhi) break;
          if (tile_scan_mark_keys(s, c * h->block, sr_min64((c + 1) * h->block - 1, qhi))) return -1;
        }
      }
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// classification of one (query tile, KV tile) pair

// Does row block p keep column block c (BLOCK: the mask bit; MOBA: the group's own block or a selected one)?
static int block_kept(const tile_scan *s, const head_view *v, int64_t p, int64_t c) {
  const head_pattern *h = v->h;
  if (v->is_moba) return gated_moba_kept(s, p, c);
  return (int)((h->mask[p * h->row_words + c / 64] >> (c % 64)) & 1u);
}

// Block heads: entry iff some kept block holds a causal element; FULL iff all blocks kept and all causal.
static int classify_block(const tile_scan *s, const head_view *v, const tile_seg *qs, int nq, const tile_seg *ks,
                          int nk, int64_t *pairs) {
  int64_t Rb = v->row_block, Cb = v->col_block, kept = 0;
  int any = 0, full = 1;
  for (int a = 0; a < nq; a++)
    for (int b = 0; b < nk; b++) {
      int64_t qa = qs[a].g, qe = qa + qs[a].len - 1, ka = ks[b].g, ke = ka + ks[b].len - 1;
      if (qa < ke) full = 0;
      if (qe < ka) continue;
      for (int64_t p = qa / Rb; p <= qe / Rb; p++) {
        int64_t q0 = sr_max64(qa, p * Rb), q1 = sr_min64(qe, p * Rb + Rb - 1);
        for (int64_t c = ka / Cb; c <= ke / Cb && c * Cb <= q1; c++) {
          int64_t k0 = sr_max64(ka, c * Cb), k1 = sr_min64(ke, c * Cb + Cb - 1);
          if (!block_kept(s, v, p, c)) {
            full = 0;
            continue;
          }
          int64_t n = pairs_in_d_range(q0, q1 - q0 + 1, k0, k1 - k0 + 1, 0, D_INF);
          if (n > 0) any = 1;
          kept += n;
        }
      }
    }
  *pairs = kept;
  if (!any) return 0;
  return full ? 2 : 1;
}

// Kept pairs of one segment pair: the Toeplitz part plus the columns of K not already counted there.
static int64_t segment_pairs(const head_view *v, int64_t qa, int64_t lq, int64_t ka, int64_t lk) {
  int64_t qe = qa + lq - 1, ke = ka + lk - 1, lo = sr_max64(0, qa - ke), hi = qe - ka, n = 0;
  for (int64_t x = iset_first_ge(&v->d, lo); x < v->d.n && v->d.lo[x] <= hi; x++)
    n += pairs_in_d_range(qa, lq, ka, lk, v->d.lo[x], v->d.hi[x]);
  for (int64_t y = iset_first_ge(&v->k, ka); y < v->k.n && v->k.lo[y] <= ke; y++) {
    int64_t k0 = sr_max64(ka, v->k.lo[y]), k1 = sr_min64(ke, v->k.hi[y]), lkp = k1 - k0 + 1;
    n += pairs_in_d_range(qa, lq, k0, lkp, 0, D_INF);
    int64_t dlo = sr_max64(0, qa - k1), dhi = qe - k0;
    for (int64_t x = iset_first_ge(&v->d, dlo); x < v->d.n && v->d.lo[x] <= dhi; x++)
      n -= pairs_in_d_range(qa, lq, k0, lkp, v->d.lo[x], v->d.hi[x]);
  }
  return n;
}

// Is every element of the segment pair kept (and causal)? Offsets missing from D need their keys in K.
static int segment_full(const head_view *v, int64_t qa, int64_t lq, int64_t ka, int64_t lk) {
  int64_t qe = qa + lq - 1, ke = ka + lk - 1, dmin = qa - ke, dmax = qe - ka;
  if (dmin < 0) return 0;
  int64_t x = dmin, idx = iset_first_ge(&v->d, x);
  while (x <= dmax) {
    if (idx < v->d.n && v->d.lo[idx] <= x) {
      x = v->d.hi[idx] + 1;
      idx++;
      continue;
    }
    int64_t g1 = idx < v->d.n ? sr_min64(dmax, v->d.lo[idx] - 1) : dmax;
    // keys met by offsets [x, g1]: k = q - d over the segment pair, one interval
    int64_t k0 = sr_max64(ka, qa - g1), k1 = sr_min64(ke, qe - x);
    if (k0 <= k1 && iset_count(&v->k, k0, k1) < k1 - k0 + 1) return 0;
    x = g1 + 1;
  }
  return 1;
}

// 0: not an entry, 1: PARTIAL, 2: FULL; *pairs gets the kept elements when want_pairs.
static int classify(const tile_scan *s, const head_view *v, const tile_seg *qs, int nq, const tile_seg *ks, int nk,
                    int want_pairs, int64_t *pairs) {
  *pairs = 0;
  if (v->is_block) return classify_block(s, v, qs, nq, ks, nk, pairs);
  int any = 0, full = 1;
  for (int a = 0; a < nq; a++)
    for (int b = 0; b < nk; b++) {
      int64_t qa = qs[a].g, lq = qs[a].len, ka = ks[b].g, lk = ks[b].len;
      int64_t dmin = qa - (ka + lk - 1), dmax = qa + lq - 1 - ka;
      if (!any && dmax >= 0 && iset_any(&v->d, sr_max64(0, dmin), dmax)) any = 1;
      if (full && !segment_full(v, qa, lq, ka, lk)) full = 0;
      if (want_pairs && dmax >= 0) *pairs += segment_pairs(v, qa, lq, ka, lk);
    }
  if (!any) return 0;
  return full ? 2 : 1;
}

// ---------------------------------------------------------------------------------------------
// one query tile

static int cmp_tile(const void *a, const void *b) {
  const scan_tile *x = a, *y = b;
  if (x->src != y->src) return x->src < y->src ? -1 : 1;
  return (x->j > y->j) - (x->j < y->j);
}


// First index in [a, b) of the sorted vk_global with value > x (strict: after x) or >= x.
static int64_t col_bound(const int64_t *g, int64_t a, int64_t b, int64_t x, int strict) {
  while (a < b) {
    int64_t m = a + (b - a) / 2;
    if (strict ? g[m] <= x : g[m] < x) a = m + 1;
    else b = m;
  }
  return a;
}

// Rows q >= k of the query tile (its segments).
static int64_t rows_from(const tile_scan *s, int64_t k) {
  int64_t rows = 0;
  for (int a = 0; a < s->n_qs; a++) rows += sr_max64(0, s->qs[a].g + s->qs[a].len - sr_max64(s->qs[a].g, k));
  return rows;
}

// Accounting on a monotone layout: per source, the columns up to qmax are a prefix of its list; those
// before qmin are kept on every row (qsize pairs each), so only entry tiles' columns are subtracted and
// the few columns inside [qmin, qmax] are visited one by one. Same sums as listing the bars.
static void count_bars(tile_scan *s, int64_t qmin, int64_t qmax, int64_t qsize) {
  int64_t t = 0;
  for (int src = 0; src < s->lt.world; src++) {
    int64_t b = s->vk_begin[src], e = s->vk_begin[src + 1];
    int64_t p = col_bound(s->vk_global, b, e, qmax, 1), p0 = col_bound(s->vk_global, b, p, qmin, 0);
    int64_t below = p0 - b, n = 0, rows = 0;
    for (; t < s->n_tiles && s->tiles[t].src == src; t++) {
      int64_t flat = s->lt.tile_base[src] + s->tiles[t].j;
      below -= sr_max64(0, sr_min64(s->vt_first[flat + 1], p0) - s->vt_first[flat]);
    }
    for (int64_t x = p0; x < p; x++) {
      int64_t flat = s->lt.tile_base[src] + s->vk_local[x] / TILE;
      if (s->stamp[flat] == s->scan_no && s->slot[flat] >= 0) continue;
      n++;
      rows += rows_from(s, s->vk_global[x]);
    }
    s->bar_n[src] = below + n;
    s->bar_rows[src] = below * qsize + rows;
  }
}

int tile_scan_qtile(tile_scan *s, const head_view *v, int q_rank, int64_t i, int want_pairs, sr_error *e) {
  if (v != s->hv) return sr_internal_error(e, 0, "tiles: query tile scanned before tile_scan_head prepared its head");
  s->n_tiles = s->n_bars = 0;
  s->scan_no++;
  s->n_qs = tile_segments(&s->lt, q_rank, i, s->qs);
  int64_t qmax = -1;
  for (int a = 0; a < s->n_qs; a++) qmax = sr_max64(qmax, s->qs[a].g + s->qs[a].len - 1);
  if ((v->is_moba || v->is_tokens) && gated_tile_prepare(s, v, e)) return e->code;
  if (mark_candidates(s, v)) return sr_internal_error(e, 0, "tiles: out of memory");

  // Keep the candidates that really are entries; slot -1 marks a rejected one for the bar pass.
  int64_t kept = 0;
  for (int64_t c = 0; c < s->n_tiles; c++) {
    scan_tile t = s->tiles[c];
    int nk = tile_segments(&s->lt, t.src, t.j, s->ks);
    int64_t pairs = 0;
    int kind = classify(s, v, s->qs, s->n_qs, s->ks, nk, want_pairs, &pairs);
    int64_t flat = s->lt.tile_base[t.src] + t.j;
    if (!kind) {
      s->slot[flat] = -1;
      continue;
    }
    t.kind = kind == 2 ? TILE_FULL : TILE_PARTIAL;
    t.pairs = pairs;
    s->slot[flat] = kept;
    s->tiles[kept++] = t;
  }
  s->n_tiles = kept;
  if (s->n_tiles > 1) qsort(s->tiles, (size_t)s->n_tiles, sizeof *s->tiles, cmp_tile);

  // Bars: columns of K kept for some row (k <= qmax) whose KV tile is not an entry of this query tile,
  // taken per source rank in local order (the order of the index).
  int64_t qsize = 0, qmin = s->n_qs ? s->qs[0].g : 0;
  for (int a = 0; a < s->n_qs; a++) qsize += s->qs[a].len, qmin = sr_min64(qmin, s->qs[a].g);
  if (v->is_tokens) {  // no columns of K: the bars are the groups' keys, masked per row
    s->bars_counted = 0;
    return gated_tokens_bars(s, v, want_pairs, e);
  }
  s->bars_counted = want_pairs && s->monotone;
  if (s->bars_counted) {
    count_bars(s, qmin, qmax, qsize);
    return SR_OK;
  }
  for (int src = 0; src < s->lt.world; src++)
    for (int64_t x = s->vk_begin[src]; x < s->vk_begin[src + 1]; x++) {
      int64_t k = s->vk_global[x];
      if (k > qmax) {
        if (s->monotone) break;
        continue;
      }
      int64_t flat = s->lt.tile_base[src] + s->vk_local[x] / TILE;
      if (s->stamp[flat] == s->scan_no && s->slot[flat] >= 0) continue;
      int64_t rows = qsize;
      if (k > qmin) {
        rows = 0;
        for (int a = 0; a < s->n_qs; a++) rows += sr_max64(0, s->qs[a].g + s->qs[a].len - sr_max64(s->qs[a].g, k));
      }
      if (tile_scan_push_bar(s, src, s->vk_local[x], rows)) return sr_internal_error(e, 0, "tiles: out of memory");
    }
  return SR_OK;
}
