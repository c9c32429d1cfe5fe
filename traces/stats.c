// stats.c — what a trace holds: exact kept (query, key) pairs per head, density against dense causal
// attention, budget use, and drift between consecutive steps as the Jaccard overlap of kept sets.
// Counts use each pattern's structure (columns, diagonals, blocks, windows), never the N x N mask.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/gating.h"
#include "plan/util.h"
#include "traces/trace.h"

// ---------------------------------------------------------------------------------------------
// exact pair counts

// Kept causal pairs of vertical set V and slash set S (both sorted, unique, in [0, n)):
// column v holds n - v pairs (q = v..n-1), diagonal d holds n - d (q = d..n-1), and column v meets
// diagonal d in exactly one causal pair (q = v + d, k = v) when v + d <= n - 1 (inclusion-exclusion).
static double vs_pairs(const int32_t *v, int32_t nv, const int32_t *s, int32_t ns, int64_t n) {
  double total = 0;
  for (int32_t i = 0; i < nv; i++) total += (double)(n - v[i]);
  for (int32_t j = 0; j < ns; j++) total += (double)(n - s[j]);
  // For ascending v the allowed diagonals d <= n - 1 - v shrink: one backward pointer over s.
  int32_t j = ns;
  for (int32_t i = 0; i < nv; i++) {
    while (j > 0 && s[j - 1] > n - 1 - v[i]) j--;
    total -= j;
  }
  return total;
}

// Kept causal pairs of sinks + window. Row q keeps [0, s) and [q - w + 1, q] clipped to [0, q]; the
// two touch while q < s + w (the row is then fully kept: q + 1 keys) and are disjoint and whole
// after (s + w keys). Summing: m (m + 1) / 2 + (n - m)(s + w) with m = min(n, s + w).
static double window_pairs(int64_t sinks, int64_t window, int64_t n) {
  int64_t m = sr_min64(n, sinks + window);
  return (double)m * (double)(m + 1) / 2 + (double)(n - m) * (double)(sinks + window);
}

static int mask_bit(const head_pattern *h, int64_t p, int64_t c) {
  return (int)((h->mask[p * h->row_words + c / 64] >> (c % 64)) & 1);
}

// Kept causal pairs of block masks (the union of a and b when b != NULL): a kept block (p, c) with
// c < p is wholly below the diagonal (rows(p) x B pairs); c == p keeps the causal triangle m(m+1)/2.
static double block_pairs(const head_pattern *a, const head_pattern *b, int64_t n, int64_t *blocks) {
  const int64_t B = a->block, nb = a->n_blocks;
  double total = 0;
  int64_t kept = 0;
  for (int64_t p = 0; p < nb; p++) {
    int64_t rows = sr_min64(B, n - p * B);
    for (int64_t c = 0; c <= p; c++) {
      if (!mask_bit(a, p, c) && !(b && mask_bit(b, p, c))) continue;
      kept++;
      total += c < p ? (double)rows * (double)B : (double)rows * (double)(rows + 1) / 2;
    }
  }
  if (blocks) *blocks = kept;
  return total;
}

double trace_head_kept_pairs(const head_pattern *h, int64_t n) {
  switch (h->kind) {
    case PATTERN_DENSE: return (double)n * (double)(n + 1) / 2;
    case PATTERN_WINDOW: return window_pairs(h->sinks, h->window, n);
    case PATTERN_VS: return vs_pairs(h->vertical, h->n_vertical, h->slash, h->n_slash, n);
    case PATTERN_BLOCK: return block_pairs(h, NULL, n, NULL);
    case PATTERN_MOBA:
    case PATTERN_TOKENS: return gating_head_pairs(h, n);
  }
  return 0;
}

// Sorted union of two sorted unique arrays into out (room for na + nb); returns its length.
static int32_t merge_union(const int32_t *a, int32_t na, const int32_t *b, int32_t nb, int32_t *out) {
  int32_t i = 0, j = 0, k = 0;
  while (i < na || j < nb) {
    if (j >= nb || (i < na && a[i] < b[j])) out[k++] = a[i++];
    else if (i >= na || b[j] < a[i]) out[k++] = b[j++];
    else out[k++] = a[i++], j++;
  }
  return k;
}

double trace_head_union_pairs(const head_pattern *a, const head_pattern *b, int64_t n) {
  if (a->kind == PATTERN_DENSE || b->kind == PATTERN_DENSE) return (double)n * (double)(n + 1) / 2;
  if (a->kind != b->kind || a->kind == PATTERN_MOBA || a->kind == PATTERN_TOKENS) return -1;
  if (a->kind == PATTERN_WINDOW)  // longer sink prefix and longer window cover the shorter ones
    return window_pairs(sr_max64(a->sinks, b->sinks), sr_max64(a->window, b->window), n);
  if (a->kind == PATTERN_BLOCK) return a->block == b->block ? block_pairs(a, b, n, NULL) : -1;
  int32_t *v = malloc(sizeof *v * (size_t)(a->n_vertical + b->n_vertical + 1));
  int32_t *s = malloc(sizeof *s * (size_t)(a->n_slash + b->n_slash + 1));
  double r = -1;
  if (v && s) {
    int32_t nv = merge_union(a->vertical, a->n_vertical, b->vertical, b->n_vertical, v);
    int32_t ns = merge_union(a->slash, a->n_slash, b->slash, b->n_slash, s);
    r = vs_pairs(v, nv, s, ns, n);
  }
  free(v);
  free(s);
  return r;
}

// ---------------------------------------------------------------------------------------------
// per-step, per-head statistics

int trace_stats(const trace_file *t, trace_head_stats **out, int64_t *n_out, sr_error *e) {
  const trace_info *in = &t->info;
  const int64_t per_step = (int64_t)in->layers * in->heads, n = in->seq_len;
  const double causal = (double)n * (double)(n + 1) / 2;
  *out = NULL;
  *n_out = 0;
  trace_head_stats *st = calloc((size_t)(per_step * in->steps), sizeof *st);
  if (!st) return sr_internal_error(e, ENOMEM, "trace stats");
  pattern prev = {0}, cur = {0};
  int rc = SR_OK;
  for (int s = 0; s < in->steps && rc == SR_OK; s++) {
    if ((rc = trace_read_step(t, s, &cur, e)) != SR_OK) break;
    for (int l = 0; l < in->layers; l++)
      for (int h = 0; h < in->heads; h++) {
        const head_pattern *hp = pattern_head(&cur, l, h);
        trace_head_stats *x = &st[s * per_step + (int64_t)l * in->heads + h];
        x->step = s;
        x->layer = l;
        x->head = h;
        x->kind = hp->kind == PATTERN_DENSE ? TRACE_KIND_DENSE : hp->kind == PATTERN_WINDOW ? TRACE_KIND_WINDOW
                  : hp->kind == PATTERN_VS ? TRACE_KIND_VS : TRACE_KIND_BLOCK;
        x->kept_pairs = trace_head_kept_pairs(hp, n);
        x->density = x->kept_pairs / causal;
        x->n_vertical = hp->kind == PATTERN_VS ? hp->n_vertical : 0;
        x->n_slash = hp->kind == PATTERN_VS ? hp->n_slash : 0;
        if (hp->kind == PATTERN_BLOCK) block_pairs(hp, NULL, n, &x->n_blocks);
        x->jaccard_prev = NAN;
        if (s > 0) {
          const head_pattern *pp = pattern_head(&prev, l, h);
          double uni = trace_head_union_pairs(hp, pp, n);
          double prev_kept = st[(s - 1) * per_step + (int64_t)l * in->heads + h].kept_pairs;
          if (uni == 0) x->jaccard_prev = 1;  // both empty: the same (empty) set
          else if (uni > 0) x->jaccard_prev = (x->kept_pairs + prev_kept - uni) / uni;
        }
      }
    if (prev.h) pattern_free(&prev);
    prev = cur;
    memset(&cur, 0, sizeof cur);
  }
  if (prev.h) pattern_free(&prev);
  if (rc != SR_OK) {
    free(st);
    return rc;
  }
  *out = st;
  *n_out = per_step * in->steps;
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// where the kept pairs sit: columns by key position, diagonals by offset

// A run of diagonals [a, b] of one head; its mass is sum_{d=a}^{b} (n - d).
typedef struct {
  int64_t a, b;
} diag_run;

static int cmp_diag_run(const void *x, const void *y) {
  const diag_run *p = x, *q = y;
  return (p->a > q->a) - (p->a < q->a);
}

static double diag_mass(int64_t a, int64_t b, int64_t n) {  // sum_{d=a}^{b} (n - d)
  return b < a ? 0 : (double)(b - a + 1) * (double)n - (double)(a + b) * (double)(b - a + 1) / 2;
}

static double col_mass_below(const int32_t *v, int32_t nv, double limit, int64_t n) {  // sum over v < limit of n - v
  double m = 0;
  for (int32_t i = 0; i < nv && v[i] < limit; i++) m += (double)(n - v[i]);
  return m;
}

// The smallest offset x with mass of every run's part at or below x >= target (runs sorted by start; runs
// may overlap, as they come from different heads): walk the sorted runs with a binary search inside a run.
static double diag_quantile(const diag_run *r, int64_t nr, double target, int64_t n) {
  // Mass at or below x over all runs is monotone in x; search x over [0, n) on it.
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    double m = 0;
    for (int64_t i = 0; i < nr && r[i].a <= mid; i++) m += diag_mass(r[i].a, sr_min64(r[i].b, mid), n);
    if (m >= target) hi = mid;
    else lo = mid + 1;
  }
  return (double)lo;
}

int trace_positions(const pattern *p, int layer, trace_position_stats *out, sr_error *e) {
  return trace_positions_steps(p, 1, layer, out, e);
}

int trace_positions_steps(const pattern *steps, int n_steps, int layer, trace_position_stats *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  const int64_t n = n_steps > 0 ? steps[0].n_tokens : 0;
  int64_t nr = 0, cap = 0;
  diag_run *runs = NULL;
  for (int st = 0; st < n_steps; st++) {
    const pattern *p = &steps[st];
    if (p->n_tokens != n) {
      free(runs);
      return sr_input_error(e, NULL, "steps", "step %d has %lld tokens, step 0 %lld", st, (long long)p->n_tokens,
                            (long long)n);
    }
    const int l0 = layer < 0 ? 0 : layer, l1 = layer < 0 ? p->layers : layer + 1;
    for (int l = l0; l < l1; l++)
      for (int h = 0; h < p->heads; h++) {
        const head_pattern *hp = pattern_head(p, l, h);
        if (hp->kind != PATTERN_VS && hp->kind != PATTERN_WINDOW) continue;
        out->heads++;
        int64_t need = nr + (hp->kind == PATTERN_VS ? hp->n_slash : 1);
        if (need > cap) {
          cap = sr_max64(2 * cap, need + 64);
          diag_run *g = realloc(runs, (size_t)cap * sizeof *g);
          if (!g) {
            free(runs);
            return sr_internal_error(e, ENOMEM, "trace positions");
          }
          runs = g;
        }
        if (hp->kind == PATTERN_WINDOW) {
          int64_t s = sr_min64(hp->sinks, n), w = sr_min64(hp->window, n);
          out->vertical_pairs += diag_mass(0, s - 1, n);  // column v holds n - v pairs: the same sum
          out->vertical_first[0] += diag_mass(0, sr_min64(s, (int64_t)ceil(0.01 * (double)n)) - 1, n);
          out->vertical_first[1] += diag_mass(0, sr_min64(s, (int64_t)ceil(0.10 * (double)n)) - 1, n);
          if (w > 0) runs[nr++] = (diag_run){0, w - 1};
          continue;
        }
        out->vertical_pairs += col_mass_below(hp->vertical, hp->n_vertical, (double)n, n);
        out->vertical_first[0] += col_mass_below(hp->vertical, hp->n_vertical, 0.01 * (double)n, n);
        out->vertical_first[1] += col_mass_below(hp->vertical, hp->n_vertical, 0.10 * (double)n, n);
        for (int32_t j = 0; j < hp->n_slash; j++) {  // consecutive offsets as one run
          int64_t a = hp->slash[j];
          while (j + 1 < hp->n_slash && hp->slash[j + 1] == hp->slash[j] + 1) j++;
          runs[nr++] = (diag_run){a, hp->slash[j]};
        }
      }
  }
  if (out->vertical_pairs > 0) out->vertical_first[0] /= out->vertical_pairs, out->vertical_first[1] /= out->vertical_pairs;
  qsort(runs, (size_t)nr, sizeof *runs, cmp_diag_run);
  for (int64_t i = 0; i < nr; i++) {
    out->slash_pairs += diag_mass(runs[i].a, runs[i].b, n);
    out->slash_local += diag_mass(runs[i].a, sr_min64(runs[i].b, TRACE_LOCAL_OFFSET - 1), n);
  }
  if (out->slash_pairs > 0) {
    out->slash_local /= out->slash_pairs;
    static const double qs[3] = {0.5, 0.9, 0.99};
    for (int i = 0; i < 3; i++) out->slash_q[i] = diag_quantile(runs, nr, qs[i] * out->slash_pairs, n);
  }
  free(runs);
  return SR_OK;
}
