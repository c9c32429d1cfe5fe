// synth_fit.c — patterns drawn from a fitted head description (synth.h, "generators fitted to a recorded
// pattern"): vertical-slash heads from fitted budgets, leading runs, quantiles of run starts and run lengths; window
// heads as recorded; block heads from fitted row shares and column popularity.
//
// Draws use the shared seeding, marks and per-thread contexts (synth_internal.h): each head's indices are
// split into drift groups as in synth.c, so a fitted pattern drifts from step to step the way the synthetic
// ones do, and heads are drawn in parallel with the same result for any thread count.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/parallel.h"
#include "plan/synth.h"
#include "plan/synth_internal.h"
#include "plan/util.h"

enum { KEY_FIT_VERT = 101, KEY_FIT_SLASH, KEY_FIT_BLOCK };

void synth_fit_free(synth_fit *f) {
  free(f->h);
  memset(f, 0, sizeof *f);
}

#define FINE_LEVELS 4  // levels 1/512 .. 1/64 below the steps of 1/32

double synth_fit_level(int i) {
  if (i <= 0) return 0;
  if (i <= FINE_LEVELS) return (double)(1 << (i - 1)) / 512;
  return (double)(i - FINE_LEVELS) / 32;
}

// The segment [level(i), level(i + 1)) of the quantile levels that holds u in [0, 1).
static int level_segment(double u) {
  int i = u < 1.0 / 32 ? 0 : FINE_LEVELS + (int)(u * 32) - 1;
  while (i < SYNTH_FIT_Q - 2 && synth_fit_level(i + 1) <= u) i++;
  while (i > 0 && synth_fit_level(i) > u) i--;
  return i;
}

// The quantile function of q (SYNTH_FIT_Q points at shares synth_fit_level(i)) at u in segment i, linear in between.
static double quantile_at(const float *q, int i, double u) {
  const double a = synth_fit_level(i), b = synth_fit_level(i + 1);
  return q[i] + (u - a) / (b - a) * (q[i + 1] - q[i]);
}

// The unmarked index nearest to x in [0, n) (below first on a tie), or -1 when every index is marked.
static int64_t nearest_free(const uint64_t *bits, int64_t n, int64_t x) {
  for (int64_t d = 0; d <= x || x + d < n; d++) {
    if (x - d >= 0 && !((bits[(x - d) >> 6] >> ((x - d) & 63)) & 1)) return x - d;
    if (x + d < n && !((bits[(x + d) >> 6] >> ((x + d) & 63)) & 1)) return x + d;
  }
  return -1;
}

// `budget` distinct indices in [0, n): [0, lead) always, the rest as runs of consecutive indices whose starts
// follow the quantiles q (share of n), a run starting between quantiles i and i + 1 len[i] long on average
// (floor(len[i] + u)), drawn group by group (drift). An index already taken gives way to the nearest free
// one: the quantiles pool every recorded step, where the same positions recur, and redrawing a collision from
// the whole distribution would move mass from those crowded places to sparse ones. Topped up with the
// lowest unused indices if draws ever run out. Sorted ascending into out.
static void draw_runs(synth_ctx *c, int32_t *out, int64_t budget, int64_t lead, const float *q, const float *len,
                      int kind, uint64_t key, const synth_opts *o) {
  const int64_t n = c->n;
  uint64_t *bits = c->bits;
  int64_t count = 0;
  for (int64_t i = 0; i < lead; i++) out[count++] = (int32_t)i, synth_mark(bits, i);
  const int64_t rest = budget - lead, L = o->drift_period > 0 ? o->drift_period : 1;
  for (int64_t g = 0; g < L && rest > 0; g++) {
    int64_t quota = rest / L + (g < rest % L);
    if (!quota) continue;
    int64_t epoch = o->drift_period > 0 ? ((int64_t)o->step + g) / L : 0;
    synth_reseed(&c->r, key, (uint64_t)kind, (uint64_t)g, (uint64_t)epoch);
    for (int64_t taken = 0, tries = 0; taken < quota && tries < 16 * quota + 64; tries++) {
      const double u = sr_mt_uniform(&c->r);
      const int seg = level_segment(u);
      const int64_t run = sr_max64(1, (int64_t)(len[seg] + sr_mt_uniform(&c->r)));
      int64_t x = (int64_t)(quantile_at(q, seg, u) * (double)n);
      x = sr_max64(0, sr_min64(n - 1, x));
      for (int64_t j = 0; j < run && taken < quota && x + j < n; j++) {
        int64_t y = nearest_free(bits, n, x + j);
        if (y < 0) break;
        synth_mark(bits, y);
        out[count++] = (int32_t)y;
        taken++;
      }
    }
  }
  for (int64_t w = 0; count < budget && w * 64 < n; w++)  // the lowest unused indices, word by word
    for (uint64_t free_bits = ~bits[w]; free_bits && count < budget; free_bits &= free_bits - 1) {
      int64_t x = w * 64 + __builtin_ctzll(free_bits);
      if (x >= n) break;
      bits[w] |= 1ull << (x & 63);
      out[count++] = (int32_t)x;
    }
  synth_take_sorted(c, out, count, lead);
}

static int vs_head(synth_ctx *c, head_pattern *h, const synth_fit_head *f, uint64_t key, const synth_opts *o,
                   sr_error *e) {
  const int64_t n = c->n;
  int64_t nv = sr_min64(n, llround(f->n_vertical * (double)n)), ns = sr_min64(n, llround(f->n_slash * (double)n));
  int64_t sinks = sr_min64(f->sinks, nv), window = sr_min64(llround(f->window * (double)n), ns);
  synth_head_clear(h);
  h->kind = PATTERN_VS;
  h->vertical = malloc((size_t)nv * sizeof(int32_t) + 1);
  h->slash = malloc((size_t)ns * sizeof(int32_t) + 1);
  if (!h->vertical || !h->slash) return sr_internal_error(e, 0, "synth: out of memory");
  draw_runs(c, h->vertical, nv, sinks, f->v_q, f->v_len, KEY_FIT_VERT, key, o);
  draw_runs(c, h->slash, ns, window, f->s_q, f->s_len, KEY_FIT_SLASH, key, o);
  h->n_vertical = (int32_t)nv;
  h->n_slash = (int32_t)ns;
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// block heads

typedef struct {
  double key;
  int64_t c;
} ranked_col;

static int cmp_ranked(const void *a, const void *b) {
  const ranked_col *x = a, *y = b;
  if (x->key != y->key) return x->key > y->key ? -1 : 1;
  return (x->c > y->c) - (x->c < y->c);
}

static int block_head(synth_ctx *c, head_pattern *h, const synth_fit_head *f, uint64_t key, const synth_opts *o,
                      ranked_col *rank, sr_error *e) {
  const int64_t n = c->n, B = sr_max64(1, f->block), nb = sr_cdiv(n, B), rw = sr_cdiv(nb, 64);
  synth_head_clear(h);
  h->kind = PATTERN_BLOCK;
  h->block = (int32_t)B;
  h->n_blocks = nb;
  h->row_words = rw;
  h->mask = calloc((size_t)(nb * rw) + 1, sizeof(uint64_t));
  if (!h->mask) return sr_internal_error(e, 0, "synth: out of memory for a %lld x %lld block mask", (long long)nb,
                                         (long long)nb);
  // Columns ranked by log popularity + Gumbel noise (weighted sampling without replacement), the noise
  // redrawn by drift group.
  const int64_t L = o->drift_period > 0 ? o->drift_period : 1;
  for (int64_t col = 0; col < nb; col++) {
    double pop = f->b_col[sr_min64(SYNTH_FIT_BINS - 1, col * SYNTH_FIT_BINS / nb)];
    rank[col] = (ranked_col){.key = log(pop > 0 ? pop : 1e-12), .c = col};
  }
  for (int64_t g = 0; g < L && g < nb; g++) {
    int64_t epoch = o->drift_period > 0 ? ((int64_t)o->step + g) / L : 0;
    synth_reseed(&c->r, key, KEY_FIT_BLOCK, (uint64_t)g, (uint64_t)epoch);
    for (int64_t col = g; col < nb; col += L) rank[col].key -= log(-log(sr_mt_uniform_pos(&c->r)));
  }
  qsort(rank, (size_t)nb, sizeof *rank, cmp_ranked);
  for (int64_t p = 0; p < nb; p++) {
    uint64_t *row = h->mask + p * rw;
    double share = f->b_row[sr_min64(SYNTH_FIT_BINS - 1, p * SYNTH_FIT_BINS / nb)];
    int64_t quota = sr_max64(1, sr_min64(p + 1, llround(share * (double)(p + 1)))), kept = 0;
    int64_t structural[3] = {p, 0, p - 1};
    for (int i = 0; i < 3 && kept < quota; i++) {
      int64_t col = structural[i];
      if (col < 0 || ((row[col / 64] >> (col % 64)) & 1u)) continue;
      row[col / 64] |= 1ull << (col % 64);
      kept++;
    }
    for (int64_t i = 0; i < nb && kept < quota; i++) {
      int64_t col = rank[i].c;
      if (col > p || ((row[col / 64] >> (col % 64)) & 1u)) continue;
      row[col / 64] |= 1ull << (col % 64);
      kept++;
    }
  }
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// every head

typedef struct {
  pattern *p;
  const synth_fit *f;
  const synth_opts *o;
  synth_pool pool;
  ranked_col **rank;  // [threads] column ranking scratch of the block heads (NULL without block heads)
} fit_job;

static int fit_item(void *ctx, int x, int thread, sr_error *e) {
  fit_job *j = ctx;
  const synth_fit *f = j->f;
  int l = x / j->p->heads, h = x % j->p->heads;
  const synth_fit_head *fh =
      &f->h[(int64_t)l * f->layers / j->p->layers * f->heads + (int64_t)h * f->heads / j->p->heads];
  head_pattern *hp = pattern_head(j->p, l, h);
  uint64_t key = synth_head_key(j->o, l, h);
  switch (fh->kind) {
    case PATTERN_DENSE:
      synth_head_clear(hp);
      hp->kind = PATTERN_DENSE;
      return SR_OK;
    case PATTERN_WINDOW:
      synth_head_clear(hp);
      hp->kind = PATTERN_WINDOW;
      hp->sinks = fh->w_sinks;
      hp->window = fh->w_window;
      return SR_OK;
    case PATTERN_VS: return vs_head(&j->pool.c[thread], hp, fh, key, j->o, e);
    case PATTERN_BLOCK: return block_head(&j->pool.c[thread], hp, fh, key, j->o, j->rank[thread], e);
    case PATTERN_MOBA:
    case PATTERN_TOKENS: break;  // traces store gated heads as block masks or not at all: no fit has them
  }
  return SR_OK;
}

int synth_fitted(pattern *p, const synth_fit *f, const synth_opts *o, sr_error *e) {
  if (f->layers < 1 || f->heads < 1 || !f->h) return sr_input_error(e, NULL, "pattern", "an empty fit");
  for (int64_t x = 0; x < (int64_t)f->layers * f->heads; x++)
    if (f->h[x].kind == PATTERN_MOBA || f->h[x].kind == PATTERN_TOKENS)
      return sr_input_error(e, NULL, "pattern", "fitted head %lld is gated (MoBA or token top-k): fits hold dense, "
                            "window, vertical-slash and block heads", (long long)x);
  int items = p->layers * p->heads;
  fit_job j = {p, f, o, {0}, NULL};
  int rc = synth_pool_open(&j.pool, p->n_tokens, items, e);
  if (rc) return rc;
  // a ranking buffer a thread for the block heads, as long as the finest of them needs
  int64_t most_blocks = 0;
  for (int64_t x = 0; x < (int64_t)f->layers * f->heads; x++)
    if (f->h[x].kind == PATTERN_BLOCK)
      most_blocks = sr_max64(most_blocks, sr_cdiv(p->n_tokens, sr_max64(1, f->h[x].block)));
  if (most_blocks) {
    j.rank = calloc((size_t)j.pool.n, sizeof *j.rank);
    for (int t = 0; j.rank && t < j.pool.n && !rc; t++)
      if (!(j.rank[t] = malloc((size_t)most_blocks * sizeof **j.rank))) rc = -1;
    if (!j.rank || rc) rc = sr_internal_error(e, 0, "synth: out of memory for %lld blocks", (long long)most_blocks);
  }
  if (!rc) rc = sr_parallel_for(items, j.pool.n, fit_item, &j, e);
  for (int t = 0; j.rank && t < j.pool.n; t++) free(j.rank[t]);
  free(j.rank);
  synth_pool_close(&j.pool);
  return rc;
}
