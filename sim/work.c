// work.c — per-layer attention work from tiles_account_layer (see work.h).
#include "sim/work.h"

#include <stdlib.h>
#include <string.h>

#include "plan/util.h"

int work_cache_init(work_cache *c, const layout *l, sr_error *e) {
  memset(c, 0, sizeof c[0]);
  c->l = l;
  c->world = l->world;
  size_t n = (size_t)l->world * (size_t)l->world;
  c->scratch = malloc(n * sizeof *c->scratch);
  for (int i = 0; i < WORK_CACHE; i++) c->val[i] = malloc(n * sizeof *c->val[i]);
  for (int i = 0; i < WORK_CACHE; i++)
    if (!c->val[i] || !c->scratch) {
      work_cache_free(c);
      return sr_internal_error(e, 0, "work: out of memory for %d ranks", l->world);
    }
  return SR_OK;
}

void work_cache_free(work_cache *c) {
  free(c->scratch);
  for (int i = 0; i < WORK_CACHE; i++) free(c->val[i]);
  memset(c, 0, sizeof c[0]);
}

int work_heads_equal(const head_pattern *a, const head_pattern *b) {
  if (a == b) return 1;
  if (a->kind != b->kind) return 0;
  switch (a->kind) {
    case PATTERN_DENSE: return 1;
    case PATTERN_WINDOW: return a->sinks == b->sinks && a->window == b->window;
    case PATTERN_VS:
      return a->n_vertical == b->n_vertical && a->n_slash == b->n_slash &&
             (a->vertical == b->vertical || !memcmp(a->vertical, b->vertical, (size_t)a->n_vertical * 4)) &&
             (a->slash == b->slash || !memcmp(a->slash, b->slash, (size_t)a->n_slash * 4));
    case PATTERN_BLOCK:
      return a->block == b->block && a->n_blocks == b->n_blocks && a->row_words == b->row_words &&
             (a->mask == b->mask || !memcmp(a->mask, b->mask, (size_t)(a->n_blocks * a->row_words) * 8));
  }
  return 0;
}

int work_head(work_cache *c, const pattern *pat, int layer, int head, const work_count **out, sr_error *e) {
  const head_pattern *h = pattern_head(pat, layer, head);
  for (int i = 0; i < c->n_cached; i++)
    if (c->key[i] && work_heads_equal(c->key[i], h)) {
      *out = c->val[i];
      return SR_OK;
    }
  // Account this head alone: a one-layer, one-head view of the pattern.
  pattern view = {pat->n_tokens, 1, 1, (head_pattern *)h};
  int slot = c->n_cached < WORK_CACHE ? c->n_cached++ : (c->next++ % WORK_CACHE);
  c->key[slot] = NULL;
  double t0 = sr_now();
  int rc = tiles_account_layer(&view, 0, c->l, c->val[slot], e);
  c->wall_s += sr_now() - t0;
  if (rc) return rc;
  c->key[slot] = h;
  *out = c->val[slot];
  return SR_OK;
}

void work_add(work_count *a, const work_count *b) {
  a->full += b->full;
  a->partial += b->partial;
  a->bars += b->bars;
  a->pairs += b->pairs;
}

int work_layer(work_cache *c, const pattern *pat, int layer, work_count *agg, sr_error *e) {
  int64_t n = (int64_t)c->world * c->world;
  memset(agg, 0, (size_t)n * sizeof *agg);
  for (int h = 0; h < pat->heads; h++) {
    const work_count *w;
    int rc = work_head(c, pat, layer, h, &w, e);
    if (rc) return rc;
    for (int64_t i = 0; i < n; i++) work_add(&agg[i], &w[i]);
  }
  return SR_OK;
}
