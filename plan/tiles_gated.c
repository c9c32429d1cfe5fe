// tiles_gated.c — the execution form and the exact counts of MOBA and TOKENS heads (plan/gating.h).
//
// MOBA: a head is a block head whose row blocks are the query groups (TILE global rows) and whose column
// blocks are B keys; group p keeps its own block (causally) and the blocks it selected. The per query-tile
// scan classifies it like any block head (tiles_scan.c), reading the kept blocks of the tile's groups
// prepared here. On aligned tiles a group is one local query tile: its selected blocks are B / 128 FULL
// tiles each, its own block's earlier tiles FULL and its diagonal tile PARTIAL.
//
// TOKENS: the window (offsets q - k < w) is a Toeplitz part like any other; a group's keys run as bars
// under the element mask (each row keeps its own), except keys whose KV tile is already an entry of the
// query tile, which that PARTIAL tile computes under the same mask. So each kept (q, k) is computed once:
// by the window's tiles or by exactly one bar (keys are merged over the tile's groups), and a bar's
// element is nonzero only where the row chose the key.
#include <stdlib.h>
#include <string.h>

#include "plan/tiles_internal.h"

// ---------------------------------------------------------------------------------------------
// the query tile's groups

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

// Index of group p in s->grp (sorted), -1 when the tile has none of its rows.
static int64_t grp_index(const tile_scan *s, int64_t p) {
  int64_t lo = 0, hi = s->n_grp;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (s->grp[mid] < p) lo = mid + 1;
    else hi = mid;
  }
  return lo < s->n_grp && s->grp[lo] == p ? lo : -1;
}

// Set bits [a, b] of a 128-bit mask.
static void rows_set(uint64_t m[2], int64_t a, int64_t b) {
  for (int w = 0; w < 2; w++) {
    int64_t lo = a > 64 * w ? a - 64 * w : 0, hi = b < 64 * w + 63 ? b - 64 * w : 63;
    if (lo > hi) continue;
    uint64_t hi_mask = hi == 63 ? ~0ull : (1ull << (hi + 1)) - 1;
    m[w] |= hi_mask & (~0ull << lo);
  }
}

static int prepare_moba(tile_scan *s, const head_view *v, sr_error *e) {
  const head_pattern *h = v->h;
  int64_t nb = sr_cdiv(v->n_tokens, h->block), gw = sr_cdiv(nb, 64);
  if (gw != s->gw || !s->grp_bits || nb + 1 > s->grp_buf_cap) {  // heads of one layer may differ in B
    free(s->grp_bits), free(s->grp_buf);
    s->grp_bits = malloc(sizeof(uint64_t) * (size_t)(TILE * gw));
    s->grp_buf = malloc(sizeof(int32_t) * (size_t)(nb + 1));
    s->gw = gw, s->grp_buf_cap = nb + 1;
    if (!s->grp_bits || !s->grp_buf) {
      s->gw = 0, s->grp_buf_cap = 0;
      return sr_internal_error(e, 0, "tiles: out of memory for %lld blocks", (long long)nb);
    }
  }
  for (int64_t x = 0; x < s->n_grp; x++) {
    uint64_t *b = s->grp_bits + x * gw;
    memset(b, 0, sizeof(uint64_t) * (size_t)gw);
    int64_t own = s->grp[x] * TILE / h->block, n = moba_group_blocks(h, v->n_tokens, s->grp[x], s->grp_buf);
    b[own / 64] |= 1ull << (own % 64);
    for (int64_t y = 0; y < n; y++) b[s->grp_buf[y] / 64] |= 1ull << (s->grp_buf[y] % 64);
  }
  return SR_OK;
}

static int prepare_tokens(tile_scan *s, const head_view *v, sr_error *e) {
  int64_t need = 0;
  for (int64_t x = 0; x < s->n_grp; x++) need += tokens_group_room(v->h, s->grp[x]);
  if (need > s->span_cap) {
    tokens_span *sp = realloc(s->spans, sizeof *sp * (size_t)need);
    if (!sp) return sr_internal_error(e, 0, "tiles: out of memory for %lld key spans", (long long)need);
    s->spans = sp, s->span_cap = need;
  }
  s->grp_span[0] = 0;
  for (int64_t x = 0; x < s->n_grp; x++) {
    int64_t n = tokens_group_spans(v->h, v->n_tokens, s->grp[x], s->spans + s->grp_span[x]);
    if (n < 0) return sr_internal_error(e, 0, "tiles: out of memory drawing a group's keys");
    s->grp_span[x + 1] = s->grp_span[x] + n;
  }
  return SR_OK;
}

int gated_tile_prepare(tile_scan *s, const head_view *v, sr_error *e) {
  int64_t n = 0;
  for (int a = 0; a < s->n_qs; a++)
    for (int64_t p = s->qs[a].g / TILE; p <= (s->qs[a].g + s->qs[a].len - 1) / TILE; p++) s->grp[n++] = p;
  qsort(s->grp, (size_t)n, sizeof *s->grp, cmp_i64);
  s->n_grp = 0;
  for (int64_t x = 0; x < n; x++)
    if (s->n_grp == 0 || s->grp[x] != s->grp[s->n_grp - 1]) s->grp[s->n_grp++] = s->grp[x];
  memset(s->grp_rows, 0, sizeof(uint64_t) * 2 * (size_t)s->n_grp);
  for (int a = 0; a < s->n_qs; a++) {
    int64_t qa = s->qs[a].g, qe = qa + s->qs[a].len - 1;
    for (int64_t p = qa / TILE; p <= qe / TILE; p++)
      rows_set(s->grp_rows[grp_index(s, p)], sr_max64(qa, p * TILE) - p * TILE, sr_min64(qe, p * TILE + TILE - 1) - p * TILE);
  }
  return v->is_moba ? prepare_moba(s, v, e) : prepare_tokens(s, v, e);
}

// ---------------------------------------------------------------------------------------------
// MOBA in the scan

int gated_moba_kept(const tile_scan *s, int64_t p, int64_t c) {
  int64_t x = grp_index(s, p);
  if (x < 0 || c / 64 >= s->gw) return 0;
  return (int)((s->grp_bits[x * s->gw + c / 64] >> (c % 64)) & 1u);
}

int gated_mark_moba(tile_scan *s) {
  int64_t B = s->hv->h->block;
  for (int a = 0; a < s->n_qs; a++) {
    int64_t qa = s->qs[a].g, qe = qa + s->qs[a].len - 1;
    for (int64_t p = qa / TILE; p <= qe / TILE; p++) {
      int64_t q1 = sr_min64(qe, p * TILE + TILE - 1);
      const uint64_t *b = s->grp_bits + grp_index(s, p) * s->gw;
      for (int64_t w = 0; w < s->gw; w++)
        for (uint64_t x = b[w]; x; x &= x - 1) {
          int64_t c = w * 64 + __builtin_ctzll(x);
          if (c * B <= q1 && tile_scan_mark_keys(s, c * B, sr_min64(c * B + B - 1, q1))) return -1;
        }
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// TOKENS in the scan

// Row mask of the rows r >= lo.
static void rows_from(uint64_t m[2], int64_t lo) {
  if (lo <= 0) return;
  if (lo >= 128) {
    m[0] = m[1] = 0;
    return;
  }
  if (lo >= 64) m[0] = 0, m[1] &= ~0ull << (lo - 64);
  else m[0] &= ~0ull << lo;
}

static int cmp_bar(const void *a, const void *b) {
  const scan_bar *x = a, *y = b;
  if (x->src != y->src) return x->src < y->src ? -1 : 1;
  return (x->key > y->key) - (x->key < y->key);
}

// The scanned tile entry (src, j), or -1.
static int64_t entry_of(const tile_scan *s, int32_t src, int32_t j) {
  int64_t lo = 0, hi = s->n_tiles;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (s->tiles[mid].src < src || (s->tiles[mid].src == src && s->tiles[mid].j < j)) lo = mid + 1;
    else hi = mid;
  }
  return lo < s->n_tiles && s->tiles[lo].src == src && s->tiles[lo].j == j ? lo : -1;
}

int gated_tokens_bars(tile_scan *s, const head_view *v, int want_pairs, sr_error *e) {
  const layout *l = s->lt.l;
  int64_t w = v->h->tok_window, run = -1;
  s->n_bars = 0;
  for (int64_t x = 0; x < s->n_grp; x++) {
    int64_t p = s->grp[x];
    for (int64_t y = s->grp_span[x]; y < s->grp_span[x + 1]; y++) {
      const tokens_span *sp = &s->spans[y];
      for (int64_t k = sp->key; k < (int64_t)sp->key + sp->len; k++) {
        // rows of this tile in group p that keep k and are not already kept by the window (q - k >= w)
        uint64_t m[2] = {sp->rows[0] & s->grp_rows[x][0], sp->rows[1] & s->grp_rows[x][1]};
        rows_from(m, k - p * TILE + w);
        int64_t rows = __builtin_popcountll(m[0]) + __builtin_popcountll(m[1]);
        if (!rows) continue;
        if (run < 0 || k < l->runs[run].global || k >= l->runs[run].global + l->runs[run].len) run = layout_run_of_global(l, k);
        if (run < 0) return sr_internal_error(e, 0, "tiles: key %lld outside the layout", (long long)k);
        int32_t src = l->runs[run].rank, key = (int32_t)(l->runs[run].local + k - l->runs[run].global);
        int64_t at = entry_of(s, src, key / TILE);
        if (at >= 0) {  // inside a tile entry: that PARTIAL tile computes it under the mask
          if (want_pairs) s->tiles[at].pairs += rows;
          continue;
        }
        if (tile_scan_push_bar(s, src, key, rows)) return sr_internal_error(e, 0, "tiles: out of memory");
      }
    }
  }
  // a key several groups of the tile chose is one bar
  if (s->n_bars > 1) qsort(s->bars, (size_t)s->n_bars, sizeof *s->bars, cmp_bar);
  int64_t n = 0;
  for (int64_t x = 0; x < s->n_bars; x++) {
    if (n > 0 && s->bars[n - 1].src == s->bars[x].src && s->bars[n - 1].key == s->bars[x].key) s->bars[n - 1].rows += s->bars[x].rows;
    else s->bars[n++] = s->bars[x];
  }
  s->n_bars = n;
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// exact counts on aligned tiles

int gated_fast_moba(const int32_t *tile_rank, int64_t nbi, int W, const head_view *v, work_count *hc) {
  const head_pattern *h = v->h;
  int64_t nbt = h->block / TILE, nb = sr_cdiv(v->n_tokens, h->block), tt = (int64_t)TILE * TILE;
  // per column block: how many of its tiles each source holds, as (source, count) lists
  int64_t *boff = calloc((size_t)(nb + 1), sizeof *boff);
  int32_t *bsrc = malloc(sizeof(int32_t) * (size_t)(nb * nbt + 1)), *bcnt = malloc(sizeof(int32_t) * (size_t)(nb * nbt + 1));
  int32_t *buf = malloc(sizeof(int32_t) * (size_t)(nb + 1));
  int64_t *cnt = calloc((size_t)(nb * W + 1), sizeof *cnt);  // selections of block c by groups on rank r
  if (!boff || !bsrc || !bcnt || !buf || !cnt) {
    free(boff), free(bsrc), free(bcnt), free(buf), free(cnt);
    return -1;
  }
  int64_t n = 0;
  for (int64_t c = 0; c < nb; c++) {
    boff[c] = n;
    for (int64_t j = c * nbt; j < sr_min64((c + 1) * nbt, nbi); j++) {
      int64_t y = boff[c];
      while (y < n && bsrc[y] != tile_rank[j]) y++;
      if (y == n) bsrc[n] = tile_rank[j], bcnt[n++] = 0;
      bcnt[y]++;
    }
  }
  boff[nb] = n;
  for (int64_t t = 0; t < nbi; t++) {
    int64_t r = tile_rank[t], own = t / nbt;
    for (int64_t j = own * nbt; j < t; j++) {  // the own block before the diagonal: whole tiles
      work_count *c = &hc[r * W + tile_rank[j]];
      c->full++, c->pairs += (double)tt;
    }
    hc[r * W + r].partial++, hc[r * W + r].pairs += (double)(TILE * (TILE + 1) / 2);
    int64_t m = moba_group_blocks(h, v->n_tokens, t, buf);
    for (int64_t x = 0; x < m; x++) cnt[(int64_t)buf[x] * W + r]++;
  }
  for (int64_t c = 0; c < nb; c++)
    for (int64_t r = 0; r < W; r++) {
      if (!cnt[c * W + r]) continue;
      for (int64_t y = boff[c]; y < boff[c + 1]; y++) {
        work_count *x = &hc[r * W + bsrc[y]];
        double tiles = (double)cnt[c * W + r] * bcnt[y];
        x->full += (int64_t)tiles, x->pairs += tiles * (double)tt;
      }
    }
  free(boff), free(bsrc), free(bcnt), free(buf), free(cnt);
  return 0;
}

int gated_fast_tokens(const int32_t *tile_rank, int64_t nbi, int W, const head_view *v, work_count *hc) {
  const head_pattern *h = v->h;
  int64_t w = h->tok_window, reach = w > 0 ? (w + TILE - 2) / TILE : -1, room = 1;
  for (int64_t t = 0; t < nbi; t++) room = sr_max64(room, tokens_group_room(h, t));
  tokens_span *sp = malloc(sizeof *sp * (size_t)room);
  if (!sp) return -1;
  for (int64_t t = 0; t < nbi; t++) {
    int64_t r = tile_rank[t], n = tokens_group_spans(h, v->n_tokens, t, sp);
    if (n < 0) {
      free(sp);
      return -1;
    }
    for (int64_t y = 0; y < n; y++) {
      int64_t k0 = sp[y].key, k1 = k0 + sp[y].len;
      int64_t all = __builtin_popcountll(sp[y].rows[0]) + __builtin_popcountll(sp[y].rows[1]);
      for (int64_t k = k0; k < k1;) {
        int64_t j = k / TILE, end = sr_min64(k1, j * TILE + TILE);
        int in_window = reach >= 0 && j >= t - reach;  // key tile j is an entry of the window's tiles
        if (!in_window && end - 1 - t * TILE + w <= 0) {  // every row keeps every key of the run: one step
          work_count *c = &hc[r * W + tile_rank[j]];
          c->bars += end - k, c->pairs += (double)((end - k) * all);
          k = end;
          continue;
        }
        for (; k < end; k++) {
          uint64_t m[2] = {sp[y].rows[0], sp[y].rows[1]};
          rows_from(m, k - t * TILE + w);
          int64_t rows = __builtin_popcountll(m[0]) + __builtin_popcountll(m[1]);
          if (!rows) continue;
          work_count *c = &hc[r * W + tile_rank[j]];
          if (!in_window) c->bars++;
          c->pairs += (double)rows;
        }
      }
    }
  }
  free(sp);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// element masks

int gated_mask_moba(const head_pattern *h, int64_t n_tokens, head_mask *m) {
  uint64_t *bm;
  int64_t words;
  if (moba_block_mask(h, n_tokens, &bm, &words)) return -1;
  m->kind = PATTERN_BLOCK;
  m->block = TILE;
  m->row_words = words;
  m->bmask = bm;
  return 0;
}

int gated_mask_tokens(const head_pattern *h, int64_t n_tokens, head_mask *m) {
  int64_t ng = gating_n_groups(n_tokens), room = 1;
  for (int64_t t = 0; t < ng; t++) room = sr_max64(room, tokens_group_room(h, t));
  int64_t *off = malloc(sizeof(int64_t) * (size_t)(ng + 1));
  tokens_span *sp = malloc(sizeof *sp * (size_t)room);
  int32_t *key = NULL;
  uint64_t *rows = NULL;
  int64_t keys = 0;
  for (int pass = 0; pass < 2 && off && sp; pass++) {  // count the keys, then write them
    if (pass == 1 && (!(key = malloc(sizeof(int32_t) * (size_t)(keys + 1))) || !(rows = malloc(sizeof(uint64_t) * (size_t)(2 * keys + 2)))))
      break;
    int64_t at = 0;
    for (int64_t t = 0; t < ng; t++) {
      off[t] = at;
      int64_t ns = tokens_group_spans(h, n_tokens, t, sp);
      if (ns < 0) {
        at = -1;
        break;
      }
      for (int64_t y = 0; y < ns; y++)
        for (int64_t k = sp[y].key; k < (int64_t)sp[y].key + sp[y].len; k++, at++)
          if (pass == 1) key[at] = (int32_t)k, rows[2 * at] = sp[y].rows[0], rows[2 * at + 1] = sp[y].rows[1];
    }
    if (at < 0) break;
    off[ng] = keys = at;
    if (pass == 1) {
      free(sp);
      m->kind = PATTERN_TOKENS;
      m->window = h->tok_window;
      m->tok_off = off, m->tok_key = key, m->tok_rows = rows;
      return 0;
    }
  }
  free(off), free(sp), free(key), free(rows);
  return -1;
}
