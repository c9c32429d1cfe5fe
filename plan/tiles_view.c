// tiles_view.c — a head as interval sets (Toeplitz offsets D, columns K), pair counting in closed form,
// and a layout seen as local tiles: the building blocks of the execution form and of accounting.
#include <stdlib.h>
#include <string.h>

#include "plan/tiles_internal.h"

// ---------------------------------------------------------------------------------------------
// interval sets

int iset_push(iset *s, int64_t a, int64_t b) {
  if (a > b) return 0;
  if (s->n > 0 && a <= s->hi[s->n - 1] + 1) {
    if (b > s->hi[s->n - 1]) s->hi[s->n - 1] = b;
    return 0;
  }
  if (s->n == s->cap) {
    int64_t cap = s->cap ? 2 * s->cap : 16;
    int64_t *lo = realloc(s->lo, (size_t)cap * sizeof *lo);
    if (!lo) return -1;
    s->lo = lo;
    int64_t *hi = realloc(s->hi, (size_t)cap * sizeof *hi);
    if (!hi) return -1;
    s->hi = hi;
    s->cap = cap;
  }
  s->lo[s->n] = a;
  s->hi[s->n] = b;
  s->n++;
  return 0;
}

void iset_finish(iset *s) {
  free(s->cum);
  s->cum = malloc((size_t)(s->n + 1) * sizeof *s->cum);
  if (!s->cum) return;
  s->cum[0] = 0;
  for (int64_t i = 0; i < s->n; i++) s->cum[i + 1] = s->cum[i] + s->hi[i] - s->lo[i] + 1;
}

void iset_free(iset *s) {
  free(s->lo);
  free(s->hi);
  free(s->cum);
  memset(s, 0, sizeof *s);
}

int64_t iset_first_ge(const iset *s, int64_t x) {
  int64_t lo = 0, hi = s->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (s->hi[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// Elements <= x.
static int64_t iset_count_le(const iset *s, int64_t x) {
  int64_t i = iset_first_ge(s, x);  // intervals before i lie wholly below x
  int64_t c = s->cum[i];
  if (i < s->n && s->lo[i] <= x) c += x - s->lo[i] + 1;
  return c;
}

int64_t iset_count(const iset *s, int64_t a, int64_t b) {
  if (a > b || s->n == 0) return 0;
  return iset_count_le(s, b) - iset_count_le(s, a - 1);
}

int iset_any(const iset *s, int64_t a, int64_t b) {
  if (a > b) return 0;
  int64_t i = iset_first_ge(s, a);
  return i < s->n && s->lo[i] <= b;
}

// ---------------------------------------------------------------------------------------------
// head views

// Ascending indices as intervals (iset_push of each as [x, x], with room for all of them made first). A head's indices
// are ascending and unique (plan/pattern.h), so a[i + 64] = a[i] + 64 exactly when the 63 between follow: a run is
// taken 64 at a time (the local window and the 64-offset bands are most of a vertical-slash head's slashes).
static int push_sorted(iset *s, const int32_t *a, int32_t n) {
  if (n > s->cap - s->n) {
    int64_t cap = s->n + n;
    int64_t *lo = realloc(s->lo, (size_t)cap * sizeof *lo);
    if (!lo) return -1;
    s->lo = lo;
    int64_t *hi = realloc(s->hi, (size_t)cap * sizeof *hi);
    if (!hi) return -1;
    s->hi = hi;
    s->cap = cap;
  }
  int64_t m = s->n, *lo = s->lo, *hi = s->hi;
  for (int32_t i = 0; i < n; i++) {
    int64_t x = a[i];
    if (m > 0 && x <= hi[m - 1] + 1) {
      if (x > hi[m - 1]) hi[m - 1] = x;
    } else {
      lo[m] = hi[m] = x;
      m++;
    }
    while (i + 64 < n && a[i + 64] == x + 64 && hi[m - 1] == x) hi[m - 1] = x += 64, i += 64;
  }
  s->n = m;
  return 0;
}

static int view_build(const head_pattern *h, int64_t n_tokens, int lean, head_view *v, sr_error *e);

int head_view_build(const head_pattern *h, int64_t n_tokens, head_view *v, sr_error *e) {
  return view_build(h, n_tokens, 0, v, e);
}

int head_view_build_lean(const head_pattern *h, int64_t n_tokens, head_view *v, sr_error *e) {
  return view_build(h, n_tokens, h->kind == PATTERN_VS, v, e);
}

static int view_build(const head_pattern *h, int64_t n_tokens, int lean, head_view *v, sr_error *e) {
  memset(v, 0, sizeof *v);
  v->h = h;
  v->n_tokens = n_tokens;
  int bad = 0;
  switch (h->kind) {
    case PATTERN_DENSE: bad = iset_push(&v->d, 0, n_tokens - 1); break;
    case PATTERN_WINDOW:
      bad = iset_push(&v->d, 0, sr_min64(h->window, n_tokens) - 1) ||
            iset_push(&v->k, 0, sr_min64(h->sinks, n_tokens) - 1);
      break;
    case PATTERN_VS:
      bad = push_sorted(&v->d, h->slash, h->n_slash) || (!lean && push_sorted(&v->k, h->vertical, h->n_vertical));
      v->lean = lean;
      v->keys = h->vertical;
      v->n_keys = h->n_vertical;
      break;
    case PATTERN_BLOCK:
      v->is_block = 1;
      v->row_block = v->col_block = h->block;
      break;
    case PATTERN_MOBA:
      v->is_block = v->is_moba = 1;
      v->row_block = TILE, v->col_block = h->block;
      break;
    case PATTERN_TOKENS:
      v->is_tokens = 1;
      bad = iset_push(&v->d, 0, sr_min64(h->tok_window, n_tokens) - 1);
      break;
  }
  // Candidate groups: a query segment of <= TILE rows sees D's intervals closer than TILE as one key range.
  for (int64_t i = 0; !bad && !lean && i < v->d.n; i++) {
    if (v->dg.n > 0 && v->d.lo[i] - v->dg.hi[v->dg.n - 1] <= TILE) v->dg.hi[v->dg.n - 1] = v->d.hi[i];
    else bad = iset_push(&v->dg, v->d.lo[i], v->d.hi[i]);
  }
  iset_finish(&v->d);
  iset_finish(&v->k);
  iset_finish(&v->dg);
  if (bad || !v->d.cum || !v->k.cum || !v->dg.cum) {
    head_view_free(v);
    return sr_internal_error(e, 0, "tiles: out of memory for a head's index sets");
  }
  return SR_OK;
}

void head_view_free(head_view *v) {
  iset_free(&v->d);
  iset_free(&v->k);
  iset_free(&v->dg);
}

// ---------------------------------------------------------------------------------------------
// pair counting

// Sum of clamp(s, 0, L) over all integers s <= t.
static int64_t clamp_prefix(int64_t t, int64_t L) {
  if (t <= 0) return 0;
  if (t <= L) return t * (t + 1) / 2;
  return L * (L + 1) / 2 + (t - L) * L;
}

// Pairs with q - k <= x: for each q the keys k >= q - x, i.e. clamp(ke - q + x + 1, 0, lk), summed over q.
static int64_t pairs_d_le(int64_t qa, int64_t lq, int64_t ka, int64_t lk, int64_t x) {
  int64_t ke = ka + lk - 1, qe = qa + lq - 1;
  int64_t t2 = ke + x + 1 - qa, t1 = ke + x + 1 - qe;
  return clamp_prefix(t2, lk) - clamp_prefix(t1 - 1, lk);
}

int64_t pairs_in_d_range(int64_t qa, int64_t lq, int64_t ka, int64_t lk, int64_t d0, int64_t d1) {
  if (lq <= 0 || lk <= 0) return 0;
  int64_t dmin = qa - (ka + lk - 1), dmax = qa + lq - 1 - ka;
  if (d0 < dmin) d0 = dmin;
  if (d1 > dmax) d1 = dmax;
  if (d0 > d1) return 0;
  return pairs_d_le(qa, lq, ka, lk, d1) - pairs_d_le(qa, lq, ka, lk, d0 - 1);
}

// ---------------------------------------------------------------------------------------------
// layouts as local tiles

int layout_tiles_init(const layout *l, layout_tiles *lt, sr_error *e) {
  memset(lt, 0, sizeof *lt);
  lt->l = l;
  lt->world = l->world;
  lt->n_tiles = calloc((size_t)l->world, sizeof *lt->n_tiles);
  lt->tile_base = calloc((size_t)l->world + 1, sizeof *lt->tile_base);
  if (!lt->n_tiles || !lt->tile_base) {
    layout_tiles_free(lt);
    return sr_internal_error(e, 0, "tiles: out of memory");
  }
  for (int r = 0; r < l->world; r++) {
    lt->n_tiles[r] = sr_cdiv(l->rank_count[r], TILE);
    lt->tile_base[r + 1] = lt->tile_base[r] + lt->n_tiles[r];
  }
  return SR_OK;
}

void layout_tiles_free(layout_tiles *lt) {
  free(lt->n_tiles);
  free(lt->tile_base);
  memset(lt, 0, sizeof *lt);
}

int tile_segments(const layout_tiles *lt, int r, int64_t i, tile_seg *segs) {
  const layout *l = lt->l;
  int64_t a = i * TILE, b = sr_min64(a + TILE, l->rank_count[r]);  // local [a, b)
  int64_t lo = l->rank_run_begin[r], hi = l->rank_run_begin[r + 1];
  // first run of rank r with local + len > a
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (l->runs[mid].local + l->runs[mid].len <= a) lo = mid + 1;
    else hi = mid;
  }
  int n = 0;
  for (int64_t x = lo; x < l->rank_run_begin[r + 1] && a < b; x++) {
    const layout_run *run = &l->runs[x];
    int64_t off = a - run->local;
    int64_t len = sr_min64(run->len - off, b - a);
    segs[n].g = run->global + off;
    segs[n].len = len;
    n++;
    a += len;
  }
  return n;
}

int64_t layout_run_of_global(const layout *l, int64_t t) {
  int64_t lo = 0, hi = l->n_runs;
  while (lo < hi) {  // first by_global position whose run ends after t
    int64_t mid = lo + (hi - lo) / 2;
    const layout_run *run = &l->runs[l->by_global[mid]];
    if (run->global + run->len <= t) lo = mid + 1;
    else hi = mid;
  }
  if (lo == l->n_runs || l->runs[l->by_global[lo]].global > t) return -1;
  return l->by_global[lo];
}
