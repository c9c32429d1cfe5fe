// tiles.c — the execution form of a pattern (tile_index.h): per (head, local query tile) the FULL and
// PARTIAL KV tile entries and the bar columns, segmented by source rank; its transpose for deterministic
// backward; and the element masks partial tiles run with.
//
// The rule (exact for every layout, see docs/patterns.md):
//   - a KV tile is an entry of a query tile iff it holds an element (q, k), k <= q, kept by the head's
//     Toeplitz part D (VS slashes, WINDOW's window, DENSE everything) or, for BLOCK heads, by the block mask;
//   - it is FULL iff every element of the tile pair is causal-visible and kept (columns of K may fill the
//     offsets D misses), else PARTIAL;
//   - a column k of K (VS verticals, WINDOW sinks) with k <= the tile's last query position is a bar of
//     the query tile iff its KV tile is not an entry of that query tile.
// For aligned contiguous tiles this is MTraining's rule: slash d marks tile diagonals floor(d/T) and
// floor(d/T)+1 unless T divides d (then only d/T); at the sequence's last, shorter tile a diagonal is
// marked only when it really holds an element.
#include <stdlib.h>
#include <string.h>

#include "plan/tiles_internal.h"

// ---------------------------------------------------------------------------------------------
// building

int tile_buf_grow(tile_buf *g, int64_t need, int with_kind) {
  if (need <= g->cap) return 0;
  int64_t cap = g->cap ? g->cap : 1024;
  while (cap < need) cap *= 2;
  int32_t *idx = realloc(g->idx, (size_t)cap * sizeof *idx);
  if (!idx) return -1;
  g->idx = idx;
  if (with_kind) {
    uint8_t *kind = realloc(g->kind, (size_t)cap);
    if (!kind) return -1;
    g->kind = kind;
  }
  g->cap = cap;
  return 0;
}

int tiles_build(const pattern *p, int layer, const layout *l, int q_rank, tile_index *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (layer < 0 || layer >= p->layers) return sr_input_error(e, NULL, "layer", "%d outside [0, %d)", layer, p->layers);
  if (q_rank < 0 || q_rank >= l->world) return sr_input_error(e, NULL, "rank", "%d outside [0, %d)", q_rank, l->world);
  if (l->n_tokens != p->n_tokens)
    return sr_input_error(e, NULL, "seq", "layout has %lld tokens but the pattern %lld", (long long)l->n_tokens,
                          (long long)p->n_tokens);
  int W = l->world;
  int64_t nq = sr_cdiv(l->rank_count[q_rank], TILE), cells = (int64_t)p->heads * nq * (W + 1);
  out->heads = p->heads;
  out->world = W;
  out->q_rank = q_rank;
  out->n_qtiles = (int32_t)nq;
  out->tile_cnt = calloc((size_t)cells + 1, sizeof *out->tile_cnt);
  out->bar_cnt = calloc((size_t)cells + 1, sizeof *out->bar_cnt);
  tile_scan s;
  int rc = tile_scan_init(&s, l, e);
  if (rc || !out->tile_cnt || !out->bar_cnt) {
    if (!rc) rc = sr_internal_error(e, 0, "tiles: out of memory");
    tiles_free(out);
    return rc;
  }
  tile_buf tg = {0}, bg = {0};
  tile_comb *cb = NULL;
  tiles_blocks *blk = NULL;
  if (!rc) rc = tiles_comb_open(l, &cb, e);
  if (!rc) rc = tiles_blocks_open(l, &blk, e);
  for (int h = 0; h < p->heads && !rc; h++) {
    const head_pattern *hp = pattern_head(p, layer, h);
    if (blk && hp->kind == PATTERN_BLOCK) {  // straight from the bitmap (tiles_blocks.c)
      int64_t base = (int64_t)h * nq * (W + 1);
      rc = tiles_blocks_head(blk, hp, q_rank, &tg, bg.n, out->tile_cnt + base, out->bar_cnt + base, e);
      continue;
    }
    head_view v;
    rc = head_view_build(hp, p->n_tokens, &v, e);
    if (rc) break;
    rc = tile_scan_head(&s, &v, e);
    int64_t interior = cb && !v.is_block && !v.is_tokens ? tiles_comb_interior(cb) : 0;
    if (!rc && interior) rc = tiles_comb_head(cb, &s, &v, 0, e);
    for (int64_t i = 0; i < nq && !rc; i++) {
      int64_t base = ((int64_t)h * nq + i) * (W + 1);
      if (i < interior) {
        rc = tiles_comb_emit(cb, &s, q_rank, i, &tg, &bg, out->tile_cnt + base, out->bar_cnt + base, e);
        continue;
      }
      rc = tile_scan_qtile(&s, &v, q_rank, i, 0, e);
      if (rc) break;
      if (tile_buf_grow(&tg, tg.n + s.n_tiles, 1) || tile_buf_grow(&bg, bg.n + s.n_bars, 0)) {
        rc = sr_internal_error(e, 0, "tiles: out of memory");
        break;
      }
      int64_t a = 0, b = 0;
      for (int src = 0; src <= W; src++) {
        out->tile_cnt[base + src] = tg.n + a;
        out->bar_cnt[base + src] = bg.n + b;
        while (a < s.n_tiles && s.tiles[a].src == src) a++;
        while (b < s.n_bars && s.bars[b].src == src) b++;
      }
      for (int64_t x = 0; x < s.n_tiles; x++) {
        tg.idx[tg.n] = s.tiles[x].j;
        tg.kind[tg.n++] = s.tiles[x].kind;
      }
      for (int64_t x = 0; x < s.n_bars; x++) bg.idx[bg.n++] = s.bars[x].key;
    }
    head_view_free(&v);
  }
  tile_scan_free(&s);
  tiles_comb_close(cb);
  tiles_blocks_close(blk);
  out->tile_idx = tg.idx;
  out->tile_kind = tg.kind;
  out->bar_idx = bg.idx;
  out->n_tiles = tg.n;
  out->n_bars = bg.n;
  if (rc) tiles_free(out);
  return rc;
}

void tiles_free(tile_index *t) {
  if (!t) return;
  free(t->tile_cnt);
  free(t->tile_idx);
  free(t->tile_kind);
  free(t->bar_cnt);
  free(t->bar_idx);
  free(t->run_cnt);
  free(t->run_key);
  free(t->run_len);
  memset(t, 0, sizeof *t);
}

// ---------------------------------------------------------------------------------------------
// transpose

// Bar keys are source-local indices, so (head, key) is sorted by counting per head: one pass counts the
// uses of each key, the keys in use get their slots in ascending order, a second pass fills the query
// tiles, which come out ascending because they are visited in order. Linear in the bars. Both passes take
// the keys in blocks (each query tile's bars are ascending, so a cursor per query tile finds its part of a
// block): counters of TRANSPOSE_COUNT_KEYS keys, then keys whose slots span about TRANSPOSE_FILL_SLOTS
// entries, so what is written at a time stays in cache; one sweep over all keys per query tile missed
// it on almost every bar at 512K tokens (13M bars a head and source over 256K keys).
#define TRANSPOSE_COUNT_KEYS (1 << 15)
#define TRANSPOSE_FILL_SLOTS (1 << 17)

static int transpose_bars(const tile_index *t, int src, int64_t nkv_tokens, int64_t n_uses, tile_index_t *out,
                          sr_error *e) {
  int W = t->world;
  int64_t nq = t->n_qtiles, cap = sr_max64(1, sr_min64(n_uses, (int64_t)t->heads * nkv_tokens));
  int64_t *at = calloc((size_t)sr_max64(1, nkv_tokens), sizeof *at), *cur = malloc((size_t)sr_max64(1, nq) * sizeof *cur);
  out->bar_key_head = malloc((size_t)cap * sizeof(int32_t));
  out->bar_key = malloc((size_t)cap * sizeof(int32_t));
  out->bar_q_cnt = malloc(((size_t)cap + 1) * sizeof(int64_t));
  out->bar_q_idx = malloc((size_t)n_uses * sizeof(int32_t) + 1);
  if (!at || !cur || !out->bar_key_head || !out->bar_key || !out->bar_q_cnt || !out->bar_q_idx) {
    free(at), free(cur);
    return sr_internal_error(e, 0, "tiles: out of memory for the transpose");
  }
  if (!n_uses) {  // no bars (block heads): nothing to count, and a sweep over every key of every head saved
    out->bar_q_cnt[0] = 0, out->n_bar_keys = 0;
    free(at), free(cur);
    return SR_OK;
  }
  int64_t keys = 0, used = 0;
  int32_t *q_idx = out->bar_q_idx;
  const int32_t *bar = t->bar_idx;
  for (int h = 0; h < t->heads; h++) {
    int64_t first = keys, cell0 = (int64_t)h * nq * (W + 1) + src;
    for (int64_t i = 0; i < nq; i++) cur[i] = t->bar_cnt[cell0 + i * (W + 1)];
    for (int64_t kb = 0; kb < nkv_tokens; kb += TRANSPOSE_COUNT_KEYS) {
      int64_t kend = sr_min64(nkv_tokens, kb + TRANSPOSE_COUNT_KEYS);
      for (int64_t i = 0; i < nq; i++) {
        if (i + 4 < nq) __builtin_prefetch(bar + cur[i + 4]);
        int64_t c = cell0 + i * (W + 1), a = cur[i], end = t->bar_cnt[c + 1];
        int32_t prev = a > t->bar_cnt[c] ? bar[a - 1] : -1;
        for (; a < end && bar[a] < kend; a++) {
          int32_t k = bar[a];
          if (k <= prev) {
            free(at), free(cur);
            return sr_input_error(e, NULL, "bar_idx", "key %d negative or not ascending", k);
          }
          at[k]++;
          prev = k;
        }
        cur[i] = a;
      }
    }
    for (int64_t i = 0; i < nq; i++) {
      int64_t c = cell0 + i * (W + 1);
      if (cur[i] < t->bar_cnt[c + 1]) {
        int32_t k = bar[cur[i]];
        free(at), free(cur);
        return sr_input_error(e, NULL, "bar_idx", "key %d outside the source's %lld tokens", k, (long long)nkv_tokens);
      }
      cur[i] = t->bar_cnt[c];
    }
    for (int64_t k = 0; k < nkv_tokens; k++) {
      if (!at[k]) continue;
      out->bar_key_head[keys] = h;
      out->bar_key[keys] = (int32_t)k;
      out->bar_q_cnt[keys++] = used;
      int64_t n = at[k];
      at[k] = used;  // from here on: the next free slot of key k
      used += n;
    }
    for (int64_t kx = first; kx < keys;) {
      int64_t ky = kx + 1;
      while (ky < keys && out->bar_q_cnt[ky] - out->bar_q_cnt[kx] < TRANSPOSE_FILL_SLOTS) ky++;
      int32_t kend = ky < keys ? out->bar_key[ky] : (int32_t)nkv_tokens;
      kx = ky;
      for (int64_t i = 0; i < nq; i++) {
        if (i + 4 < nq) __builtin_prefetch(bar + cur[i + 4]);  // the next cursors' bars are far apart in memory
        int64_t a = cur[i], end = t->bar_cnt[cell0 + i * (W + 1) + 1];
        for (; a < end && bar[a] < kend; a++) q_idx[at[bar[a]]++] = (int32_t)i;
        cur[i] = a;
      }
    }
    for (int64_t x = first; x < keys; x++) at[out->bar_key[x]] = 0;
  }
  out->bar_q_cnt[keys] = used;
  out->n_bar_keys = (int32_t)keys;
  free(at), free(cur);
  return SR_OK;
}

int tiles_transpose(const tile_index *t, int src, int64_t n_src_tokens, tile_index_t *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (src < 0 || src >= t->world) return sr_input_error(e, NULL, "src", "%d outside [0, %d)", src, t->world);
  if (t->n_runs) return sr_input_error(e, NULL, "index", "has runs (the forward form); the transpose takes the tile form");
  int W = t->world;
  int64_t nkv = sr_cdiv(n_src_tokens, TILE), nq = t->n_qtiles;
  out->heads = t->heads;
  out->n_kvtiles = (int32_t)nkv;
  out->n_qtiles = (int32_t)nq;
  out->kv_cnt = calloc((size_t)t->heads * nkv + 1, sizeof *out->kv_cnt);
  int64_t n_entries = 0, n_uses = 0;
  for (int64_t c = 0; c < (int64_t)t->heads * nq; c++) {
    n_entries += t->tile_cnt[c * (W + 1) + src + 1] - t->tile_cnt[c * (W + 1) + src];
    n_uses += t->bar_cnt[c * (W + 1) + src + 1] - t->bar_cnt[c * (W + 1) + src];
  }
  out->q_idx = malloc((size_t)n_entries * sizeof *out->q_idx + 1);
  out->q_kind = malloc((size_t)n_entries + 1);
  if (!out->kv_cnt || !out->q_idx || !out->q_kind) {
    tiles_transpose_free(out);
    return sr_internal_error(e, 0, "tiles: out of memory for the transpose");
  }
  // Counting sort by (head, KV tile); query tiles come out ascending because they are visited in order.
  for (int h = 0; h < t->heads; h++)
    for (int64_t i = 0; i < nq; i++) {
      int64_t c = ((int64_t)h * nq + i) * (W + 1) + src;
      for (int64_t a = t->tile_cnt[c]; a < t->tile_cnt[c + 1]; a++) {
        if (t->tile_idx[a] < 0 || t->tile_idx[a] >= nkv) {
          tiles_transpose_free(out);
          return sr_input_error(e, NULL, "tile_idx", "KV tile %d outside the source's %lld tiles", t->tile_idx[a],
                                (long long)nkv);
        }
        out->kv_cnt[h * nkv + t->tile_idx[a] + 1]++;
      }
    }
  for (int64_t x = 0; x < (int64_t)t->heads * nkv; x++) out->kv_cnt[x + 1] += out->kv_cnt[x];
  int64_t *fill = malloc(((size_t)t->heads * nkv + 1) * sizeof *fill);
  if (!fill) {
    tiles_transpose_free(out);
    return sr_internal_error(e, 0, "tiles: out of memory for the transpose");
  }
  memcpy(fill, out->kv_cnt, ((size_t)t->heads * nkv + 1) * sizeof *fill);
  for (int h = 0; h < t->heads; h++)
    for (int64_t i = 0; i < nq; i++) {
      int64_t c = ((int64_t)h * nq + i) * (W + 1) + src;
      for (int64_t a = t->tile_cnt[c]; a < t->tile_cnt[c + 1]; a++) {
        int64_t at = fill[h * nkv + t->tile_idx[a]]++;
        out->q_idx[at] = (int32_t)i;
        out->q_kind[at] = t->tile_kind[a];
      }
    }
  free(fill);
  int rc = transpose_bars(t, src, n_src_tokens, n_uses, out, e);
  if (rc) tiles_transpose_free(out);
  return rc;
}

void tiles_transpose_free(tile_index_t *t) {
  if (!t) return;
  free(t->kv_cnt);
  free(t->q_idx);
  free(t->q_kind);
  free(t->bar_key_head);
  free(t->bar_key);
  free(t->bar_q_cnt);
  free(t->bar_q_idx);
  memset(t, 0, sizeof *t);
}

// ---------------------------------------------------------------------------------------------
// element masks

int tiles_masks_build(const pattern *p, int layer, head_mask **out, sr_error *e) {
  *out = NULL;
  if (layer < 0 || layer >= p->layers) return sr_input_error(e, NULL, "layer", "%d outside [0, %d)", layer, p->layers);
  head_mask *m = calloc((size_t)p->heads, sizeof *m);
  if (!m) return sr_internal_error(e, 0, "tiles: out of memory for masks");
  int64_t words = sr_cdiv(p->n_tokens, 32);
  for (int h = 0; h < p->heads; h++) {
    const head_pattern *hp = pattern_head(p, layer, h);
    m[h].kind = (int32_t)hp->kind;
    m[h].n_tokens = p->n_tokens;
    m[h].sinks = hp->sinks;
    m[h].window = hp->window;
    if (hp->kind == PATTERN_VS) {
      uint32_t *vb = calloc((size_t)words, sizeof *vb), *sb = calloc((size_t)words, sizeof *sb);
      m[h].vbits = vb;
      m[h].sbits = sb;
      if (!vb || !sb) {
        tiles_masks_free(m, p->heads);
        return sr_internal_error(e, 0, "tiles: out of memory for masks");
      }
      for (int32_t x = 0; x < hp->n_vertical; x++) vb[hp->vertical[x] / 32] |= 1u << (hp->vertical[x] % 32);
      for (int32_t x = 0; x < hp->n_slash; x++) sb[hp->slash[x] / 32] |= 1u << (hp->slash[x] % 32);
    } else if (hp->kind == PATTERN_BLOCK) {
      size_t n = (size_t)(hp->n_blocks * hp->row_words) * sizeof(uint64_t);
      uint64_t *bm = malloc(n + 1);
      if (!bm) {
        tiles_masks_free(m, p->heads);
        return sr_internal_error(e, 0, "tiles: out of memory for masks");
      }
      memcpy(bm, hp->mask, n);
      m[h].block = hp->block;
      m[h].row_words = hp->row_words;
      m[h].bmask = bm;
    } else if ((hp->kind == PATTERN_MOBA && gated_mask_moba(hp, p->n_tokens, &m[h])) ||
               (hp->kind == PATTERN_TOKENS && gated_mask_tokens(hp, p->n_tokens, &m[h]))) {
      tiles_masks_free(m, p->heads);
      return sr_internal_error(e, 0, "tiles: out of memory for masks");
    }
  }
  *out = m;
  return SR_OK;
}

int tiles_masks_build_for(const pattern *p, int layer, const layout *l, int q_rank, head_mask **out, sr_error *e) {
  int rc = tiles_masks_build(p, layer, out, e);
  if (rc) return rc;
  if (q_rank < 0 || q_rank >= l->world || l->n_tokens != p->n_tokens) {
    tiles_masks_free(*out, p->heads), *out = NULL;
    return sr_input_error(e, NULL, "rank", "%d outside [0, %d), or the layout's tokens not the pattern's", q_rank, l->world);
  }
  tiles_blocks *blk = NULL;
  rc = tiles_blocks_open(l, &blk, e);
  for (int h = 0; h < p->heads && blk && !rc; h++) {
    const head_pattern *hp = pattern_head(p, layer, h);
    int plain = hp->kind == PATTERN_BLOCK && hp->block % TILE == 0;  // a tile pair lies in one block: kept or not
    if (hp->kind != PATTERN_BLOCK || (!plain && (rc = tiles_blocks_plain(blk, hp, q_rank, &plain, e))) || !plain) continue;
    head_mask *m = &(*out)[h];  // the causal mask: the kernels' cheaper partial tiles, no bit set to upload
    free((void *)m->bmask);
    m->bmask = NULL, m->kind = PATTERN_DENSE, m->block = 0, m->row_words = 0;
  }
  tiles_blocks_close(blk);
  if (rc) tiles_masks_free(*out, p->heads), *out = NULL;
  return rc;
}

void tiles_masks_free(head_mask *m, int heads) {
  if (!m) return;
  for (int h = 0; h < heads; h++) {
    free((void *)m[h].vbits);
    free((void *)m[h].sbits);
    free((void *)m[h].bmask);
    free((void *)m[h].tok_off);
    free((void *)m[h].tok_key);
    free((void *)m[h].tok_rows);
  }
  free(m);
}
