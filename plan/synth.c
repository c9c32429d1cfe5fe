// synth.c — seeded synthetic patterns (see synth.h): vertical-slash with budgets, presets and top-p-like
// sparsity, ANCHORS' VS-like mask, clustered block-sparse and AdaSpa-like head-adaptive block-sparse.
//
// Every random draw comes from GSL's mt19937, reseeded per (layer, head, index group, drift epoch) from a
// splitmix64 hash of those numbers, so a head never depends on how many draws another head made.
#include "plan/synth.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"

// ---------------------------------------------------------------------------------------------
// seeding

static uint64_t mix64(uint64_t x) {  // splitmix64's finaliser (Steele, Lea, Flood 2014)
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static void reseed(gsl_rng *r, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t h = mix64(a ^ mix64(b ^ mix64(c ^ mix64(d))));
  gsl_rng_set(r, (unsigned long)(h & 0xffffffffu));
}

synth_opts synth_defaults(uint64_t seed, int step) {
  synth_opts o = {.seed = seed, .step = step, .drift_period = SYNTH_DRIFT_PERIOD};
  return o;
}

enum { KEY_VERT = 1, KEY_SLASH, KEY_TOPP, KEY_TOPP_HEAD, KEY_LIKE, KEY_BLOCK, KEY_BLOCK_NOISE, KEY_ADASPA, KEY_PRESET };

typedef struct {
  gsl_rng *r;
  uint8_t *mark;  // [n] scratch, all zero between uses
  int32_t *tmp;   // [n] scratch for sorting
  int64_t n;
} synth_ctx;

static int ctx_init(synth_ctx *c, int64_t n, sr_error *e) {
  c->n = n;
  c->r = gsl_rng_alloc(gsl_rng_mt19937);
  c->mark = calloc((size_t)n + 1, 1);
  c->tmp = malloc(((size_t)n + 1) * sizeof *c->tmp);
  if (!c->r || !c->mark || !c->tmp) {
    if (c->r) gsl_rng_free(c->r);
    free(c->mark);
    free(c->tmp);
    return sr_internal_error(e, 0, "synth: out of memory for %lld tokens", (long long)n);
  }
  return SR_OK;
}

static void ctx_free(synth_ctx *c) {
  gsl_rng_free(c->r);
  free(c->mark);
  free(c->tmp);
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static uint64_t head_key(const synth_opts *o, int layer, int head) {
  return mix64(o->seed ^ mix64(((uint64_t)(uint32_t)layer << 32) | (uint32_t)head));
}

// ---------------------------------------------------------------------------------------------
// vertical-slash heads

// Sort non-negative indices ascending: LSD radix sort, 8 bits a pass, only as many passes as the
// largest index needs (indices are below N), through c->tmp.
static void sort_indices(synth_ctx *c, int32_t *a, int64_t n) {
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

// Draw `budget` distinct indices in [0, n): [0, n_struct) always, the rest from the drifting groups
// (verticals: floor(n u^3) or floor(n u); slashes: bands of SYNTH_SLASH_BAND consecutive offsets starting
// log-uniformly on [lo, n)), topped up with the lowest
// unused indices when draws keep colliding (budgets near n). Sorted ascending into out.
static void draw_indices(synth_ctx *c, int32_t *out, int64_t budget, int64_t n_struct, int kind, int64_t lo,
                         uint64_t key, const synth_opts *o) {
  int64_t n = c->n, count = 0;
  for (int64_t i = 0; i < n_struct; i++) {
    out[count++] = (int32_t)i;
    c->mark[i] = 1;
  }
  int64_t rest = budget - n_struct, L = o->drift_period > 0 ? o->drift_period : 1;
  double span = lo > 0 ? log((double)n / (double)lo) : 0;
  for (int64_t g = 0; g < L && rest > 0; g++) {
    int64_t quota = rest / L + (g < rest % L);
    if (!quota) continue;
    int64_t epoch = o->drift_period > 0 ? ((int64_t)o->step + g) / L : 0;
    reseed(c->r, key, (uint64_t)kind, (uint64_t)g, (uint64_t)epoch);
    for (int64_t taken = 0, tries = 0; taken < quota && tries < 16 * quota + 64; tries++) {
      double u = gsl_rng_uniform(c->r);
      int64_t x;
      if (kind == KEY_VERT) x = gsl_rng_uniform(c->r) < 0.75 ? (int64_t)(n * u * u * u) : (int64_t)(n * u);
      else x = (int64_t)((double)lo * exp(u * span));
      if (x >= n) x = n - 1;
      if (x < 0) x = 0;
      // Slashes come in bands of consecutive offsets (neighbouring diagonals score alike under RoPE,
      // so top-p keeps runs of them, not isolated lines); verticals are single columns.
      int64_t run = kind == KEY_VERT ? 1 : SYNTH_SLASH_BAND;
      for (int64_t j = 0; j < run && taken < quota && x + j < n; j++) {
        if (c->mark[x + j]) continue;
        c->mark[x + j] = 1;
        out[count++] = (int32_t)(x + j);
        taken++;
      }
    }
  }
  for (int64_t x = 0; count < budget && x < n; x++)
    if (!c->mark[x]) {
      c->mark[x] = 1;
      out[count++] = (int32_t)x;
    }
  for (int64_t i = 0; i < count; i++) c->mark[out[i]] = 0;
  sort_indices(c, out, count);
}

static void head_clear(head_pattern *h) {
  free(h->vertical);
  free(h->slash);
  free(h->mask);
  memset(h, 0, sizeof *h);
}

static int vs_head(synth_ctx *c, head_pattern *h, int64_t nv, int64_t ns, uint64_t key, const synth_opts *o,
                   sr_error *e) {
  int64_t n = c->n;
  nv = sr_max64(0, sr_min64(nv, n));
  ns = sr_max64(0, sr_min64(ns, n));
  head_clear(h);
  h->kind = PATTERN_VS;
  h->vertical = malloc((size_t)nv * sizeof(int32_t) + 1);
  h->slash = malloc((size_t)ns * sizeof(int32_t) + 1);
  if (!h->vertical || !h->slash) return sr_internal_error(e, 0, "synth: out of memory");
  int64_t sinks = nv > 0 ? sr_max64(1, sr_min64(64, nv / 8)) : 0;  // the first tokens: attention sinks
  int64_t window = ns > 0 ? sr_max64(1, ns * 3 / 4) : 0;            // offset 0 and the local window
  draw_indices(c, h->vertical, nv, sinks, KEY_VERT, 0, key, o);
  draw_indices(c, h->slash, ns, window, KEY_SLASH, sr_max64(1, window), key, o);
  h->n_vertical = (int32_t)nv;
  h->n_slash = (int32_t)ns;
  return SR_OK;
}

int synth_vs_budgets(pattern *p, const int32_t *n_vertical, const int32_t *n_slash, const synth_opts *o, sr_error *e) {
  synth_ctx c;
  int rc = ctx_init(&c, p->n_tokens, e);
  if (rc) return rc;
  for (int l = 0; l < p->layers && !rc; l++)
    for (int h = 0; h < p->heads && !rc; h++) {
      int64_t x = (int64_t)l * p->heads + h;
      rc = vs_head(&c, pattern_head(p, l, h), n_vertical[x], n_slash[x], head_key(o, l, h), o, e);
    }
  ctx_free(&c);
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
  if (strcmp(name, "qwen2.5-3b") != 0)
    return sr_input_error(e, NULL, "pattern", "unknown VS preset '%s' (known: qwen2.5-3b)", name);
  const int n_mix = (int)(sizeof qwen25_3b_mix / sizeof qwen25_3b_mix[0]);
  int64_t total = (int64_t)p->layers * p->heads, published = 0, given = 0;
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
  gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
  int rc = SR_OK;
  if (!kind || !nv || !ns || !r) {
    rc = sr_internal_error(e, 0, "synth: out of memory");
  } else {
    int64_t x = 0;
    for (int i = 0; i < n_mix; i++)
      for (int64_t k = 0; k < cnt[i]; k++) kind[x++] = i;
    reseed(r, o->seed, KEY_PRESET, 0, 0);  // the assignment is step-independent: budgets are per head
    gsl_ran_shuffle(r, kind, (size_t)total, sizeof *kind);
    for (x = 0; x < total; x++) {
      nv[x] = qwen25_3b_mix[kind[x]].v;
      ns[x] = qwen25_3b_mix[kind[x]].s;
    }
    rc = synth_vs_budgets(p, nv, ns, o, e);
  }
  if (r) gsl_rng_free(r);
  free(kind);
  free(nv);
  free(ns);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// top-p-like

double synth_topp_layer_sparsity(uint64_t seed, int layer, double mass) {
  gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
  if (!r) return 0.94;
  reseed(r, seed, KEY_TOPP, (uint64_t)layer, 0);
  double u = gsl_rng_uniform(r);
  gsl_rng_free(r);
  // u^0.8 has mean 1/1.8, so the mean sparsity is 0.87 + 0.126/1.8 = 0.94 (MTraining's reported average);
  // a higher mass keeps more: density scales like log(1 - mass) / log(0.1), 1 at the default 0.9.
  double s = 0.87 + 0.126 * pow(u, 0.8);
  double density = (1 - s) * log(1 - mass) / log(0.1);
  return density >= 1 ? 0 : 1 - density;
}

// Kept pairs of a VS head ignoring the few pairs both a slash and a vertical keep (for budget calibration).
static double vs_pairs_estimate(const head_pattern *h, int64_t n) {
  double s = 0;
  for (int32_t i = 0; i < h->n_slash; i++) s += (double)(n - h->slash[i]);
  for (int32_t i = 0; i < h->n_vertical; i++) s += (double)(n - h->vertical[i]);
  return s;
}

int synth_vs_topp(pattern *p, double mass, const synth_opts *o, sr_error *e) {
  if (!(mass > 0 && mass < 1)) return sr_input_error(e, NULL, "pattern", "top-p mass %g must be in (0, 1)", mass);
  synth_ctx c;
  int rc = ctx_init(&c, p->n_tokens, e);
  if (rc) return rc;
  int64_t n = p->n_tokens;
  double causal = (double)n * (double)(n + 1) / 2;
  double *w = malloc((size_t)p->heads * sizeof *w), *phi = malloc((size_t)p->heads * sizeof *phi);
  if (!w || !phi) rc = sr_internal_error(e, 0, "synth: out of memory");
  for (int l = 0; l < p->layers && !rc; l++) {
    double density = 1 - synth_topp_layer_sparsity(o->seed, l, mass), wsum = 0;
    reseed(c.r, o->seed, KEY_TOPP_HEAD, (uint64_t)l, 0);
    for (int h = 0; h < p->heads; h++) {  // heads differ around the layer's density; the mean is kept
      w[h] = 0.4 + 1.2 * gsl_rng_uniform(c.r);
      phi[h] = 0.3 + 0.6 * gsl_rng_uniform(c.r);  // share of the budget on slashes
      wsum += w[h];
    }
    for (int h = 0; h < p->heads && !rc; h++) {
      double target = fmin(1.0, density * w[h] * p->heads / wsum) * causal;
      double total = target / (0.75 * (double)n);  // each index keeps about 3/4 of a column or diagonal
      head_pattern *hp = pattern_head(p, l, h);
      uint64_t key = head_key(o, l, h);
      for (int pass = 0; pass < 2 && !rc; pass++) {
        total = fmin(total, 2.0 * (double)n);
        rc = vs_head(&c, hp, (int64_t)llround(total * (1 - phi[h])), (int64_t)llround(total * phi[h]), key, o, e);
        double got = vs_pairs_estimate(hp, n);
        if (got > 0) total *= target / got;  // one calibration step: budgets scale linearly with the pairs
      }
    }
  }
  free(w);
  free(phi);
  ctx_free(&c);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// ANCHORS' VS-like mask

int synth_vs_like(pattern *p, int64_t sinks, int64_t window, int64_t n_vert, const synth_opts *o, sr_error *e) {
  if (sinks < 0 || window < 0 || n_vert < 0)
    return sr_input_error(e, NULL, "pattern", "vs-like needs sinks, window and verticals >= 0");
  // every vertical is drawn, one random number each (6.7e17 of them once also overflowed the size of the
  // array holding them; found by tests/fuzz/fuzz_pattern_spec.c)
  if (n_vert > VS_LIKE_MAX_VERTICALS)
    return sr_input_error(e, NULL, "pattern", "vs-like: %lld verticals a head, at most %d", (long long)n_vert,
                          VS_LIKE_MAX_VERTICALS);
  synth_ctx c;
  int rc = ctx_init(&c, p->n_tokens, e);
  if (rc) return rc;
  int64_t n = p->n_tokens, s0 = sr_min64(sinks, n), w0 = sr_min64(window, n);
  for (int l = 0; l < p->layers && !rc; l++)
    for (int h = 0; h < p->heads && !rc; h++) {
      head_pattern *hp = pattern_head(p, l, h);
      head_clear(hp);
      hp->kind = PATTERN_VS;
      // draws may repeat: the mask keeps their union, collected as first marked (at most n of them)
      int64_t most = sr_min64(n, s0 + n_vert);
      hp->vertical = malloc((size_t)(most + 1) * sizeof(int32_t));
      hp->slash = malloc((size_t)(w0 + 1) * sizeof(int32_t));
      if (!hp->vertical || !hp->slash) {
        rc = sr_internal_error(e, 0, "synth: out of memory");
        break;
      }
      int64_t m = 0;
      for (int64_t k = 0; k < s0; k++) c.mark[k] = 1, hp->vertical[m++] = (int32_t)k;
      reseed(c.r, o->seed, KEY_LIKE, (uint64_t)l, (uint64_t)h);
      for (int64_t x = 0; x < n_vert; x++) {
        double u = gsl_rng_uniform(c.r);
        int64_t v = sr_min64(n - 1, (int64_t)(n * u * u * u));
        if (!c.mark[v]) c.mark[v] = 1, hp->vertical[m++] = (int32_t)v;
      }
      for (int64_t x = 0; x < m; x++) c.mark[hp->vertical[x]] = 0;
      qsort(hp->vertical, (size_t)m, sizeof(int32_t), cmp_i32);
      hp->n_vertical = (int32_t)m;
      for (int64_t d = 0; d < w0; d++) hp->slash[d] = (int32_t)d;
      hp->n_slash = (int32_t)w0;
    }
  ctx_free(&c);
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
  head_clear(h);
  h->kind = PATTERN_BLOCK;
  h->block = B;
  h->n_blocks = nb;
  h->row_words = rw;
  h->mask = calloc((size_t)(nb * rw) + 1, sizeof(uint64_t));
  if (!h->mask) return sr_internal_error(e, 0, "synth: out of memory for a %lld x %lld block mask", (long long)nb,
                                         (long long)nb);
  reseed(c->r, key, KEY_BLOCK, 0, 0);
  int64_t spots[8], n_spots = 1 + (int64_t)gsl_rng_uniform_int(c->r, 4);
  for (int64_t i = 0; i < n_spots; i++) spots[i] = (int64_t)gsl_rng_uniform_int(c->r, (unsigned long)nb);
  double width = 1 + (double)nb / 32;
  for (int64_t col = 0; col < nb; col++) {
    double wgt = 1.0 / (1.0 + (double)col / 4.0);
    for (int64_t i = 0; i < n_spots; i++) wgt += exp(-fabs((double)(col - spots[i])) / width);
    hot[col] = (hot_col){.key = log(wgt), .c = col};
  }
  int64_t L = o->drift_period > 0 ? o->drift_period : 1;
  for (int64_t g = 0; g < L && g < nb; g++) {
    int64_t epoch = o->drift_period > 0 ? ((int64_t)o->step + g) / L : 0;
    reseed(c->r, key, KEY_BLOCK_NOISE, (uint64_t)g, (uint64_t)epoch);
    for (int64_t col = g; col < nb; col += L) hot[col].key -= log(-log(gsl_rng_uniform_pos(c->r)));
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

static int block_heads(pattern *p, const double *density, int32_t B, const synth_opts *o, sr_error *e) {
  if (B < 1) return sr_input_error(e, NULL, "pattern", "block size %d must be >= 1", B);
  synth_ctx c;
  int rc = ctx_init(&c, p->n_tokens, e);
  if (rc) return rc;
  hot_col *hot = malloc((size_t)sr_cdiv(p->n_tokens, B) * sizeof *hot + 1);
  if (!hot) rc = sr_internal_error(e, 0, "synth: out of memory");
  for (int l = 0; l < p->layers && !rc; l++)
    for (int h = 0; h < p->heads && !rc; h++)
      rc = block_head(&c, pattern_head(p, l, h), density[(int64_t)l * p->heads + h], B, head_key(o, l, h), o, hot, e);
  free(hot);
  ctx_free(&c);
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
  gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
  int rc = SR_OK;
  if (!d || !hr || !r) rc = sr_internal_error(e, 0, "synth: out of memory");
  for (int l = 0; l < p->layers && !rc; l++) {
    reseed(r, o->seed, KEY_ADASPA, (uint64_t)l, 0);
    int n_high = 0;
    for (int h = 0; h < p->heads; h++) {
      hr[h] = (head_recall){.recall = 0.5 + 0.5 * gsl_rng_uniform(r), .head = h};
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
  if (r) gsl_rng_free(r);
  free(d);
  free(hr);
  return rc;
}
