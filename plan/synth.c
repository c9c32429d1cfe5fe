// synth.c — seeded synthetic patterns (see synth.h): vertical-slash with budgets, presets and top-p-like
// sparsity, ANCHORS' VS-like mask, clustered block-sparse and AdaSpa-like head-adaptive block-sparse.
//
// Every random draw comes from MT19937 (GSL's mt19937 bit for bit, plan/rng.h), reseeded per (layer, head,
// index group, drift epoch) from a splitmix64 hash of those numbers, so a head never depends on how many
// draws another head made; heads are therefore drawn in parallel (parallel.h), with the same result for
// any thread count.
#include "plan/synth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/parallel.h"
#include "plan/rng.h"
#include "plan/synth_internal.h"
#include "plan/util.h"

// ---------------------------------------------------------------------------------------------
// seeding

synth_opts synth_defaults(uint64_t seed, int step) {
  synth_opts o = {.seed = seed, .step = step, .drift_period = SYNTH_DRIFT_PERIOD};
  return o;
}

enum { CACHE_NONE, CACHE_RECORD, CACHE_REPLAY };  // draw_indices' use of the verticals' cache (synth_vert_cache)
enum { KEY_VERT = 1, KEY_SLASH, KEY_TOPP, KEY_TOPP_HEAD, KEY_LIKE, KEY_BLOCK, KEY_BLOCK_NOISE, KEY_ADASPA, KEY_PRESET };

void synth_ctx_free(synth_ctx *c) {
  free(c->bits);
  free(c->tmp);
  free(c->vc.x);
  free(c->vc.first);
  free(c->vc.mt);
  free(c->vc.seeded);
  memset(c, 0, sizeof *c);
}

int synth_ctx_init(synth_ctx *c, int64_t n, sr_error *e) {
  memset(c, 0, sizeof *c);
  c->n = n;
  c->bits = calloc((size_t)(n / 64) + 2, sizeof *c->bits);
  c->tmp = malloc(((size_t)n + 1) * sizeof *c->tmp);
  if (!c->bits || !c->tmp) {
    synth_ctx_free(c);
    return sr_internal_error(e, 0, "synth: out of memory for %lld tokens", (long long)n);
  }
  return SR_OK;
}

int synth_pool_open(synth_pool *p, int64_t n_tokens, int items, sr_error *e) {
  p->n = sr_threads();
  if (p->n > items) p->n = items > 0 ? items : 1;
  p->c = calloc((size_t)p->n, sizeof *p->c);
  if (!p->c) return sr_internal_error(e, 0, "synth: out of memory");
  for (int t = 0; t < p->n; t++) {
    int rc = synth_ctx_init(&p->c[t], n_tokens, e);
    if (rc) {
      for (int u = 0; u < t; u++) synth_ctx_free(&p->c[u]);
      free(p->c);
      return rc;
    }
  }
  return SR_OK;
}

void synth_pool_close(synth_pool *p) {
  for (int t = 0; t < p->n; t++) synth_ctx_free(&p->c[t]);
  free(p->c);
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

uint64_t synth_head_key(const synth_opts *o, int layer, int head) {
  return synth_mix64(o->seed ^ synth_mix64(((uint64_t)(uint32_t)layer << 32) | (uint32_t)head));
}

// ---------------------------------------------------------------------------------------------
// vertical-slash heads

// Sort non-negative indices ascending: LSD radix sort, 8 bits a pass, only as many passes as the
// largest index needs (indices are below N), through c->tmp.
void synth_sort_indices(synth_ctx *c, int32_t *a, int64_t n) {
  if (n < 32) {
    qsort(a, (size_t)n, sizeof *a, cmp_i32);
    return;
  }
  uint32_t mx = 0;
  for (int64_t i = 0; i < n; i++) mx |= (uint32_t)a[i];
  int32_t *src = a, *dst = c->tmp;
  for (int shift = 0; shift < 32 && (mx >> shift); shift += 8) {
    int64_t cnt[257] = {0};
    for (int64_t i = 0; i < n; i++) cnt[(((uint32_t)src[i] >> shift) & 0xffu) + 1]++;
    for (int x = 0; x < 256; x++) cnt[x + 1] += cnt[x];
    for (int64_t i = 0; i < n; i++) dst[cnt[((uint32_t)src[i] >> shift) & 0xffu]++] = src[i];
    int32_t *t = src;
    src = dst;
    dst = t;
  }
  if (src != a) memcpy(a, src, (size_t)n * sizeof *a);
}

// The marked indices ascending into out (count of them), clearing the marks. Indices below n_struct are
// exactly [0, n_struct) and already in place (draws below it collide with them); the rest come from a scan
// of the bitmap when it is short against them, else from a sort of what out holds and a clear per index.
// Either gives the one sorted list of the set.
void synth_take_sorted(synth_ctx *c, int32_t *out, int64_t count, int64_t n_struct) {
  int64_t words = c->n / 64 + 1, w0 = n_struct / 64, rest = count - n_struct;
  if (words - w0 <= 4 * rest) {
    synth_take_bits(c->bits, w0, words, n_struct, out, count);
  } else {
    for (int64_t i = n_struct; i < count; i++) c->bits[out[i] >> 6] = 0;
    synth_sort_indices(c, out + n_struct, rest);
  }
  memset(c->bits, 0, (size_t)(w0 + 1) * sizeof *c->bits);
}

// Make room for `more` candidates in c's vertical cache; 0 when it cannot (the cache is then dropped: the
// final draw draws afresh, with the same result).
static int cache_reserve(synth_ctx *c, int64_t more) {
  synth_vert_cache *v = &c->vc;
  if (v->used + more <= v->cap) return 1;
  int64_t cap = sr_max64(2 * v->cap, v->used + more);
  int32_t *x = realloc(v->x, (size_t)cap * sizeof *x);
  if (!x) return v->groups = 0;
  v->x = x;
  v->cap = cap;
  return 1;
}

// Group g's verticals: its stream's candidates until q are fresh (16 q + 64 tries at most). A candidate
// already marked is written but not counted (no branch on the random outcome). With the cache recording,
// every candidate is kept in draw order and the stream left in c->vc.mt[g]; replaying, the recorded
// candidates come first, then that stream goes on: the stream is fixed by the seed alone, whatever the quota
// and the marks, so both give the candidates a fresh draw would. Candidates come a chunk at a time, their marks'
// words fetched before any is marked (half a megabyte at 4M tokens, read at random); a chunk drawn past the quota
// only moves the stream on, and recorded, its candidates are the stream's next, which a replay reads first.
#define SYNTH_VERT_CHUNK 64
#define SYNTH_VERT_AHEAD 16  // replayed candidates whose words are fetched ahead
static int64_t draw_group_verticals(synth_ctx *c, sr_mt *r, int g, int64_t q, int32_t *out, int64_t count, int mode) {
  int64_t n = c->n, taken = 0, tries = 0, most = 16 * q + 64;
  uint64_t *bits = c->bits;
  synth_vert_cache *v = &c->vc;
#define SR_KEEP_VERTICAL(x)                                  \
  do {                                                       \
    uint64_t *w_ = &bits[(x) >> 6], m_ = 1ull << ((x) & 63); \
    int64_t fresh_ = (*w_ & m_) == 0;                        \
    *w_ |= m_;                                               \
    out[count] = (int32_t)(x);                               \
    count += fresh_;                                         \
    taken += fresh_;                                         \
  } while (0)
  if (mode == CACHE_REPLAY)
    for (int64_t k = v->first[g], end = v->first[g + 1]; k < end && taken < q && tries < most; k++, tries++) {
      if (k + SYNTH_VERT_AHEAD < end) __builtin_prefetch(&bits[v->x[k + SYNTH_VERT_AHEAD] >> 6]);
      SR_KEEP_VERTICAL((int64_t)v->x[k]);
    }
  int record = mode == CACHE_RECORD && cache_reserve(c, most);
  int32_t chunk[SYNTH_VERT_CHUNK], *rec = record ? v->x + v->used : NULL;
  while (taken < q && tries < most) {
    int64_t m = sr_min64(SYNTH_VERT_CHUNK, most - tries);  // so a record holds `most` at most
    int32_t *x = record ? rec : chunk;
    synth_verticals(r, n, x, m, bits);
    for (int64_t j = 0; j < m && taken < q; j++, tries++) SR_KEEP_VERTICAL((int64_t)x[j]);
    if (record) rec += m;
  }
#undef SR_KEEP_VERTICAL
  if (record) v->used = rec - v->x;
  return count;
}

// Group g's slashes: bands of consecutive offsets (neighbouring diagonals score alike under RoPE, so top-p
// keeps runs of them, not isolated lines) starting log-uniformly on [lo, n): each band's unmarked offsets
// ascending, a word of marks at a time, until the quota is met.
static int64_t draw_group_slashes(synth_ctx *c, sr_mt *r, int64_t q, int64_t lo, double span, int32_t *out,
                                  int64_t count) {
  int64_t n = c->n;
  uint64_t *bits = c->bits;
  for (int64_t taken = 0, tries = 0; taken < q && tries < 16 * q + 64; tries++) {
    double u = sr_mt_uniform(r);
    int64_t x = (int64_t)((double)lo * exp(u * span));
    if (x >= n) x = n - 1;
    if (x < 0) x = 0;
    for (int64_t a = x, end = sr_min64(x + SYNTH_SLASH_BAND, n); a < end && taken < q;) {
      int64_t w = a >> 6, b = sr_min64(end, (w + 1) * 64);
      uint64_t m = (~0ull << (a & 63)) & (~0ull >> (63 - ((b - 1) & 63))), free_bits = ~bits[w] & m;
      for (; free_bits && taken < q; free_bits &= free_bits - 1) {
        int64_t y = w * 64 + __builtin_ctzll(free_bits);
        bits[w] |= 1ull << (y & 63);
        out[count++] = (int32_t)y;
        taken++;
      }
      a = b;
    }
  }
  return count;
}

// Start recording the verticals' streams of a head with `groups` groups (none recorded when their
// generators, 2.5 KB each, cannot be allocated or are more than SYNTH_CACHE_GROUPS).
#define SYNTH_CACHE_GROUPS 4096
static void cache_open(synth_ctx *c, int64_t groups) {
  synth_vert_cache *v = &c->vc;
  v->groups = 0;
  v->used = 0;
  if (groups > SYNTH_CACHE_GROUPS) return;
  if (groups > v->groups_cap) {
    free(v->mt);
    free(v->first);
    free(v->seeded);
    v->mt = malloc((size_t)(groups + SR_MT_LANES) * sizeof *v->mt);
    v->first = malloc((size_t)(groups + 1) * sizeof *v->first);
    v->seeded = malloc((size_t)groups);
    v->groups_cap = v->mt && v->first && v->seeded ? groups : 0;
    if (!v->groups_cap) return;
  }
  memset(v->seeded, 0, (size_t)groups);
  v->first[0] = 0;
  v->groups = (int)groups;
}

// Draw `budget` distinct indices in [0, n): [0, n_struct) always, the rest from the drifting groups
// (verticals: floor(n u^3) or floor(n u); slashes: bands of SYNTH_SLASH_BAND consecutive offsets starting
// log-uniformly on [lo, n)), topped up with the lowest unused indices when draws keep colliding (budgets
// near n). Into out, sorted ascending when `sorted` (else in drawing order from out[n_struct] on, out[0,
// n_struct) left as it was: the calibration pass only sums them). `mode` (verticals only): CACHE_RECORD
// keeps every group's candidates and generator in c->vc, CACHE_REPLAY draws from them (the key and options
// recorded, any budget), CACHE_NONE neither.
static void draw_indices(synth_ctx *c, int32_t *out, int64_t budget, int64_t n_struct, int kind, int64_t lo,
                         uint64_t key, const synth_opts *o, int sorted, int mode) {
  int64_t n = c->n, count = n_struct;
  uint64_t *bits = c->bits;
  if (sorted)  // unsorted draws are only summed, their structure in closed form (vs_pairs_drawn)
    synth_iota(out, n_struct);
  for (int64_t w = 0; w < n_struct / 64; w++) bits[w] = ~0ull;
  for (int64_t i = n_struct / 64 * 64; i < n_struct; i++) bits[i >> 6] |= 1ull << (i & 63);
  int64_t rest = budget - n_struct, L = o->drift_period > 0 ? o->drift_period : 1;
  double span = lo > 0 ? log((double)n / (double)lo) : 0;
  if (kind != KEY_VERT) mode = CACHE_NONE;
  if (mode == CACHE_RECORD) cache_open(c, L);
  if (c->vc.groups != L) mode = CACHE_NONE;  // nothing recorded, or recorded for another drift period
  for (int64_t g0 = 0; g0 < L && (rest > 0 || mode == CACHE_RECORD); g0 += SR_MT_LANES) {
    // The groups' generators are seeded SR_MT_LANES at a time (plan/rng.h), as far as their draws will read.
    int64_t quota[SR_MT_LANES], lanes = sr_min64(SR_MT_LANES, L - g0), any = 0;
    uint32_t seed[SR_MT_LANES];
    int words = 1;
    for (int64_t g = g0; g < g0 + lanes; g++) {
      int64_t q = rest > 0 ? rest / L + (g < rest % L) : 0;
      int64_t epoch = o->drift_period > 0 ? ((int64_t)o->step + g) / L : 0;
      quota[g - g0] = q;
      seed[g - g0] = synth_seed32(key, (uint64_t)kind, (uint64_t)g, (uint64_t)epoch);
      any |= q && !(mode == CACHE_REPLAY && c->vc.seeded[g]);
      // about two outputs a vertical, one a band of slashes (draws that collide read more, on demand)
      if (q) words = sr_max64(words, sr_mt_words_for(kind == KEY_VERT ? 2 * q : q / SYNTH_SLASH_BAND + 1));
    }
    sr_mt *lane = mode == CACHE_NONE ? c->lanes : c->vc.mt + g0;
    if (mode == CACHE_REPLAY) {  // the recorded generators go on; those never seeded start now
      for (int64_t g = g0; any && g < g0 + lanes; g++)
        if (!c->vc.seeded[g]) sr_mt_seed(&lane[g - g0], seed[g - g0]);
    } else if (any) {
      sr_mt_seed_lanes(lane, seed, (int)lanes, words);
    }
    for (int64_t g = g0; g < g0 + lanes; g++) {
      if (mode == CACHE_RECORD) c->vc.seeded[g] = (uint8_t)(any != 0);
      if (kind == KEY_VERT) count = draw_group_verticals(c, &lane[g - g0], (int)g, quota[g - g0], out, count, mode);
      else count = draw_group_slashes(c, &lane[g - g0], quota[g - g0], lo, span, out, count);
      if (mode == CACHE_RECORD && c->vc.groups) c->vc.first[g + 1] = c->vc.used;
    }
  }
  for (int64_t w = 0; count < budget && w * 64 < n; w++)  // the lowest unused indices, word by word
    for (uint64_t free_bits = ~bits[w]; free_bits && count < budget; free_bits &= free_bits - 1) {
      int64_t x = w * 64 + __builtin_ctzll(free_bits);
      if (x >= n) break;
      bits[w] |= 1ull << (x & 63);
      out[count++] = (int32_t)x;
    }
  if (mode == CACHE_REPLAY) c->vc.groups = 0;  // its generators went on: a second replay would differ
  if (sorted) {
    synth_take_sorted(c, out, count, n_struct);
    return;
  }
  // The marks cleared: a word an index, or all in a row where the indices are over an eighth of the words
  if (count - n_struct > (n / 64 + 1) / 8) {
    memset(bits, 0, (size_t)(n / 64 + 1) * sizeof *bits);
    return;
  }
  for (int64_t i = n_struct; i < count; i++) bits[out[i] >> 6] = 0;
  memset(bits, 0, (size_t)(n_struct / 64 + 1) * sizeof *bits);
}

void synth_head_clear(head_pattern *h) {
  free(h->vertical);
  free(h->slash);
  free(h->mask);
  memset(h, 0, sizeof *h);
}

// A VS head of nv verticals and ns slashes (at most n each) into h's arrays, which have room for them; `mode` as
// draw_indices' (CACHE_REPLAY after a calibration draw of the same head recorded its verticals' streams).
static void vs_draw(synth_ctx *c, head_pattern *h, int64_t nv, int64_t ns, uint64_t key, const synth_opts *o,
                    int mode) {
  h->kind = PATTERN_VS;
  int64_t sinks = nv > 0 ? sr_max64(1, sr_min64(64, nv / 8)) : 0;  // the first tokens: attention sinks
  int64_t window = ns > 0 ? sr_max64(1, ns * 3 / 4) : 0;            // offset 0 and the local window
  draw_indices(c, h->vertical, nv, sinks, KEY_VERT, 0, key, o, 1, mode);
  draw_indices(c, h->slash, ns, window, KEY_SLASH, sr_max64(1, window), key, o, 1, CACHE_NONE);
  h->n_vertical = (int32_t)nv;
  h->n_slash = (int32_t)ns;
}

// Budgets clamped to [0, n].
static int64_t clamp_budget(int64_t b, int64_t n) { return sr_max64(0, sr_min64(b, n)); }

// The same head in arrays of its own (h's earlier arrays freed).
static int vs_head(synth_ctx *c, head_pattern *h, int64_t nv, int64_t ns, uint64_t key, const synth_opts *o, int mode,
                   sr_error *e) {
  nv = clamp_budget(nv, c->n);
  ns = clamp_budget(ns, c->n);
  synth_head_clear(h);
  h->kind = PATTERN_VS;
  h->vertical = malloc((size_t)nv * sizeof(int32_t) + 1);
  h->slash = malloc((size_t)ns * sizeof(int32_t) + 1);
  if (!h->vertical || !h->slash) return sr_internal_error(e, 0, "synth: out of memory");
  vs_draw(c, h, nv, ns, key, o, mode);
  return SR_OK;
}

// Add the sum over x[0 .. m) of n - x to vs_pairs_drawn's sum *s: below 2^26 tokens every partial sum is an integer
// below 2^53, exact in a double in any order, so it is summed in 64-bit integers (no chain of dependent double
// additions; the same value) and added once. Longer sequences add each term to *s in order, as before.
static void add_drawn_rows(double *s, const int32_t *x, int64_t m, int64_t n) {
  if (n >= ((int64_t)1 << 26)) {
    for (int64_t i = 0; i < m; i++) *s += (double)(n - x[i]);
    return;
  }
  int64_t sum = 0;
  for (int64_t i = 0; i < m; i++) sum += n - x[i];
  *s += (double)sum;
}

// Kept pairs of the head vs_head would draw, ignoring the few pairs both a slash and a vertical keep (for
// budget calibration): sum over its indices x of n - x, drawn into c->tmp and not sorted. The sum of at
// most 2n integers below n is exact in a double for n < 2^26 tokens, in any order. `mode` CACHE_RECORD keeps
// the verticals' streams for the head's final draw.
static double vs_pairs_drawn(synth_ctx *c, int64_t nv, int64_t ns, uint64_t key, const synth_opts *o, int mode) {
  int64_t n = c->n;
  nv = sr_max64(0, sr_min64(nv, n));
  ns = sr_max64(0, sr_min64(ns, n));
  int64_t sinks = nv > 0 ? sr_max64(1, sr_min64(64, nv / 8)) : 0, window = ns > 0 ? sr_max64(1, ns * 3 / 4) : 0;
  // [0, m) is always drawn: its n - x sum to m n - m (m - 1) / 2
  double s = (double)window * (double)n - (double)window * (double)(window - 1) / 2 + (double)sinks * (double)n -
             (double)sinks * (double)(sinks - 1) / 2;
  draw_indices(c, c->tmp, ns, window, KEY_SLASH, sr_max64(1, window), key, o, 0, CACHE_NONE);
  add_drawn_rows(&s, c->tmp + window, ns - window, n);
  draw_indices(c, c->tmp, nv, sinks, KEY_VERT, 0, key, o, 0, mode);
  add_drawn_rows(&s, c->tmp + sinks, nv - sinks, n);
  return s;
}

// ---------------------------------------------------------------------------------------------
// a source's heads one at a time: each head's budgets, or its top-p target and the calibration draw that turns it
// into budgets, then the head; the whole pattern's generators draw every head this way

void synth_vs_source_free(synth_vs_source *s) {
  free(s->target);
  free(s->phi);
  free(s->nv);
  free(s->ns);
  memset(s, 0, sizeof *s);
}

// Head x's budgets (clamped) and the cache mode of its draw: given, or from its top-p target through one calibration
// step (the budgets scale linearly with the pairs, so a first draw's pairs correct them; the final draw reads its
// verticals' candidates from the calibration's streams, the same seeds, instead of drawing them again: the same
// indices, about half the draws).
static void head_budgets(const synth_vs_source *s, synth_ctx *c, int64_t x, uint64_t key, int64_t *nv, int64_t *ns,
                         int *mode) {
  int64_t n = s->n_tokens;
  *mode = CACHE_NONE;
  if (!s->target) {
    *nv = clamp_budget(s->nv[x], n);
    *ns = clamp_budget(s->ns[x], n);
    return;
  }
  double target = s->target[x], phi = s->phi[x];
  double total = target / (0.75 * (double)n);  // each index keeps about 3/4 of a column or diagonal
  total = fmin(total, 2.0 * (double)n);
  double got = vs_pairs_drawn(c, (int64_t)llround(total * (1 - phi)), (int64_t)llround(total * phi), key, &s->o,
                              s->redraw ? CACHE_NONE : CACHE_RECORD);
  if (got > 0) total *= target / got;
  total = fmin(total, 2.0 * (double)n);
  *nv = clamp_budget((int64_t)llround(total * (1 - phi)), n);
  *ns = clamp_budget((int64_t)llround(total * phi), n);
  *mode = s->redraw ? CACHE_NONE : CACHE_REPLAY;
}

void synth_vs_source_draw(const synth_vs_source *s, synth_ctx *c, int layer, int head, head_pattern *h) {
  int64_t nv, ns;
  int mode;
  uint64_t key = synth_head_key(&s->o, layer, head);
  head_budgets(s, c, (int64_t)layer * s->heads + head, key, &nv, &ns, &mode);
  vs_draw(c, h, nv, ns, key, &s->o, mode);
}

typedef struct {
  pattern *p;
  const synth_vs_source *s;
  synth_pool pool;
} source_job;

static int source_item(void *ctx, int x, int thread, sr_error *e) {
  source_job *j = ctx;
  synth_ctx *c = &j->pool.c[thread];
  int l = x / j->p->heads, h = x % j->p->heads, mode;
  int64_t nv, ns;
  uint64_t key = synth_head_key(&j->s->o, l, h);
  head_budgets(j->s, c, x, key, &nv, &ns, &mode);
  return vs_head(c, pattern_head(j->p, l, h), nv, ns, key, &j->s->o, mode, e);
}

// Every head of p from source s (p's shape).
static int source_fill(pattern *p, const synth_vs_source *s, sr_error *e) {
  int items = p->layers * p->heads;
  source_job j = {p, s, {0}};
  int rc = synth_pool_open(&j.pool, p->n_tokens, items, e);
  if (rc) return rc;
  rc = sr_parallel_for(items, j.pool.n, source_item, &j, e);
  synth_pool_close(&j.pool);
  return rc;
}

int synth_vs_budgets_source(int layers, int heads, int64_t n_tokens, const int32_t *n_vertical, const int32_t *n_slash,
                            const synth_opts *o, synth_vs_source *out, sr_error *e) {
  size_t items = (size_t)layers * (size_t)heads;
  *out = (synth_vs_source){layers, heads, n_tokens, *o, 0, NULL, NULL, malloc(items * sizeof(int32_t) + 1),
                           malloc(items * sizeof(int32_t) + 1)};
  if (!out->nv || !out->ns) {
    synth_vs_source_free(out);
    return sr_internal_error(e, 0, "synth: out of memory");
  }
  memcpy(out->nv, n_vertical, items * sizeof(int32_t));
  memcpy(out->ns, n_slash, items * sizeof(int32_t));
  return SR_OK;
}

int synth_vs_budgets(pattern *p, const int32_t *n_vertical, const int32_t *n_slash, const synth_opts *o, sr_error *e) {
  synth_vs_source s;
  int rc = synth_vs_budgets_source(p->layers, p->heads, p->n_tokens, n_vertical, n_slash, o, &s, e);
  if (!rc) rc = source_fill(p, &s, e);
  synth_vs_source_free(&s);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// presets

// Published fixed budgets of MTraining for Qwen2.5-3B: (vertical, slash) x number of heads
// (docs/design.md, "The published Qwen2.5-3B budget mix").
static const struct {
  int32_t v, s, heads;
} qwen25_3b_mix[] = {{1000, 6096, 310}, {3500, 100, 107}, {30, 800, 96}, {100, 800, 44}, {500, 700, 17}, {100, 750, 2}};

int synth_vs_preset(pattern *p, const char *name, const synth_opts *o, sr_error *e) {
  synth_vs_source s;
  int rc = synth_vs_preset_source(p->layers, p->heads, p->n_tokens, name, o, &s, e);
  if (!rc) rc = source_fill(p, &s, e);
  synth_vs_source_free(&s);
  return rc;
}

int synth_vs_preset_source(int layers, int heads, int64_t n_tokens, const char *name, const synth_opts *o,
                           synth_vs_source *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (strcmp(name, "qwen2.5-3b") != 0)
    return sr_input_error(e, NULL, "pattern", "unknown VS preset '%s' (known: qwen2.5-3b)", name);
  const int n_mix = (int)(sizeof qwen25_3b_mix / sizeof qwen25_3b_mix[0]);
  int64_t total = (int64_t)layers * heads, published = 0, given = 0;
  for (int i = 0; i < n_mix; i++) published += qwen25_3b_mix[i].heads;
  // Largest-remainder apportionment of the mix over this model's heads (identity for 576 heads).
  int64_t cnt[8];
  double rem[8];
  for (int i = 0; i < n_mix; i++) {
    double exact = (double)qwen25_3b_mix[i].heads * (double)total / (double)published;
    cnt[i] = (int64_t)floor(exact);
    rem[i] = exact - (double)cnt[i];
    given += cnt[i];
  }
  while (given < total) {
    int best = 0;
    for (int i = 1; i < n_mix; i++)
      if (rem[i] > rem[best]) best = i;
    cnt[best]++;
    rem[best] = -1;
    given++;
  }
  int32_t *kind = malloc((size_t)total * sizeof *kind), *nv = malloc((size_t)total * sizeof *nv),
          *ns = malloc((size_t)total * sizeof *ns);
  sr_mt r;
  int rc = SR_OK;
  if (!kind || !nv || !ns) {
    rc = sr_internal_error(e, 0, "synth: out of memory");
  } else {
    int64_t x = 0;
    for (int i = 0; i < n_mix; i++)
      for (int64_t k = 0; k < cnt[i]; k++) kind[x++] = i;
    synth_reseed(&r, o->seed, KEY_PRESET, 0, 0);  // the assignment is step-independent: budgets are per head
    for (int64_t i = total - 1; i > 0; i--) {  // gsl_ran_shuffle's Fisher-Yates, draw for draw
      int64_t j = sr_mt_uniform_int(&r, (uint32_t)(i + 1));
      int32_t t = kind[i];
      kind[i] = kind[j];
      kind[j] = t;
    }
    for (x = 0; x < total; x++) {
      nv[x] = qwen25_3b_mix[kind[x]].v;
      ns[x] = qwen25_3b_mix[kind[x]].s;
    }
    rc = synth_vs_budgets_source(layers, heads, n_tokens, nv, ns, o, out, e);
  }
  free(kind);
  free(nv);
  free(ns);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// top-p-like

double synth_topp_layer_sparsity(uint64_t seed, int layer, double mass) {
  sr_mt r;
  synth_reseed(&r, seed, KEY_TOPP, (uint64_t)layer, 0);
  double u = sr_mt_uniform(&r);
  // u^0.8 has mean 1/1.8, so the mean sparsity is 0.87 + 0.126/1.8 = 0.94 (MTraining's reported average);
  // a higher mass keeps more: density scales like log(1 - mass) / log(0.1), 1 at the default 0.9.
  double s = 0.87 + 0.126 * pow(u, 0.8);
  double density = (1 - s) * log(1 - mass) / log(0.1);
  return density >= 1 ? 0 : 1 - density;
}

int synth_vs_topp_source(int layers, int heads, int64_t n_tokens, double mass, const synth_opts *o, int redraw,
                         synth_vs_source *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (!(mass > 0 && mass < 1)) return sr_input_error(e, NULL, "pattern", "top-p mass %g must be in (0, 1)", mass);
  int items = layers * heads;
  int64_t n = n_tokens;
  double causal = (double)n * (double)(n + 1) / 2;
  double *w = malloc((size_t)heads * sizeof *w + 1), *phi = malloc((size_t)items * sizeof *phi + 1),
         *target = malloc((size_t)items * sizeof *target + 1);
  if (!w || !phi || !target) {
    free(w);
    free(phi);
    free(target);
    return sr_internal_error(e, 0, "synth: out of memory");
  }
  sr_mt r;
  for (int l = 0; l < layers; l++) {
    double density = 1 - synth_topp_layer_sparsity(o->seed, l, mass), wsum = 0;
    synth_reseed(&r, o->seed, KEY_TOPP_HEAD, (uint64_t)l, 0);
    for (int h = 0; h < heads; h++) {  // heads differ around the layer's density; the mean is kept
      w[h] = 0.4 + 1.2 * sr_mt_uniform(&r);
      phi[l * heads + h] = 0.3 + 0.6 * sr_mt_uniform(&r);  // share of the budget on slashes
      wsum += w[h];
    }
    for (int h = 0; h < heads; h++) target[l * heads + h] = fmin(1.0, density * w[h] * heads / wsum) * causal;
  }
  free(w);
  *out = (synth_vs_source){layers, heads, n_tokens, *o, redraw, target, phi, NULL, NULL};
  return SR_OK;
}

static int vs_topp(pattern *p, double mass, const synth_opts *o, int redraw, sr_error *e) {
  synth_vs_source s;
  int rc = synth_vs_topp_source(p->layers, p->heads, p->n_tokens, mass, o, redraw, &s, e);
  if (!rc) rc = source_fill(p, &s, e);
  synth_vs_source_free(&s);
  return rc;
}

int synth_vs_topp(pattern *p, double mass, const synth_opts *o, sr_error *e) { return vs_topp(p, mass, o, 0, e); }

int synth_vs_topp_redrawn(pattern *p, double mass, const synth_opts *o, sr_error *e) { return vs_topp(p, mass, o, 1, e); }

// ---------------------------------------------------------------------------------------------
// ANCHORS' VS-like mask

typedef struct {
  pattern *p;
  int64_t s0, w0, n_vert;
  const synth_opts *o;
  synth_pool pool;
} like_job;

static int like_item(void *ctx, int x, int thread, sr_error *e) {
  like_job *j = ctx;
  int l = x / j->p->heads, h = x % j->p->heads;
  int64_t n = j->p->n_tokens, s0 = j->s0, w0 = j->w0;
  synth_ctx *c = &j->pool.c[thread];
  head_pattern *hp = pattern_head(j->p, l, h);
  synth_head_clear(hp);
  hp->kind = PATTERN_VS;
  // draws may repeat: the marks keep their union, collected as first marked (at most n of them)
  int64_t most = sr_min64(n, s0 + j->n_vert);
  hp->vertical = malloc((size_t)(most + 1) * sizeof(int32_t));
  hp->slash = malloc((size_t)(w0 + 1) * sizeof(int32_t));
  if (!hp->vertical || !hp->slash) return sr_internal_error(e, 0, "synth: out of memory");
  int64_t m = 0;
  for (int64_t k = 0; k < s0; k++) synth_mark(c->bits, k), hp->vertical[m++] = (int32_t)k;
  synth_reseed(&c->r, j->o->seed, KEY_LIKE, (uint64_t)l, (uint64_t)h);
  for (int64_t x2 = 0; x2 < j->n_vert; x2++) {
    double u = sr_mt_uniform(&c->r);
    int64_t v = sr_min64(n - 1, (int64_t)(n * u * u * u));
    if (!synth_mark(c->bits, v)) hp->vertical[m++] = (int32_t)v;
  }
  synth_take_sorted(c, hp->vertical, m, s0);
  hp->n_vertical = (int32_t)m;
  for (int64_t d = 0; d < w0; d++) hp->slash[d] = (int32_t)d;
  hp->n_slash = (int32_t)w0;
  return SR_OK;
}

int synth_vs_like(pattern *p, int64_t sinks, int64_t window, int64_t n_vert, const synth_opts *o, sr_error *e) {
  if (sinks < 0 || window < 0 || n_vert < 0)
    return sr_input_error(e, NULL, "pattern", "vs-like needs sinks, window and verticals >= 0");
  // every vertical is drawn, one random number each (6.7e17 of them once also overflowed the size of the
  // array holding them; found by tests/fuzz/fuzz_pattern_spec.c)
  if (n_vert > VS_LIKE_MAX_VERTICALS)
    return sr_input_error(e, NULL, "pattern", "vs-like: %lld verticals a head, at most %d", (long long)n_vert,
                          VS_LIKE_MAX_VERTICALS);
  int items = p->layers * p->heads;
  like_job j = {p, sr_min64(sinks, p->n_tokens), sr_min64(window, p->n_tokens), n_vert, o, {0}};
  int rc = synth_pool_open(&j.pool, p->n_tokens, items, e);
  if (rc) return rc;
  rc = sr_parallel_for(items, j.pool.n, like_item, &j, e);
  synth_pool_close(&j.pool);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// block-sparse

typedef struct {
  double key;
  int64_t c;
} hot_col;

static int cmp_hot(const void *a, const void *b) {
  const hot_col *x = a, *y = b;
  if (x->key != y->key) return x->key > y->key ? -1 : 1;
  return (x->c > y->c) - (x->c < y->c);
}

// One block head of the given density. Column blocks are ranked by log-weight + Gumbel noise (weighted
// sampling without replacement): weight favours early blocks and a few hot spots; the noise drifts by group.
static int block_head(synth_ctx *c, head_pattern *h, double density, int32_t B, uint64_t key, const synth_opts *o,
                      hot_col *hot, sr_error *e) {
  int64_t n = c->n, nb = sr_cdiv(n, B), rw = sr_cdiv(nb, 64);
  synth_head_clear(h);
  h->kind = PATTERN_BLOCK;
  h->block = B;
  h->n_blocks = nb;
  h->row_words = rw;
  h->mask = calloc((size_t)(nb * rw) + 1, sizeof(uint64_t));
  if (!h->mask) return sr_internal_error(e, 0, "synth: out of memory for a %lld x %lld block mask", (long long)nb,
                                         (long long)nb);
  synth_reseed(&c->r, key, KEY_BLOCK, 0, 0);
  int64_t spots[8], n_spots = 1 + (int64_t)sr_mt_uniform_int(&c->r, 4);
  for (int64_t i = 0; i < n_spots; i++) spots[i] = (int64_t)sr_mt_uniform_int(&c->r, (uint32_t)nb);
  double width = 1 + (double)nb / 32;
  for (int64_t col = 0; col < nb; col++) {
    double wgt = 1.0 / (1.0 + (double)col / 4.0);
    for (int64_t i = 0; i < n_spots; i++) wgt += exp(-fabs((double)(col - spots[i])) / width);
    hot[col] = (hot_col){.key = log(wgt), .c = col};
  }
  int64_t L = o->drift_period > 0 ? o->drift_period : 1;
  for (int64_t g = 0; g < L && g < nb; g++) {
    int64_t epoch = o->drift_period > 0 ? ((int64_t)o->step + g) / L : 0;
    synth_reseed(&c->r, key, KEY_BLOCK_NOISE, (uint64_t)g, (uint64_t)epoch);
    for (int64_t col = g; col < nb; col += L) hot[col].key -= log(-log(sr_mt_uniform_pos(&c->r)));
  }
  qsort(hot, (size_t)nb, sizeof *hot, cmp_hot);
  for (int64_t p = 0; p < nb; p++) {
    uint64_t *row = h->mask + p * rw;
    int64_t quota = sr_max64(1, sr_min64(p + 1, (int64_t)llround(density * (double)(p + 1)))), kept = 0;
#define KEEP(col)                                          \
  do {                                                     \
    if (!((row[(col) / 64] >> ((col) % 64)) & 1u)) {       \
      row[(col) / 64] |= 1ull << ((col) % 64);             \
      kept++;                                              \
    }                                                      \
  } while (0)
    KEEP(p);
    if (kept < quota) KEEP(0);
    if (kept < quota && p > 0) KEEP(p - 1);
    for (int64_t i = 0; i < nb && kept < quota; i++)
      if (hot[i].c <= p) KEEP(hot[i].c);
#undef KEEP
  }
  return SR_OK;
}

typedef struct {
  pattern *p;
  const double *density;
  int32_t B;
  const synth_opts *o;
  synth_pool pool;
  hot_col **hot;  // [threads] column ranking scratch
} block_job;

static int block_item(void *ctx, int x, int thread, sr_error *e) {
  block_job *j = ctx;
  int l = x / j->p->heads, h = x % j->p->heads;
  return block_head(&j->pool.c[thread], pattern_head(j->p, l, h), j->density[x], j->B, synth_head_key(j->o, l, h), j->o,
                    j->hot[thread], e);
}

static int block_heads(pattern *p, const double *density, int32_t B, const synth_opts *o, sr_error *e) {
  if (B < 1) return sr_input_error(e, NULL, "pattern", "block size %d must be >= 1", B);
  int items = p->layers * p->heads;
  block_job j = {p, density, B, o, {0}, NULL};
  int rc = synth_pool_open(&j.pool, p->n_tokens, items, e);
  if (rc) return rc;
  j.hot = calloc((size_t)j.pool.n, sizeof *j.hot);
  for (int t = 0; j.hot && t < j.pool.n && !rc; t++)
    if (!(j.hot[t] = malloc((size_t)sr_cdiv(p->n_tokens, B) * sizeof **j.hot + 1))) rc = -1;
  if (!j.hot || rc) rc = sr_internal_error(e, 0, "synth: out of memory");
  else rc = sr_parallel_for(items, j.pool.n, block_item, &j, e);
  for (int t = 0; j.hot && t < j.pool.n; t++) free(j.hot[t]);
  free(j.hot);
  synth_pool_close(&j.pool);
  return rc;
}

int synth_block(pattern *p, double density, int32_t block, const synth_opts *o, sr_error *e) {
  if (!(density > 0 && density <= 1))
    return sr_input_error(e, NULL, "pattern", "block density %g must be in (0, 1]", density);
  int64_t total = (int64_t)p->layers * p->heads;
  double *d = malloc((size_t)total * sizeof *d);
  if (!d) return sr_internal_error(e, 0, "synth: out of memory");
  for (int64_t x = 0; x < total; x++) d[x] = density;
  int rc = block_heads(p, d, block, o, e);
  free(d);
  return rc;
}

typedef struct {
  double recall;
  int head;
} head_recall;

static int cmp_recall(const void *a, const void *b) {
  const head_recall *x = a, *y = b;
  if (x->recall != y->recall) return x->recall > y->recall ? -1 : 1;
  return (x->head > y->head) - (x->head < y->head);
}

int synth_adaspa(pattern *p, double sparsity, int32_t block, const synth_opts *o, sr_error *e) {
  if (!(sparsity >= 0 && sparsity < 1))
    return sr_input_error(e, NULL, "pattern", "adaspa sparsity %g must be in [0, 1)", sparsity);
  int64_t total = (int64_t)p->layers * p->heads;
  double *d = malloc((size_t)total * sizeof *d);
  head_recall *hr = malloc((size_t)p->heads * sizeof *hr);
  sr_mt r;
  int rc = SR_OK;
  if (!d || !hr) rc = sr_internal_error(e, 0, "synth: out of memory");
  for (int l = 0; l < p->layers && !rc; l++) {
    synth_reseed(&r, o->seed, KEY_ADASPA, (uint64_t)l, 0);
    int n_high = 0;
    for (int h = 0; h < p->heads; h++) {
      hr[h] = (head_recall){.recall = 0.5 + 0.5 * sr_mt_uniform(&r), .head = h};
      n_high += hr[h].recall > 0.8;
    }
    if (n_high > p->heads / 2) n_high = p->heads / 2;  // the high and the low groups must not overlap
    qsort(hr, (size_t)p->heads, sizeof *hr, cmp_recall);
    // AdaSpa's head-adaptive rule keeps the mean sparsity: n heads at (1+s)/2 and n at (3s-1)/2.
    for (int x = 0; x < p->heads; x++) {
      double s = sparsity;
      if (x < n_high) s = (1 + sparsity) / 2;
      else if (x >= p->heads - n_high) s = fmax(0.0, (3 * sparsity - 1) / 2);
      d[(int64_t)l * p->heads + hr[x].head] = 1 - s;
    }
  }
  if (!rc) rc = block_heads(p, d, block, o, e);
  free(d);
  free(hr);
  return rc;
}
