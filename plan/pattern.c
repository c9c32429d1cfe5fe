// pattern.c — allocation, the reference keep rule and validation of sparse attention patterns (see pattern.h).
#include "plan/pattern.h"

#include <stdlib.h>
#include <string.h>

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

void pattern_free(pattern *p) {
  if (!p) return;
  if (p->h) {
    for (int64_t i = 0; i < (int64_t)p->layers * p->heads; i++) {
      free(p->h[i].vertical);
      free(p->h[i].slash);
      free(p->h[i].mask);
    }
  }
  free(p->h);
  memset(p, 0, sizeof *p);
}

// ---------------------------------------------------------------------------------------------
// the reference keep rule

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
    case PATTERN_BLOCK:
      return a->block == b->block && a->n_blocks == b->n_blocks && a->row_words == b->row_words &&
             same_array(a->mask, b->mask, a->n_blocks * a->row_words, sizeof *a->mask);
  }
  return 0;
}
