// pattern.c — allocation, the reference keep rule and validation of sparse attention patterns (see pattern.h).
#include "plan/pattern.h"

#include <stdlib.h>
#include <string.h>

#include "plan/gating.h"
#include "plan/tile_index.h"

// ---------------------------------------------------------------------------------------------
// allocation

int pattern_alloc(pattern *p, int64_t n_tokens, int layers, int heads, sr_error *e) {
  memset(p, 0, sizeof *p);
  if (n_tokens < 1) return sr_input_error(e, NULL, "seq", "expected at least 1 token, got %lld", (long long)n_tokens);
  if (layers < 1 || heads < 1)
    return sr_input_error(e, NULL, "pattern", "expected at least one layer and head, got %d x %d", layers, heads);
  p->h = calloc((size_t)layers * (size_t)heads, sizeof *p->h);
  if (!p->h) return sr_internal_error(e, 0, "pattern: out of memory for %d x %d heads", layers, heads);
  p->n_tokens = n_tokens;
  p->layers = layers;
  p->heads = heads;
  for (int64_t i = 0; i < (int64_t)layers * heads; i++) p->h[i].kind = PATTERN_DENSE;
  return SR_OK;
}

void pattern_head_clear(head_pattern *h) {
  free(h->vertical);
  free(h->slash);
  free(h->mask);
  free(h->sel_off);
  free(h->sel);
  free(h->tok_off);
  free(h->tok_key);
  free(h->tok_rows);
  memset(h, 0, sizeof *h);
  h->kind = PATTERN_DENSE;
}

void pattern_free(pattern *p) {
  if (!p) return;
  if (p->h)
    for (int64_t i = 0; i < (int64_t)p->layers * p->heads; i++) pattern_head_clear(&p->h[i]);
  free(p->h);
  memset(p, 0, sizeof *p);
}

// ---------------------------------------------------------------------------------------------
// the reference keep rule

// Does MoBA group t keep (earlier) block c?
static int moba_keeps_block(const head_pattern *h, int64_t t, int64_t c) {
  if (!h->gen_key) {
    int64_t lo = h->sel_off[t], hi = h->sel_off[t + 1];
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (h->sel[mid] < c) lo = mid + 1;
      else hi = mid;
    }
    return lo < h->sel_off[t + 1] && h->sel[lo] == c;
  }
  int32_t *buf = malloc(sizeof(int32_t) * (size_t)(t * TILE / h->block + 1));
  int64_t n = buf ? moba_group_blocks(h, 0, t, buf) : 0, kept = 0;
  for (int64_t x = 0; x < n; x++) kept |= buf[x] == c;
  free(buf);
  return (int)kept;
}

// Does row q of its group keep key k through the group's keys?
static int tokens_keeps(const head_pattern *h, int64_t q, int64_t k) {
  int64_t t = q / TILE, r = q % TILE;
  if (!h->gen_key) {
    int64_t lo = h->tok_off[t], hi = h->tok_off[t + 1];
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (h->tok_key[mid] < k) lo = mid + 1;
      else hi = mid;
    }
    return lo < h->tok_off[t + 1] && h->tok_key[lo] == k && ((h->tok_rows[2 * lo + r / 64] >> (r % 64)) & 1u);
  }
  tokens_span *sp = malloc(sizeof *sp * (size_t)tokens_group_room(h, t));
  int64_t n = sp ? tokens_group_spans(h, q + 1, t, sp) : 0;
  int kept = 0;
  for (int64_t x = 0; x < n; x++)
    if (k >= sp[x].key && k < (int64_t)sp[x].key + sp[x].len) kept = (int)((sp[x].rows[r / 64] >> (r % 64)) & 1u);
  free(sp);
  return kept;
}

static int sorted_contains(const int32_t *a, int32_t n, int64_t x) {
  int32_t lo = 0, hi = n;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (a[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && a[lo] == x;
}

int pattern_keeps(const head_pattern *h, int64_t q, int64_t k) {
  if (k < 0 || k > q) return 0;
  switch (h->kind) {
    case PATTERN_DENSE: return 1;
    case PATTERN_WINDOW: return k < h->sinks || q - k < h->window;
    case PATTERN_VS: return sorted_contains(h->vertical, h->n_vertical, k) || sorted_contains(h->slash, h->n_slash, q - k);
    case PATTERN_BLOCK: {
      int64_t p = q / h->block, c = k / h->block;
      return (int)((h->mask[p * h->row_words + c / 64] >> (c % 64)) & 1u);
    }
    case PATTERN_MOBA: return k / h->block == q / h->block || moba_keeps_block(h, q / TILE, k / h->block);
    case PATTERN_TOKENS: return q - k < h->tok_window || tokens_keeps(h, q, k);
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// validation

static int check_sorted_unique(const int32_t *a, int32_t n, int64_t n_tokens, const char *what, const char *file,
                               const char *field, sr_error *e) {
  if (n < 0) return sr_input_error(e, file, field, "%s count %d is negative", what, n);
  if (n > 0 && !a) return sr_input_error(e, file, field, "%s: %d indices but no array", what, n);
  for (int32_t i = 0; i < n; i++) {
    if (a[i] < 0 || a[i] >= n_tokens)
      return sr_input_error(e, file, field, "%s[%d] = %d is outside [0, %lld)", what, i, a[i], (long long)n_tokens);
    if (i > 0 && a[i] <= a[i - 1])
      return sr_input_error(e, file, field, "%s must be sorted ascending and unique: [%d] = %d after %d", what, i,
                            a[i], a[i - 1]);
  }
  return SR_OK;
}

// Offsets [n_groups + 1] from 0, non-decreasing; each group's entries ascending, each in [0, lim(group)).
static int check_groups(const int64_t *off, const int32_t *v, int64_t ng, int64_t per, int64_t step, const char *what,
                        const char *file, const char *field, sr_error *e) {
  if (!off || off[0] != 0) return sr_input_error(e, file, field, "%s: offsets missing or not starting at 0", what);
  for (int64_t t = 0; t < ng; t++) {
    if (off[t + 1] < off[t]) return sr_input_error(e, file, field, "%s: group %lld has a negative count", what, (long long)t);
    int64_t lim = (t * TILE + per) / step;  // MOBA: the own block (per 0, step B); TOKENS: past the last row
    for (int64_t x = off[t]; x < off[t + 1]; x++)
      if (v[x] < 0 || v[x] >= lim || (x > off[t] && v[x] <= v[x - 1]))
        return sr_input_error(e, file, field, "%s: group %lld entry %d is not ascending in [0, %lld)", what,
                              (long long)t, v[x], (long long)lim);
  }
  return SR_OK;
}

static int validate_moba(const head_pattern *h, int64_t n_tokens, const char *file, const char *field, sr_error *e) {
  if (h->block < TILE || h->block % TILE)
    return sr_input_error(e, file, field, "moba block size %d must be a multiple of %d", h->block, TILE);
  if (h->topk < 1) return sr_input_error(e, file, field, "moba top-k %d must be >= 1", h->topk);
  if (h->n_groups != gating_n_groups(n_tokens))
    return sr_input_error(e, file, field, "n_groups %lld should be ceil(%lld / %d)", (long long)h->n_groups,
                          (long long)n_tokens, TILE);
  return h->gen_key ? SR_OK : check_groups(h->sel_off, h->sel, h->n_groups, 0, h->block, "moba blocks", file, field, e);
}

static int validate_tokens(const head_pattern *h, int64_t n_tokens, const char *file, const char *field, sr_error *e) {
  if (h->topk < 1 || h->tok_window < 0)
    return sr_input_error(e, file, field, "token top-k %d must be >= 1 and its window %lld >= 0", h->topk,
                          (long long)h->tok_window);
  if (h->n_groups != gating_n_groups(n_tokens))
    return sr_input_error(e, file, field, "n_groups %lld should be ceil(%lld / %d)", (long long)h->n_groups,
                          (long long)n_tokens, TILE);
  if (h->gen_key) return SR_OK;
  if (!h->tok_rows) return sr_input_error(e, file, field, "token top-k head without row masks");
  return check_groups(h->tok_off, h->tok_key, h->n_groups, TILE, 1, "token keys", file, field, e);
}

int pattern_validate_head(const head_pattern *h, int64_t n_tokens, const char *file, const char *field, sr_error *e) {
  switch (h->kind) {
    case PATTERN_DENSE: return SR_OK;
    case PATTERN_WINDOW:
      if (h->sinks < 0 || h->window < 0)
        return sr_input_error(e, file, field, "window pattern needs sinks >= 0 and window >= 0, got %lld and %lld",
                              (long long)h->sinks, (long long)h->window);
      return SR_OK;
    case PATTERN_VS: {
      int rc = check_sorted_unique(h->vertical, h->n_vertical, n_tokens, "vertical", file, field, e);
      if (rc) return rc;
      return check_sorted_unique(h->slash, h->n_slash, n_tokens, "slash", file, field, e);
    }
    case PATTERN_BLOCK: {
      if (h->block < 1) return sr_input_error(e, file, field, "block size %d must be >= 1", h->block);
      int64_t nb = (n_tokens + h->block - 1) / h->block;
      if (h->n_blocks != nb)
        return sr_input_error(e, file, field, "n_blocks %lld should be ceil(%lld / %d) = %lld", (long long)h->n_blocks,
                              (long long)n_tokens, h->block, (long long)nb);
      if (h->row_words != (nb + 63) / 64)
        return sr_input_error(e, file, field, "row_words %lld should be %lld", (long long)h->row_words,
                              (long long)((nb + 63) / 64));
      if (!h->mask) return sr_input_error(e, file, field, "block pattern without a mask");
      return SR_OK;
    }
    case PATTERN_MOBA: return validate_moba(h, n_tokens, file, field, e);
    case PATTERN_TOKENS: return validate_tokens(h, n_tokens, file, field, e);
  }
  return sr_input_error(e, file, field, "unknown pattern kind %d", (int)h->kind);
}

int pattern_layer_heads_uniform(const pattern *p, int layer) {
  const head_pattern *h0 = pattern_head(p, layer, 0);
  if (h0->kind != PATTERN_DENSE && h0->kind != PATTERN_WINDOW) return 0;
  for (int h = 1; h < p->heads; h++) {
    const head_pattern *x = pattern_head(p, layer, h);
    if (x->kind != h0->kind || (x->kind == PATTERN_WINDOW && (x->sinks != h0->sinks || x->window != h0->window)))
      return 0;
  }
  return 1;
}

// ---------------------------------------------------------------------------------------------
// comparison

// Equal index arrays are often one array (a dense model's layers share their heads): compared by pointer
// first, by content only when they differ.
// Equal arrays of n elements of size w; an empty array may be NULL, which memcmp must never see.
static int same_array(const void *x, const void *y, int64_t n, size_t w) {
  return n <= 0 || x == y || (x && y && !memcmp(x, y, (size_t)n * w));
}

int pattern_heads_equal(const head_pattern *a, const head_pattern *b) {
  if (a == b) return 1;
  if (a->kind != b->kind) return 0;
  switch (a->kind) {
    case PATTERN_DENSE: return 1;
    case PATTERN_WINDOW: return a->sinks == b->sinks && a->window == b->window;
    case PATTERN_VS:
      return a->n_vertical == b->n_vertical && a->n_slash == b->n_slash &&
             same_array(a->vertical, b->vertical, a->n_vertical, sizeof *a->vertical) &&
             same_array(a->slash, b->slash, a->n_slash, sizeof *a->slash);
    case PATTERN_MOBA: {
      if (a->block != b->block || a->topk != b->topk || a->n_groups != b->n_groups || a->gen_key != b->gen_key ||
          a->gen_step != b->gen_step || a->gen_rho != b->gen_rho)
        return 0;
      if (a->gen_key) return 1;
      if (!same_array(a->sel_off, b->sel_off, a->n_groups + 1, sizeof *a->sel_off)) return 0;
      return same_array(a->sel, b->sel, a->sel_off ? a->sel_off[a->n_groups] : 0, sizeof *a->sel);
    }
    case PATTERN_TOKENS: {
      if (a->topk != b->topk || a->tok_window != b->tok_window || a->n_groups != b->n_groups ||
          a->gen_key != b->gen_key || a->gen_step != b->gen_step)
        return 0;
      if (a->gen_key) return 1;
      if (!same_array(a->tok_off, b->tok_off, a->n_groups + 1, sizeof *a->tok_off)) return 0;
      int64_t n = a->tok_off ? a->tok_off[a->n_groups] : 0;
      return same_array(a->tok_key, b->tok_key, n, sizeof *a->tok_key) &&
             same_array(a->tok_rows, b->tok_rows, 2 * n, sizeof *a->tok_rows);
    }
    case PATTERN_BLOCK:
      return a->block == b->block && a->n_blocks == b->n_blocks && a->row_words == b->row_words &&
             same_array(a->mask, b->mask, a->n_blocks * a->row_words, sizeof *a->mask);
  }
  return 0;
}
