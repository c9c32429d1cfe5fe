// tiles_account.c — exact work counts per (head, query rank, source rank) of one layer: the entry point
// that picks the fast path (aligned tiles, tiles_fast.c) or the generic path (build every query tile).
#include <stdlib.h>
#include <string.h>

#include "plan/tiles_internal.h"

// ---------------------------------------------------------------------------------------------
// the generic path: the same per query-tile classification tiles_build runs, summed

int tiles_account_head_generic(tile_scan *s, const head_view *v, work_count *hc, sr_error *e) {
  const layout *l = s->lt.l;
  int W = l->world, rc = tile_scan_head(s, v, e);
  for (int q = 0; q < W && !rc; q++) {
    int64_t nq = sr_cdiv(l->rank_count[q], TILE);
    for (int64_t i = 0; i < nq && !rc; i++) {
      rc = tile_scan_qtile(s, v, q, i, 1, e);
      if (!rc) tiles_account_scan(s, hc + (int64_t)q * W);
    }
  }
  return rc;
}

void tiles_account_scan(const tile_scan *s, work_count *row) {
  for (int64_t x = 0; x < s->n_tiles; x++) {
    work_count *c = &row[s->tiles[x].src];
    if (s->tiles[x].kind == TILE_FULL) c->full++;
    else c->partial++;
    c->pairs += (double)s->tiles[x].pairs;
  }
  if (s->bars_counted) {
    for (int src = 0; src < s->lt.world; src++) {
      row[src].bars += s->bar_n[src];
      row[src].pairs += (double)s->bar_rows[src];
    }
    return;
  }
  for (int64_t x = 0; x < s->n_bars; x++) {
    work_count *c = &row[s->bars[x].src];
    c->bars++;
    c->pairs += (double)s->bars[x].rows;
  }
}

// Striped layouts whose stripe divides a tile: classes for the interior query tiles (tiles_comb.c), the
// per-tile scan for the last, partial super tile.
static int account_head_comb(tile_comb *cb, tile_scan *s, const head_view *v, work_count *hc, sr_error *e) {
  const layout *l = s->lt.l;
  int W = l->world, rc = tile_scan_head(s, v, e);
  int64_t interior = tiles_comb_interior(cb);
  if (!rc) rc = tiles_comb_head(cb, s, v, 1, e);
  if (!rc) rc = tiles_comb_account_head(cb, s, v, hc, e);
  for (int q = 0; q < W && !rc; q++) {
    int64_t nq = sr_cdiv(l->rank_count[q], TILE);
    for (int64_t i = interior; i < nq && !rc; i++) {
      rc = tile_scan_qtile(s, v, q, i, 1, e);
      if (!rc) tiles_account_scan(s, hc + (int64_t)q * W);
    }
  }
  return rc;
}

int tiles_account_generic(const pattern *p, int layer, const layout *l, work_count *counts, sr_error *e) {
  int W = l->world;
  memset(counts, 0, (size_t)p->heads * W * W * sizeof *counts);
  tile_scan s;
  tile_comb *cb = NULL;
  int rc = tile_scan_init(&s, l, e);
  if (rc) return rc;
  rc = tiles_comb_open(l, &cb, e);
  for (int h = 0; h < p->heads && !rc; h++) {
    work_count *hc = counts + (int64_t)h * W * W;
    if (h > 0 && pattern_heads_equal(pattern_head(p, layer, h), pattern_head(p, layer, h - 1))) {
      memcpy(hc, hc - (int64_t)W * W, (size_t)W * W * sizeof *hc);  // every head of a dense or windowed layer
      continue;
    }
    head_view v;
    rc = head_view_build(pattern_head(p, layer, h), p->n_tokens, &v, e);
    if (rc) break;
    rc = cb && !v.is_block && !v.is_tokens ? account_head_comb(cb, &s, &v, hc, e) : tiles_account_head_generic(&s, &v, hc, e);
    head_view_free(&v);
  }
  tiles_comb_close(cb);
  tile_scan_free(&s);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// an accounter: the tables of one layout, kept for many heads

struct tiles_accounter {
  const layout *l;
  tile_scan s;
  tiles_fast *fast;  // aligned layouts (the fast path), or NULL
  tiles_fast *flat;  // the same without the period, for heads added alone where it is cheaper (made on first use)
  int per_cell;      // kept pairs per cell (tiles_accounter_pairs_per_cell)
  int cell_pairs;    // a head added through the class tables or the scan (pairs per cell) since the last take
  tile_comb *cb;     // striped layouts whose stripe divides a tile (class tables), or NULL
};

int tiles_accounter_open(const layout *l, tiles_accounter **out, sr_error *e) {
  *out = NULL;
  tiles_accounter *a = calloc(1, sizeof *a);
  if (!a) return sr_internal_error(e, 0, "tiles: out of memory");
  a->l = l;
  a->per_cell = 1;
  int rc = tile_scan_init(&a->s, l, e);
  if (rc) {
    free(a);
    return rc;
  }
  rc = tiles_fast_open(l, &a->fast, e);
  if (!rc && !a->fast) rc = tiles_comb_open(l, &a->cb, e);
  if (rc) {
    tiles_accounter_close(a);
    return rc;
  }
  *out = a;
  return SR_OK;
}

void tiles_accounter_close(tiles_accounter *a) {
  if (!a) return;
  tiles_fast_close(a->fast);
  tiles_fast_close(a->flat);
  tiles_comb_close(a->cb);
  tile_scan_free(&a->s);
  free(a);
}

// The fast tables a head added alone goes through: without the period where that is cheaper (long stripes), opened on
// first use; else the accounter's.
static int fast_alone(tiles_accounter *a, tiles_fast **out, sr_error *e) {
  *out = a->fast;
  if (!tiles_fast_flat_cheaper(a->fast)) return SR_OK;
  int rc = a->flat ? SR_OK : tiles_fast_open_flat(a->l, &a->flat, e);
  if (!rc && a->flat) {
    tiles_fast_pairs_per_cell(a->flat, a->per_cell);
    *out = a->flat;
  }
  return rc;
}

static int head_add(tiles_accounter *a, const head_pattern *h, int pending, work_count *counts, sr_error *e) {
  head_view v;
  tiles_fast *alone = NULL;
  int rc = a->fast && !pending ? fast_alone(a, &alone, e) : SR_OK;
  if (rc) return rc;
  rc = a->fast && tiles_fast_lean(a->fast, h) ? head_view_build_lean(h, a->l->n_tokens, &v, e)
                                              : head_view_build(h, a->l->n_tokens, &v, e);
  if (rc) return rc;
  if (a->fast && pending) rc = tiles_fast_head_pending(a->fast, &a->s, &v, counts, e);
  else if (a->fast) rc = tiles_fast_head(alone, &a->s, &v, counts, e);
  else if (a->cb && !v.is_block && !v.is_tokens) rc = account_head_comb(a->cb, &a->s, &v, counts, e);
  else rc = tiles_account_head_generic(&a->s, &v, counts, e);
  if (!a->fast) a->cell_pairs = 1;
  head_view_free(&v);
  return rc;
}

int tiles_account_head_add(tiles_accounter *a, const head_pattern *h, work_count *counts, sr_error *e) {
  return head_add(a, h, 0, counts, e);
}

int tiles_account_head_add_pending(tiles_accounter *a, const head_pattern *h, work_count *counts, sr_error *e) {
  return head_add(a, h, 1, counts, e);
}

void tiles_accounter_fold(tiles_accounter *a, work_count *counts) {
  if (a && a->fast) tiles_fast_fold(a->fast, counts);
}

void tiles_accounter_pairs_per_cell(tiles_accounter *a, int per_cell) {
  a->per_cell = per_cell;
  if (a->fast) tiles_fast_pairs_per_cell(a->fast, per_cell);
  if (a->flat) tiles_fast_pairs_per_cell(a->flat, per_cell);
}

int tiles_accounter_take_cell_pairs(tiles_accounter *a) {
  int any = a->cell_pairs;
  if (a->fast) any |= tiles_fast_take_cell_pairs(a->fast);
  if (a->flat) any |= tiles_fast_take_cell_pairs(a->flat);
  a->cell_pairs = 0;
  return any;
}

int64_t tiles_accounter_take_pairs(tiles_accounter *a) {
  return (a->fast ? tiles_fast_take_pairs(a->fast) : 0) + (a->flat ? tiles_fast_take_pairs(a->flat) : 0);
}

// ---------------------------------------------------------------------------------------------
// entry point

int tiles_account_layer(const pattern *p, int layer, const layout *l, work_count *counts, sr_error *e) {
  if (layer < 0 || layer >= p->layers) return sr_input_error(e, NULL, "layer", "%d outside [0, %d)", layer, p->layers);
  if (l->n_tokens != p->n_tokens)
    return sr_input_error(e, NULL, "seq", "layout has %lld tokens but the pattern %lld", (long long)l->n_tokens,
                          (long long)p->n_tokens);
  tiles_accounter *a = NULL;
  int W = l->world, rc = tiles_accounter_open(l, &a, e);
  if (rc) return rc;
  memset(counts, 0, (size_t)p->heads * W * W * sizeof *counts);
  for (int h = 0; h < p->heads && !rc; h++) {
    work_count *hc = counts + (int64_t)h * W * W;
    if (h > 0 && pattern_heads_equal(pattern_head(p, layer, h), pattern_head(p, layer, h - 1)))
      memcpy(hc, hc - (int64_t)W * W, (size_t)W * W * sizeof *hc);  // every head of a dense or windowed layer
    else
      rc = tiles_account_head_add(a, pattern_head(p, layer, h), hc, e);
  }
  tiles_accounter_close(a);
  return rc;
}
