// gating.c — the group selections of MOBA and TOKENS heads, explicit or drawn by the planner's stand-ins
// (gating.h). A stand-in stores no arrays: each group's selection is drawn when asked from a splitmix64
// stream seeded by (head key, group, drift epoch), so it is the same however often and in whatever order
// the groups are asked for, and a 4M-token model's 576 heads cost nothing to hold.
#include "plan/gating.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/tile_index.h"
#include "plan/util.h"

int64_t gating_n_groups(int64_t n_tokens) { return sr_cdiv(n_tokens, TILE); }

// ---------------------------------------------------------------------------------------------
// the stand-ins' random streams

static uint64_t mix64(uint64_t x) {  // splitmix64's finaliser (Steele, Lea, Flood 2014)
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

typedef struct {
  uint64_t s;
} draw_rng;

static uint64_t rng_next(draw_rng *r) { return mix64(r->s += 0x9e3779b97f4a7c15ull); }
// Uniform on [0, 1) with 53 bits.
static double rng_unit(draw_rng *r) { return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }
static int64_t rng_below(draw_rng *r, int64_t n) { return n > 0 ? (int64_t)(rng_unit(r) * (double)n) : 0; }

// A group's stream: the drawn part of group t is redrawn every SYNTH_DRIFT_PERIOD steps, group t at the
// steps s with (s + t) mod period == 0 (synth.h's drift), so about 1/period of the groups change a step.
static draw_rng group_rng(const head_pattern *h, int64_t t) {
  uint64_t epoch = (uint64_t)(h->gen_step + t % SYNTH_DRIFT_PERIOD) / SYNTH_DRIFT_PERIOD;
  draw_rng r = {mix64(h->gen_key ^ mix64((uint64_t)t ^ mix64(epoch)))};
  return r;
}

// Sort non-negative a[0..n) ascending: insertion for a few, else LSD radix in 8-bit digits (a group's draws
// are sorted millions of times at 4M tokens: qsort's calls dominated the accounting).
static void sort_small(int32_t *a, int64_t n) {
  if (n <= 48) {
    for (int64_t i = 1; i < n; i++) {
      int32_t x = a[i];
      int64_t j = i;
      for (; j > 0 && a[j - 1] > x; j--) a[j] = a[j - 1];
      a[j] = x;
    }
    return;
  }
  int32_t buf[1024], *tmp = n <= 1024 ? buf : malloc(sizeof(int32_t) * (size_t)n), *src = a, *dst = tmp;
  if (!tmp) {  // out of memory: insertion sort, slow but right
    for (int64_t i = 1; i < n; i++) {
      int32_t x = a[i];
      int64_t j = i;
      for (; j > 0 && a[j - 1] > x; j--) a[j] = a[j - 1];
      a[j] = x;
    }
    return;
  }
  int32_t max = 0;
  for (int64_t i = 0; i < n; i++) max = a[i] > max ? a[i] : max;
  for (int shift = 0; shift < 31 && (max >> shift) > 0; shift += 8) {
    int64_t cnt[257] = {0};
    for (int64_t i = 0; i < n; i++) cnt[((src[i] >> shift) & 255) + 1]++;
    for (int d = 0; d < 256; d++) cnt[d + 1] += cnt[d];
    for (int64_t i = 0; i < n; i++) dst[cnt[(src[i] >> shift) & 255]++] = src[i];
    int32_t *t = src;
    src = dst, dst = t;
  }
  if (src != a) memcpy(a, src, sizeof(int32_t) * (size_t)n);
  if (tmp != buf) free(tmp);
}

// Sort a[0..n) and drop repeats; returns the new count.
static int64_t sort_unique(int32_t *a, int64_t n) {
  sort_small(a, n);
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++)
    if (m == 0 || a[i] != a[m - 1]) a[m++] = a[i];
  return m;
}

// Draw until a[0..want) holds `want` distinct values of [lo, hi) (want <= hi - lo), the first `have` given;
// draw() gives one candidate. Sorted on return. Repeats are redrawn a few rounds, then the lowest free
// values top it up (only when nearly every value is wanted).
static int64_t fill_distinct(int32_t *a, int64_t have, int64_t want, int64_t lo, int64_t hi, draw_rng *r,
                             int32_t (*draw)(draw_rng *, int64_t, int64_t, const double *), const double *par) {
  int64_t n = sort_unique(a, have);
  for (int round = 0; round < 8 && n < want; round++) {
    for (int64_t x = n; x < want; x++) a[x] = draw(r, lo, hi, par);
    n = sort_unique(a, want);
  }
  for (int64_t v = lo, i = 0; n < want && v < hi; v++) {  // top up with the lowest values not yet taken
    while (i < n && a[i] < v) i++;
    if (i < n && a[i] == v) continue;
    a[n++] = (int32_t)v;
  }
  return sort_unique(a, n);
}

// ---------------------------------------------------------------------------------------------
// MoBA

// Fitted to selections recorded from tiny-test trained with moba:128:4 on the CPU, steps 50-150 of
// results/gating/2026-11-27-cpu-moba-standin-fit (scripts/fit_moba_standin.py; docs/patterns.md, "MoBA
// stand-in"): the union of a group's 128 rows is rho = 4.1 times one row's K - 1 picks (MOBA_DEFAULT_RHO,
// gating.h; a toy model's rows choose diversely, so the spec may give another rho); the previous block and
// the first are in it that often; of the other picks, MOBA_RECENT sit at log-uniform distance behind the own
// block and the rest anywhere (the recorded picks are nearly uniform).
#define MOBA_P_PREV 0.95
#define MOBA_P_FIRST 0.86
#define MOBA_RECENT 0.02

// One pick among blocks [0, own): par[0] = share at log-uniform distance.
static int32_t moba_draw(draw_rng *r, int64_t lo, int64_t own, const double *par) {
  (void)lo;
  if (rng_unit(r) < par[0]) {
    int64_t d = (int64_t)floor(exp(rng_unit(r) * log((double)own + 1.0)));  // distance 1 .. own
    if (d < 1) d = 1;
    if (d > own) d = own;
    return (int32_t)(own - d);
  }
  return (int32_t)rng_below(r, own);
}

static int64_t moba_standin_blocks(const head_pattern *h, int64_t t, int32_t *out) {
  int64_t own = t * TILE / h->block, want = (int64_t)h->topk - 1;
  if (want == 0) return 0;  // K = 1: the own block only
  if (own <= want) {
    for (int64_t c = 0; c < own; c++) out[c] = (int32_t)c;
    return own;
  }
  draw_rng r = group_rng(h, t);
  double u = (h->gen_rho > 0 ? h->gen_rho : MOBA_DEFAULT_RHO) * (double)want;
  int64_t n = (int64_t)floor(u) + (rng_unit(&r) < u - floor(u));  // stochastic rounding: the mean is rho (K - 1)
  if (n >= own) {
    for (int64_t c = 0; c < own; c++) out[c] = (int32_t)c;
    return own;
  }
  if (n < want) n = want;
  int64_t have = 0;
  if (rng_unit(&r) < MOBA_P_PREV) out[have++] = (int32_t)(own - 1);
  if (rng_unit(&r) < MOBA_P_FIRST) out[have++] = 0;
  double par[1] = {MOBA_RECENT};
  return fill_distinct(out, have, n, 0, own, &r, moba_draw, par);
}

int64_t moba_group_blocks(const head_pattern *h, int64_t n_tokens, int64_t t, int32_t *out) {
  (void)n_tokens;
  if (h->gen_key) return moba_standin_blocks(h, t, out);
  int64_t a = h->sel_off[t], b = h->sel_off[t + 1];
  if (b > a) memcpy(out, h->sel + a, (size_t)(b - a) * sizeof *out);
  return b - a;
}

int moba_block_mask(const head_pattern *h, int64_t n_tokens, uint64_t **mask, int64_t *row_words) {
  int64_t nt = sr_cdiv(n_tokens, TILE), words = sr_cdiv(nt, 64), nbt = h->block / TILE;
  uint64_t *bm = calloc((size_t)(nt * words + 1), sizeof *bm);
  int32_t *buf = malloc(sizeof(int32_t) * (size_t)(sr_cdiv(n_tokens, h->block) + 1));
  if (!bm || !buf) {
    free(bm), free(buf);
    return -1;
  }
  for (int64_t t = 0; t < nt; t++) {
    uint64_t *row = bm + t * words;
    int64_t own = t / nbt, n = moba_group_blocks(h, n_tokens, t, buf);
    for (int64_t j = own * nbt; j <= t; j++) row[j / 64] |= 1ull << (j % 64);
    for (int64_t x = 0; x < n; x++)
      for (int64_t j = (int64_t)buf[x] * nbt; j < (int64_t)(buf[x] + 1) * nbt; j++) row[j / 64] |= 1ull << (j % 64);
  }
  free(buf);
  *mask = bm, *row_words = words;
  return 0;
}

int gating_moba_standin(pattern *p, int32_t block, int32_t topk, double rho, const synth_opts *o, sr_error *e) {
  if (block < TILE || block % TILE)
    return sr_input_error(e, NULL, "pattern", "moba block size %d must be a multiple of %d", block, TILE);
  if (topk < 1) return sr_input_error(e, NULL, "pattern", "moba top-k %d must be >= 1", topk);
  if (!(rho >= 1)) return sr_input_error(e, NULL, "pattern", "moba union ratio %g must be >= 1", rho);
  for (int l = 0; l < p->layers; l++)
    for (int x = 0; x < p->heads; x++) {
      head_pattern *h = pattern_head(p, l, x);
      memset(h, 0, sizeof *h);
      h->kind = PATTERN_MOBA;
      h->block = block;
      h->topk = topk;
      h->n_groups = gating_n_groups(p->n_tokens);
      h->gen_key = mix64(o->seed ^ mix64(((uint64_t)(uint32_t)l << 32 | (uint32_t)x) ^ 0x6d6f6261ull)) | 1u;
      h->gen_step = o->step;
      h->gen_rho = rho;
    }
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// token top-k

#define TOKENS_CHUNK 32     // the stand-in's earlier tokens come in aligned chunks of 32
#define TOKENS_STRETCHES 4  // ... chosen per 32-row stretch of a group
#define TOKENS_RECENT 0.5   // share of a stretch's chunks at log-uniform distance (the rest uniform)

static int64_t tokens_chunks(int32_t topk) { return 3 * (int64_t)topk / (4 * TOKENS_CHUNK); }

int64_t tokens_group_room(const head_pattern *h, int64_t t) {
  if (h->gen_key) return sr_max64(1, TOKENS_STRETCHES * tokens_chunks(h->topk));
  return h->tok_off[t + 1] - h->tok_off[t];
}

// One chunk among [lo, pool): par[0] = share at log-uniform distance from the pool's end.
static int32_t tokens_draw(draw_rng *r, int64_t lo, int64_t pool, const double *par) {
  if (rng_unit(r) < par[0]) {
    int64_t d = (int64_t)floor(exp(rng_unit(r) * log((double)(pool - lo) + 1.0)));
    if (d < 1) d = 1;
    if (d > pool - lo) d = pool - lo;
    return (int32_t)(pool - d);
  }
  return (int32_t)(lo + rng_below(r, pool - lo));
}

static int64_t tokens_standin_spans(const head_pattern *h, int64_t n_tokens, int64_t t, tokens_span *out) {
  if (t * TILE < h->topk) {  // every row keeps every earlier token
    int64_t last = sr_min64(t * TILE + TILE, n_tokens) - 1;
    out[0] = (tokens_span){0, (int32_t)(last + 1), {~0ull, ~0ull}};
    return 1;
  }
  int64_t m = tokens_chunks(h->topk), pool = (t * TILE - h->tok_window + 1) / TOKENS_CHUNK;
  if (m == 0) return 0;
  draw_rng r = group_rng(h, t);
  int32_t buf[65], *a = m <= 64 ? buf : malloc((size_t)m * sizeof *a);
  int32_t *pk = malloc((size_t)(TOKENS_STRETCHES * m) * sizeof *pk);  // chunk * TOKENS_STRETCHES + stretch
  if (!a || !pk) {
    if (a != buf) free(a);
    free(pk);
    return -1;
  }
  double par[1] = {TOKENS_RECENT};
  int64_t n = 0;
  for (int j = 0; j < TOKENS_STRETCHES; j++) {
    a[0] = 0;  // the first chunk: the attention sink
    int64_t got = fill_distinct(a, 1, m, 0, pool, &r, tokens_draw, par);
    for (int64_t x = 0; x < got; x++) pk[n++] = a[x] * TOKENS_STRETCHES + j;
  }
  sort_small(pk, n);
  int64_t ns = 0;
  for (int64_t x = 0; x < n; x++) {
    int32_t chunk = pk[x] / TOKENS_STRETCHES, stretch = pk[x] % TOKENS_STRETCHES;
    uint64_t bits = 0xffffffffull << (32 * (stretch % 2));
    if (ns > 0 && out[ns - 1].key == chunk * TOKENS_CHUNK) {
      out[ns - 1].rows[stretch / 2] |= bits;
      continue;
    }
    out[ns] = (tokens_span){chunk * TOKENS_CHUNK, TOKENS_CHUNK, {0, 0}};
    out[ns++].rows[stretch / 2] = bits;
  }
  if (a != buf) free(a);
  free(pk);
  return ns;
}

int64_t tokens_group_spans(const head_pattern *h, int64_t n_tokens, int64_t t, tokens_span *out) {
  if (h->gen_key) return tokens_standin_spans(h, n_tokens, t, out);
  int64_t n = 0;
  for (int64_t x = h->tok_off[t]; x < h->tok_off[t + 1]; x++)
    out[n++] = (tokens_span){h->tok_key[x], 1, {h->tok_rows[2 * x], h->tok_rows[2 * x + 1]}};
  return n;
}

int gating_tokens_standin(pattern *p, int32_t topk, const synth_opts *o, sr_error *e) {
  if (topk < 1) return sr_input_error(e, NULL, "pattern", "token top-k %d must be >= 1", topk);
  int64_t window = topk - TOKENS_CHUNK * tokens_chunks(topk);
  for (int l = 0; l < p->layers; l++) {
    uint64_t key = mix64(o->seed ^ mix64((uint64_t)(uint32_t)l ^ 0x746f6b656e73ull)) | 1u;  // DSA: one indexer a layer
    for (int x = 0; x < p->heads; x++) {
      head_pattern *h = pattern_head(p, l, x);
      memset(h, 0, sizeof *h);
      h->kind = PATTERN_TOKENS;
      h->topk = topk;
      h->tok_window = window;
      h->n_groups = gating_n_groups(p->n_tokens);
      h->gen_key = key;
      h->gen_step = o->step;
    }
  }
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// kept pairs

static double tri(double m) { return m > 0 ? m * (m + 1) / 2 : 0; }

// Rows r of a group of `rows` rows with bit r set in m and r >= lo.
static int64_t rows_kept(const uint64_t m[2], int64_t rows, int64_t lo) {
  int64_t n = 0;
  for (int64_t r = lo < 0 ? 0 : lo; r < rows; r++) n += (int64_t)((m[r / 64] >> (r % 64)) & 1u);
  return n;
}

double gating_head_pairs(const head_pattern *h, int64_t n_tokens) {
  int64_t ng = gating_n_groups(n_tokens);
  double pairs = 0;
  if (h->kind == PATTERN_MOBA) {
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)(sr_cdiv(n_tokens, h->block) + 1));
    if (!buf) return -1;
    for (int64_t t = 0; t < ng; t++) {
      int64_t rows = sr_min64(TILE, n_tokens - t * TILE), own = t * TILE / h->block;
      int64_t before = t * TILE - own * h->block;  // keys of the own block before the group
      pairs += (double)rows * (double)before + tri((double)rows) + (double)rows * (double)h->block * (double)moba_group_blocks(h, n_tokens, t, buf);
    }
    free(buf);
    return pairs;
  }
  int64_t w = h->tok_window, room = 1;
  // the window: min(w, q + 1) keys a row
  pairs += w >= n_tokens ? tri((double)n_tokens) : tri((double)w) + (double)(n_tokens - w) * (double)w;
  for (int64_t t = 0; t < ng; t++) room = sr_max64(room, tokens_group_room(h, t));
  tokens_span *sp = malloc(sizeof *sp * (size_t)room);
  if (!sp) return -1;
  for (int64_t t = 0; t < ng; t++) {
    int64_t rows = sr_min64(TILE, n_tokens - t * TILE), n = tokens_group_spans(h, n_tokens, t, sp);
    for (int64_t y = 0; y < n; y++) {
      int64_t end = (int64_t)sp[y].key + sp[y].len;
      if (end - 1 - t * TILE + w <= 0 && rows == TILE) {  // every row that chose them keeps every key
        pairs += (double)(__builtin_popcountll(sp[y].rows[0]) + __builtin_popcountll(sp[y].rows[1])) * (double)sp[y].len;
        continue;
      }
      for (int64_t k = sp[y].key; k < end; k++) pairs += (double)rows_kept(sp[y].rows, rows, k - t * TILE + w);
    }
  }
  free(sp);
  return pairs;
}
