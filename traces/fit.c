// fit.c — fit the planner's fitted generator (plan/synth.h, synth_fit) to a recorded trace, and the
// "vs-fit:PATH" pattern source built on it.
//
// Per (layer, head), over every step whose head has step 0's kind: VS heads give their mean budgets, the
// mean lengths of the leading runs (verticals from key 0: the sinks; slashes from offset 0: the local
// window), and the starts and lengths of the other runs of consecutive indices: the starts' quantiles
// become the generator's position distribution, with the mean length of the runs between two quantiles; window heads their (sinks, window); block heads the kept
// share of each row's causal blocks and each column's popularity beyond the diagonal, first and previous
// block, per bin of the sequence.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "traces/trace.h"

typedef struct {
  int32_t start, len;
} run_at;

typedef struct {
  run_at *v;
  int64_t n, cap;
} run_list;

static int list_push(run_list *l, int32_t start, int32_t len) {
  if (l->n == l->cap) {
    int64_t cap = l->cap ? 2 * l->cap : 64;
    run_at *g = realloc(l->v, (size_t)cap * sizeof *g);
    if (!g) return -1;
    l->v = g, l->cap = cap;
  }
  l->v[l->n++] = (run_at){start, len};
  return 0;
}

static int cmp_start(const void *a, const void *b) {
  const run_at *x = a, *y = b;
  if (x->start != y->start) return (x->start > y->start) - (x->start < y->start);
  return (x->len > y->len) - (x->len < y->len);
}

// What one head accumulates over the steps.
typedef struct {
  int steps;                 // steps with the head's kind
  double nv, ns, sinks, window;
  run_list v_runs, s_runs;  // the runs beyond the leading ones
  double row_share[SYNTH_FIT_BINS], row_n[SYNTH_FIT_BINS], col_kept[SYNTH_FIT_BINS], col_elig[SYNTH_FIT_BINS];
} head_acc;

// Leading run of a sorted index set (the indices 0, 1, ..., k - 1); the rest as runs of consecutive indices.
static int take_runs(const int32_t *x, int32_t n, double *lead, run_list *runs) {
  int32_t i = 0;
  while (i < n && x[i] == i) i++;
  *lead += i;
  while (i < n) {
    int32_t a = i;
    while (i + 1 < n && x[i + 1] == x[i] + 1) i++;
    if (list_push(runs, x[a], i - a + 1)) return -1;
    i++;
  }
  return 0;
}

static int block_bit(const head_pattern *h, int64_t p, int64_t c) {
  return (int)((h->mask[p * h->row_words + c / 64] >> (c % 64)) & 1);
}

static void take_block(const head_pattern *h, head_acc *a) {
  const int64_t nb = h->n_blocks;
  for (int64_t p = 0; p < nb; p++) {
    int64_t kept = 0, bin = p * SYNTH_FIT_BINS / nb;
    for (int64_t c = 0; c <= p; c++)
      if (block_bit(h, p, c)) {
        kept++;
        if (c != p && c != 0 && c != p - 1) a->col_kept[c * SYNTH_FIT_BINS / nb]++;
      }
    a->row_share[bin] += (double)kept / (double)(p + 1);
    a->row_n[bin]++;
  }
  // Column c (1 <= c) is a non-structural candidate of the rows p >= c + 2: nb - c - 2 of them.
  for (int64_t c = 1; c < nb; c++)
    if (nb - c - 2 > 0) a->col_elig[c * SYNTH_FIT_BINS / nb] += (double)(nb - c - 2);
}

// Quantiles of the runs' starts as shares of n, and the mean length of the runs from quantile i's up to
// quantile i + 1's (a flat spread of single indices when there are none: never drawn then).
static void quantiles(run_list *l, int64_t n, float *q, float *len) {
  if (l->n == 0) {
    for (int i = 0; i < SYNTH_FIT_Q; i++) q[i] = (float)synth_fit_level(i);
    for (int i = 0; i < SYNTH_FIT_Q - 1; i++) len[i] = 1;
    return;
  }
  qsort(l->v, (size_t)l->n, sizeof *l->v, cmp_start);
  int64_t k[SYNTH_FIT_Q];
  for (int i = 0; i < SYNTH_FIT_Q; i++) {
    k[i] = (int64_t)llround(synth_fit_level(i) * (double)(l->n - 1));
    q[i] = (float)((double)l->v[k[i]].start / (double)n);
  }
  for (int i = 0; i < SYNTH_FIT_Q - 1; i++) {  // the runs k[i] .. k[i + 1] (one run when they meet)
    double sum = 0;
    for (int64_t j = k[i]; j <= k[i + 1]; j++) sum += l->v[j].len;
    len[i] = (float)(sum / (double)(k[i + 1] - k[i] + 1));
  }
}

static void finish_head(const head_acc *a, int64_t n, synth_fit_head *f) {
  const double s = a->steps > 0 ? a->steps : 1;
  f->n_vertical = a->nv / s / (double)n;
  f->n_slash = a->ns / s / (double)n;
  f->sinks = llround(a->sinks / s);
  f->window = a->window / s / (double)n;
  for (int b = 0; b < SYNTH_FIT_BINS; b++) {
    f->b_row[b] = (float)(a->row_n[b] > 0 ? a->row_share[b] / a->row_n[b] : 0);
    f->b_col[b] = (float)(a->col_elig[b] > 0 ? a->col_kept[b] / a->col_elig[b] : 0);
  }
}

int trace_fit(const trace_file *t, synth_fit *out, sr_error *e) {
  const trace_info *in = &t->info;
  const int64_t H = (int64_t)in->layers * in->heads, n = in->seq_len;
  memset(out, 0, sizeof *out);
  out->layers = in->layers, out->heads = in->heads, out->n0 = n;
  out->h = calloc((size_t)H, sizeof *out->h);
  head_acc *acc = calloc((size_t)H, sizeof *acc);
  int rc = !out->h || !acc ? sr_internal_error(e, ENOMEM, "fit of %lld heads", (long long)H) : SR_OK;
  for (int s = 0; s < in->steps && !rc; s++) {
    pattern p;
    if ((rc = trace_read_step(t, s, &p, e))) break;
    for (int64_t x = 0; x < H && !rc; x++) {
      const head_pattern *h = &p.h[x];
      synth_fit_head *f = &out->h[x];
      head_acc *a = &acc[x];
      if (s == 0) {
        f->kind = h->kind;
        f->w_sinks = h->sinks, f->w_window = h->window;
        f->block = h->block;
      }
      if (h->kind != f->kind || (h->kind == PATTERN_BLOCK && h->block != f->block)) continue;
      a->steps++;
      if (h->kind == PATTERN_VS) {
        a->nv += h->n_vertical, a->ns += h->n_slash;
        if (take_runs(h->vertical, h->n_vertical, &a->sinks, &a->v_runs) ||
            take_runs(h->slash, h->n_slash, &a->window, &a->s_runs))
          rc = sr_internal_error(e, ENOMEM, "fit");
      } else if (h->kind == PATTERN_BLOCK) {
        take_block(h, a);
      }
    }
    pattern_free(&p);
  }
  for (int64_t x = 0; x < H && !rc; x++) {
    finish_head(&acc[x], n, &out->h[x]);
    quantiles(&acc[x].v_runs, n, out->h[x].v_q, out->h[x].v_len);
    quantiles(&acc[x].s_runs, n, out->h[x].s_q, out->h[x].s_len);
  }
  for (int64_t x = 0; acc && x < H; x++) free(acc[x].v_runs.v), free(acc[x].s_runs.v);
  free(acc);
  if (rc) synth_fit_free(out);
  return rc;
}

int trace_fit_pattern(const char *path, const model_config *m, int64_t n_tokens, uint64_t seed, int step, pattern *out,
                      sr_error *e) {
  memset(out, 0, sizeof *out);
  trace_file t;
  synth_fit f;
  int rc = trace_open(path, &t, e);
  if (rc) return rc;
  rc = trace_fit(&t, &f, e);
  trace_close(&t);
  if (rc) return rc;
  if (n_tokens > INT32_MAX)
    rc = sr_input_error(e, NULL, "seq", "%lld tokens exceed the 32-bit index range of patterns", (long long)n_tokens);
  if (!rc) rc = pattern_alloc(out, n_tokens, (int)m->num_layers, (int)m->num_heads, e);
  synth_opts o = synth_defaults(seed, step);
  if (!rc && (rc = synth_fitted(out, &f, &o, e))) pattern_free(out);
  synth_fit_free(&f);
  return rc;
}
