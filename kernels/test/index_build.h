// index_build.h — execution forms for the GPU test and the benchmark, built here without the planner:
// a brute-force builder (any pattern, small sizes), closed-form builders for dense causal and the
// VS-like mask of ANCHORS.md (large sizes), and the transposed form for the backward. Host C only.
#ifndef SR_INDEX_BUILD_H
#define SR_INDEX_BUILD_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sa_mask.h"
#include "plan/pattern.h"
#include "plan/tile_index.h"

static inline uint64_t ib_rng_next(uint64_t *s) {  // splitmix64
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static inline double ib_uniform(uint64_t *s) { return (double)(ib_rng_next(s) >> 11) / 9007199254740992.0; }

typedef struct {
  int64_t *a;
  int64_t n, cap;
} ib_vec;
static inline void ib_push(ib_vec *v, int64_t x) {
  if (v->n == v->cap) v->cap = v->cap ? 2 * v->cap : 256, v->a = (int64_t *)realloc(v->a, sizeof(int64_t) * (size_t)v->cap);
  v->a[v->n++] = x;
}

static inline void ib_alloc(tile_index *t, int heads, int world, int q_rank, int64_t n_q) {
  memset(t, 0, sizeof *t);
  t->heads = heads, t->world = world, t->q_rank = q_rank, t->n_qtiles = (int32_t)((n_q + TILE - 1) / TILE);
  size_t cells = (size_t)heads * t->n_qtiles * (world + 1);
  t->tile_cnt = (int64_t *)calloc(cells, 8), t->bar_cnt = (int64_t *)calloc(cells, 8);
}

// Entries are pushed as j*2+kind (tiles) and key (bars); this turns them into the index's arrays.
static inline void ib_finish(tile_index *t, ib_vec *tl, ib_vec *bl) {
  t->n_tiles = tl->n, t->n_bars = bl->n;
  t->tile_idx = (int32_t *)malloc(sizeof(int32_t) * (size_t)(tl->n + 1));
  t->tile_kind = (uint8_t *)malloc((size_t)(tl->n + 1));
  t->bar_idx = (int32_t *)malloc(sizeof(int32_t) * (size_t)(bl->n + 1));
  for (int64_t x = 0; x < tl->n; x++) t->tile_idx[x] = (int32_t)(tl->a[x] / 2), t->tile_kind[x] = (uint8_t)(tl->a[x] % 2);
  for (int64_t x = 0; x < bl->n; x++) t->bar_idx[x] = (int32_t)bl->a[x];
  free(tl->a), free(bl->a);
}

static inline void ib_free(tile_index *t) {
  free(t->tile_cnt), free(t->bar_cnt), free(t->tile_idx), free(t->tile_kind), free(t->bar_idx);
  memset(t, 0, sizeof *t);
}

// ---- brute force ---------------------------------------------------------------------------------

// Every (head, query tile, source, KV tile) cell with a kept element becomes a tile entry (FULL when
// all its elements are kept), or, with bars != 0, bars when all kept elements lie in columns kept for
// every causal row of the tile.
static inline void ib_bruteforce(tile_index *t, int H, int W, int qr, int64_t n_q, const int64_t *qpos, const int64_t *n_k,
                          int64_t *const *kpos, const head_mask *masks, int bars) {
  ib_alloc(t, H, W, qr, n_q);
  ib_vec tl = {0}, bl = {0};
  for (int h = 0; h < H; h++)
    for (int i = 0; i < t->n_qtiles; i++) {
      int64_t r0 = (int64_t)i * TILE, r1 = r0 + TILE < n_q ? r0 + TILE : n_q;
      int64_t cell = ((int64_t)h * t->n_qtiles + i) * (W + 1);
      for (int s = 0; s < W; s++) {
        t->tile_cnt[cell + s] = tl.n, t->bar_cnt[cell + s] = bl.n;
        for (int64_t j = 0; j * TILE < n_k[s]; j++) {
          int64_t k0 = j * TILE, k1 = k0 + TILE < n_k[s] ? k0 + TILE : n_k[s], kept = 0, barable = 0, total = 0;
          if (kpos[s][k0] > qpos[r1 - 1] && kpos[s][k1 - 1] > qpos[r1 - 1]) continue;  // quick causal skip
          for (int64_t k = k0; k < k1; k++) {
            int64_t ck = 0, cc = 0;
            for (int64_t r = r0; r < r1; r++) cc += kpos[s][k] <= qpos[r], ck += sa_mask_keeps(&masks[h], qpos[r], kpos[s][k]);
            kept += ck, total += r1 - r0;
            if (ck > 0 && ck == cc) barable += ck;
          }
          if (kept == 0) continue;
          if (bars && barable == kept && kept < total) {
            for (int64_t k = k0; k < k1; k++) {
              int any = 0;
              for (int64_t r = r0; r < r1 && !any; r++) any = sa_mask_keeps(&masks[h], qpos[r], kpos[s][k]);
              if (any) ib_push(&bl, k);
            }
          } else {
            ib_push(&tl, j * 2 + (kept == total ? TILE_FULL : TILE_PARTIAL));
          }
        }
        t->tile_cnt[cell + s + 1] = tl.n, t->bar_cnt[cell + s + 1] = bl.n;
      }
    }
  ib_finish(t, &tl, &bl);
}

// ---- closed forms (one rank, positions = local indices) --------------------------------------------

// Dense causal: tiles below the diagonal FULL, the diagonal PARTIAL (masks NULL = causal).
static inline void ib_dense_causal(tile_index *t, int H, int64_t n) {
  ib_alloc(t, H, 1, 0, n);
  ib_vec tl = {0}, bl = {0};
  for (int h = 0; h < H; h++)
    for (int i = 0; i < t->n_qtiles; i++) {
      int64_t cell = ((int64_t)h * t->n_qtiles + i) * 2;
      t->tile_cnt[cell] = tl.n, t->bar_cnt[cell] = bl.n;
      for (int j = 0; j <= i; j++) ib_push(&tl, j * 2 + (j < i ? TILE_FULL : TILE_PARTIAL));
      t->tile_cnt[cell + 1] = tl.n, t->bar_cnt[cell + 1] = bl.n;
    }
  ib_finish(t, &tl, &bl);
}

static inline int ib_cmp64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

// The VS-like mask of ANCHORS.md per head: sinks + local window + nvert vertical columns at
// floor(n u^3), u uniform (seed + head). Masks are VS kind (verticals = sinks and columns, slashes =
// offsets 0..window-1), so PARTIAL tiles use the same predicate as the reference. Tiles: the sink
// tile, the window's tiles (FULL where every row sees the whole tile), and the verticals outside
// them as bars. Writes masks[H] (bit arrays malloc'd).
static inline void ib_vs_like(tile_index *t, head_mask *masks, int H, int64_t n, int64_t sinks, int64_t window, int nvert,
                       uint64_t seed) {
  ib_alloc(t, H, 1, 0, n);
  ib_vec tl = {0}, bl = {0};
  int64_t words = n / 32 + 1;
  int64_t *vert = (int64_t *)malloc(sizeof(int64_t) * (size_t)(nvert + 1));
  unsigned char *in_tile = (unsigned char *)calloc((size_t)t->n_qtiles + 1, 1);
  for (int h = 0; h < H; h++) {
    uint64_t st = seed + (uint64_t)h * 0x100000001ull;
    int nv = 0;
    while (nv < nvert && nv < n) {  // draw until nvert distinct columns
      double u = ib_uniform(&st);
      int64_t v = (int64_t)(n * u * u * u), dup = 0;
      for (int x = 0; x < nv && !dup; x++) dup = vert[x] == v;
      if (!dup) vert[nv++] = v;
    }
    qsort(vert, (size_t)nv, sizeof *vert, ib_cmp64);
    uint32_t *vb = (uint32_t *)calloc((size_t)words, 4), *sb = (uint32_t *)calloc((size_t)words, 4);
    for (int64_t k = 0; k < sinks && k < n; k++) vb[k >> 5] |= 1u << (k & 31);
    for (int x = 0; x < nv; x++) vb[vert[x] >> 5] |= 1u << (vert[x] & 31);
    for (int64_t d = 0; d < window && d < n; d++) sb[d >> 5] |= 1u << (d & 31);
    memset(&masks[h], 0, sizeof masks[h]);
    masks[h].kind = PATTERN_VS, masks[h].n_tokens = n, masks[h].vbits = vb, masks[h].sbits = sb;
    for (int i = 0; i < t->n_qtiles; i++) {
      int64_t cell = ((int64_t)h * t->n_qtiles + i) * 2, r0 = (int64_t)i * TILE;
      int64_t r1 = (r0 + TILE < n ? r0 + TILE : n) - 1;  // last row of the tile
      t->tile_cnt[cell] = tl.n, t->bar_cnt[cell] = bl.n;
      memset(in_tile, 0, (size_t)t->n_qtiles);
      for (int j = 0; j <= i; j++) {
        int64_t k0 = (int64_t)j * TILE, k1 = (k0 + TILE < n ? k0 + TILE : n) - 1;
        int sink_full = k1 < sinks, win_full = r1 - k0 < window, touched = k0 < sinks || r0 - k1 < window;
        if (!touched) continue;
        in_tile[j] = 1;
        ib_push(&tl, j * 2 + ((sink_full || win_full) && j < i && k1 - k0 == TILE - 1 ? TILE_FULL : TILE_PARTIAL));
      }
      for (int x = 0; x < nv; x++)
        if (vert[x] <= r1 && !in_tile[vert[x] / TILE]) ib_push(&bl, vert[x]);
      t->tile_cnt[cell + 1] = tl.n, t->bar_cnt[cell + 1] = bl.n;
    }
  }
  free(vert), free(in_tile);
  ib_finish(t, &tl, &bl);
}

// ---- transposed form ---------------------------------------------------------------------------------

typedef struct {
  int64_t key_q;  // key * 2^31 + query tile
  int32_t head;
} ib_bar_pair;

static inline int ib_cmp_bar(const void *a, const void *b) {
  const ib_bar_pair *x = (const ib_bar_pair *)a, *y = (const ib_bar_pair *)b;
  if (x->head != y->head) return x->head - y->head;
  return (x->key_q > y->key_q) - (x->key_q < y->key_q);
}

static inline void ib_transpose(const tile_index *t, int src, int64_t n_k, tile_index_t *o) {
  memset(o, 0, sizeof *o);
  o->heads = t->heads, o->n_qtiles = t->n_qtiles, o->n_kvtiles = (int32_t)((n_k + TILE - 1) / TILE);
  int64_t nkv = (int64_t)o->heads * o->n_kvtiles;
  o->kv_cnt = (int64_t *)calloc((size_t)nkv + 1, 8);
  for (int h = 0; h < t->heads; h++)
    for (int i = 0; i < t->n_qtiles; i++) {
      const int64_t *c = t->tile_cnt + ((int64_t)h * t->n_qtiles + i) * (t->world + 1);
      for (int64_t x = c[src]; x < c[src + 1]; x++) o->kv_cnt[(int64_t)h * o->n_kvtiles + t->tile_idx[x] + 1]++;
    }
  for (int64_t x = 0; x < nkv; x++) o->kv_cnt[x + 1] += o->kv_cnt[x];
  int64_t *fillp = (int64_t *)malloc(sizeof(int64_t) * (size_t)(nkv + 1));
  memcpy(fillp, o->kv_cnt, sizeof(int64_t) * (size_t)(nkv + 1));
  o->q_idx = (int32_t *)malloc(sizeof(int32_t) * (size_t)(o->kv_cnt[nkv] + 1));
  o->q_kind = (uint8_t *)malloc((size_t)(o->kv_cnt[nkv] + 1));
  ib_bar_pair *bp = NULL;
  int64_t nbp = 0, cap = 0;
  for (int h = 0; h < t->heads; h++)
    for (int i = 0; i < t->n_qtiles; i++) {  // query tiles ascending within each list
      const int64_t *c = t->tile_cnt + ((int64_t)h * t->n_qtiles + i) * (t->world + 1);
      for (int64_t x = c[src]; x < c[src + 1]; x++) {
        int64_t p = fillp[(int64_t)h * o->n_kvtiles + t->tile_idx[x]]++;
        o->q_idx[p] = i, o->q_kind[p] = t->tile_kind[x];
      }
      const int64_t *b = t->bar_cnt + ((int64_t)h * t->n_qtiles + i) * (t->world + 1);
      for (int64_t x = b[src]; x < b[src + 1]; x++) {
        if (nbp == cap) cap = cap ? 2 * cap : 1024, bp = (ib_bar_pair *)realloc(bp, sizeof *bp * (size_t)cap);
        bp[nbp].head = h, bp[nbp].key_q = ((int64_t)t->bar_idx[x] << 31) + i, nbp++;
      }
    }
  free(fillp);
  if (nbp) qsort(bp, (size_t)nbp, sizeof *bp, ib_cmp_bar);
  o->bar_key_head = (int32_t *)malloc(sizeof(int32_t) * (size_t)(nbp + 1));
  o->bar_key = (int32_t *)malloc(sizeof(int32_t) * (size_t)(nbp + 1));
  o->bar_q_cnt = (int64_t *)malloc(sizeof(int64_t) * (size_t)(nbp + 2));
  o->bar_q_idx = (int32_t *)malloc(sizeof(int32_t) * (size_t)(nbp + 1));
  int32_t nk = 0;
  for (int64_t x = 0; x < nbp; x++) {
    int32_t key = (int32_t)(bp[x].key_q >> 31);
    if (nk == 0 || o->bar_key_head[nk - 1] != bp[x].head || o->bar_key[nk - 1] != key) {
      o->bar_key_head[nk] = bp[x].head, o->bar_key[nk] = key, o->bar_q_cnt[nk] = x, nk++;
    }
    o->bar_q_idx[x] = (int32_t)(bp[x].key_q & 0x7fffffff);
  }
  o->bar_q_cnt[nk] = nbp, o->n_bar_keys = nk;
  free(bp);
}

static inline void ib_transpose_free(tile_index_t *o) {
  free(o->kv_cnt), free(o->q_idx), free(o->q_kind), free(o->bar_key_head), free(o->bar_key), free(o->bar_q_cnt);
  free(o->bar_q_idx);
  memset(o, 0, sizeof *o);
}

#endif
