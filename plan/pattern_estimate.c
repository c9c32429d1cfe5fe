// pattern_estimate.c — CPU reference of MTraining's online vertical-slash estimation and of AdaSpa's block search
// (see pattern_estimate.h). Plain loops in float64: this is the ground truth the GPU estimators are tested against.
#include "plan/pattern_estimate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "plan/vs_fixed.h"

// ---------------------------------------------------------------------------------------------
// vertical-slash estimation

vs_est_opts vs_est_defaults(void) {
  vs_est_opts o = {.p = 0.9, .cap = 4096, .topk_v = 0, .topk_s = 0, .sinks = 0, .window = 0};
  return o;
}

static double score(const vs_est_query *qs, const float *k, int32_t qi, int32_t h, int64_t kj) {
  const float *qv = qs->q + ((int64_t)qi * qs->heads + h) * qs->head_dim;
  const float *kv = k + (kj * qs->kv_heads + h / (qs->heads / qs->kv_heads)) * qs->head_dim;
  double s = 0;
  for (int32_t x = 0; x < qs->head_dim; x++) s += (double)qv[x] * (double)kv[x];
  return s * (double)qs->scale;
}

// exp value in [0, 1] as fixed point (2^62 = 1): deterministic, so exact sums of them do not depend on order.
// exp and the rounding come from vs_fixed.h, which the GPU estimator shares, so both give the same bits.
static vs_acc to_fixed(double x) { return (vs_acc)vs_to_fixed(x); }

void vs_est_rowmax(const vs_est_query *qs, const float *k, const int64_t *kpos, int64_t n_k, double *row_max) {
  for (int32_t h = 0; h < qs->heads; h++)
    for (int32_t i = 0; i < qs->n_q; i++) {
      double *m = &row_max[(int64_t)h * qs->n_q + i];
      for (int64_t j = 0; j < n_k; j++)
        if (kpos[j] <= qs->qpos[i]) {
          double s = score(qs, k, i, h, j);
          if (s > *m) *m = s;
        }
    }
}

void vs_est_rowsum(const vs_est_query *qs, const float *k, const int64_t *kpos, int64_t n_k, const double *row_max,
                   vs_acc *row_sum) {
  for (int32_t h = 0; h < qs->heads; h++)
    for (int32_t i = 0; i < qs->n_q; i++) {
      int64_t r = (int64_t)h * qs->n_q + i;
      for (int64_t j = 0; j < n_k; j++)
        if (kpos[j] <= qs->qpos[i]) row_sum[r] += to_fixed(vs_exp_neg(score(qs, k, i, h, j) - row_max[r]));
    }
}

void vs_est_scores(const vs_est_query *qs, const float *k, const int64_t *kpos, int64_t n_k, const double *row_max,
                   const vs_acc *row_sum, vs_acc *vert, vs_acc *slash) {
  int64_t N = qs->n_tokens;
  for (int32_t h = 0; h < qs->heads; h++)
    for (int32_t i = 0; i < qs->n_q; i++) {
      int64_t r = (int64_t)h * qs->n_q + i;
      double total = vs_fixed_to_double(row_sum[r]);  // from the exact combined sum: the same on every rank
      if (!(total > 0)) continue;
      for (int64_t j = 0; j < n_k; j++) {
        if (kpos[j] > qs->qpos[i]) continue;
        vs_acc pr = to_fixed(vs_exp_neg(score(qs, k, i, h, j) - row_max[r]) / total);
        vert[(int64_t)h * N + kpos[j]] += pr;
        slash[(int64_t)h * N + (qs->qpos[i] - kpos[j])] += pr;
      }
    }
}

typedef struct {
  vs_acc s;
  int64_t idx;
} ranked;

static int cmp_ranked(const void *a, const void *b) {
  const ranked *x = a, *y = b;
  if (x->s != y->s) return x->s > y->s ? -1 : 1;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

// Pick indices of one score vector: forced [0, forced) first, then by score; returns the count in out.
static int32_t pick(const vs_acc *sc, int64_t N, int64_t forced, double p, int32_t cap, int32_t topk, ranked *tmp,
                    int32_t *out) {
  vs_acc total = 0, mass = 0;
  for (int64_t x = 0; x < N; x++) total += sc[x];
  forced = sr_min64(forced, N);
  int32_t n = 0;
  for (int64_t x = 0; x < forced; x++) {
    out[n++] = (int32_t)x;
    mass += sc[x];
  }
  int64_t m = 0;
  for (int64_t x = forced; x < N; x++) tmp[m++] = (ranked){.s = sc[x], .idx = x};
  qsort(tmp, (size_t)m, sizeof *tmp, cmp_ranked);
  for (int64_t x = 0; x < m; x++) {
    if (topk > 0) {
      if (x >= topk) break;
    } else if (vs_mass_reached(mass, total, p) || n >= cap) {  // exact: mass * 2^k >= mantissa(p) * total
      break;
    }
    out[n++] = (int32_t)tmp[x].idx;
    mass += tmp[x].s;
  }
  qsort(out, (size_t)n, sizeof *out, cmp_i32);
  return n;
}

int vs_est_select(const vs_acc *vert, const vs_acc *slash, const vs_est_query *qs, const vs_est_opts *o, pattern *p,
                  int layer, sr_error *e) {
  if (layer < 0 || layer >= p->layers || p->heads != qs->heads || p->n_tokens != qs->n_tokens)
    return sr_input_error(e, NULL, "estimate", "pattern shape (%d layers, %d heads, %lld tokens) does not match",
                          p->layers, p->heads, (long long)p->n_tokens);
  if (!(o->p > 0 && o->p <= 1) || o->cap < 1)
    return sr_input_error(e, NULL, "estimate", "top-p %g must be in (0, 1] and cap %d >= 1", o->p, o->cap);
  int64_t N = qs->n_tokens;
  ranked *tmp = malloc((size_t)N * sizeof *tmp);
  int32_t *buf = malloc((size_t)N * sizeof *buf);
  if (!tmp || !buf) {
    free(tmp);
    free(buf);
    return sr_internal_error(e, 0, "estimate: out of memory for %lld scores", (long long)N);
  }
  int topk = o->topk_v > 0 && o->topk_s > 0;
  int rc = SR_OK;
  for (int h = 0; h < qs->heads && !rc; h++) {
    head_pattern *hp = pattern_head(p, layer, h);
    free(hp->vertical);
    free(hp->slash);
    free(hp->mask);
    memset(hp, 0, sizeof *hp);
    hp->kind = PATTERN_VS;
    for (int part = 0; part < 2 && !rc; part++) {
      const vs_acc *sc = (part == 0 ? vert : slash) + (int64_t)h * N;
      int32_t n = pick(sc, N, part == 0 ? o->sinks : o->window, o->p, o->cap, topk ? (part == 0 ? o->topk_v : o->topk_s) : 0,
                       tmp, buf);
      int32_t *arr = malloc((size_t)n * sizeof *arr + 1);
      if (!arr) {
        rc = sr_internal_error(e, 0, "estimate: out of memory");
        break;
      }
      memcpy(arr, buf, (size_t)n * sizeof *arr);
      if (part == 0) hp->vertical = arr, hp->n_vertical = n;
      else hp->slash = arr, hp->n_slash = n;
    }
  }
  free(tmp);
  free(buf);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// AdaSpa block search

int adaspa_block_mass(const float *q, const float *k, int64_t n, int32_t heads, int32_t kv_heads, int32_t head_dim,
                      int32_t h, float scale, int32_t block, const double *lse, double *mass, sr_error *e) {
  if (block < 1 || heads < 1 || kv_heads < 1 || heads % kv_heads || h < 0 || h >= heads)
    return sr_input_error(e, NULL, "estimate", "bad AdaSpa shape (block %d, heads %d/%d, head %d)", block, heads,
                          kv_heads, h);
  int64_t nb = sr_cdiv(n, block);
  double *s = malloc((size_t)n * sizeof *s + 1);
  if (!s) return sr_internal_error(e, 0, "estimate: out of memory");
  memset(mass, 0, (size_t)(nb * nb) * sizeof *mass);
  int32_t kvh = h / (heads / kv_heads);
  for (int64_t i = 0; i < n; i++) {
    const float *qv = q + (i * heads + h) * head_dim;
    double m = -INFINITY;
    for (int64_t j = 0; j <= i; j++) {
      const float *kv = k + (j * kv_heads + kvh) * head_dim;
      double d = 0;
      for (int32_t x = 0; x < head_dim; x++) d += (double)qv[x] * (double)kv[x];
      s[j] = d * (double)scale;
      if (s[j] > m) m = s[j];
    }
    double row_lse;
    if (lse) {
      row_lse = lse[i];  // cached from an earlier dense pass
    } else {
      double z = 0;  // fused: the row's LSE from this pass
      for (int64_t j = 0; j <= i; j++) z += exp(s[j] - m);
      row_lse = m + log(z);
    }
    double *row = mass + (i / block) * nb;
    for (int64_t j = 0; j <= i; j++) row[j / block] += exp(s[j] - row_lse);
  }
  free(s);
  return SR_OK;
}

typedef struct {
  double m;
  int64_t c;
} mass_col;

static int cmp_mass(const void *a, const void *b) {
  const mass_col *x = a, *y = b;
  if (x->m != y->m) return x->m > y->m ? -1 : 1;
  return (x->c > y->c) - (x->c < y->c);
}

double adaspa_select(const double *mass, int64_t nb, double sparsity, int64_t row_words, uint64_t *mask) {
  mass_col *cols = malloc((size_t)nb * sizeof *cols + 1);
  double kept = 0, total = 0;
  memset(mask, 0, (size_t)(nb * row_words) * sizeof *mask);
  for (int64_t pb = 0; pb < nb && cols; pb++) {
    for (int64_t c = 0; c <= pb; c++) {
      cols[c] = (mass_col){.m = mass[pb * nb + c], .c = c};
      total += cols[c].m;
    }
    qsort(cols, (size_t)(pb + 1), sizeof *cols, cmp_mass);
    int64_t quota = (int64_t)ceil((1 - sparsity) * (double)(pb + 1) - 1e-9);
    quota = sr_max64(1, sr_min64(pb + 1, quota));
    for (int64_t x = 0; x < quota; x++) {
      mask[pb * row_words + cols[x].c / 64] |= 1ull << (cols[x].c % 64);
      kept += cols[x].m;
    }
  }
  free(cols);
  return total > 0 ? kept / total : 1.0;
}

typedef struct {
  double r;
  int h;
} head_rec;

static int cmp_rec(const void *a, const void *b) {
  const head_rec *x = a, *y = b;
  if (x->r != y->r) return x->r > y->r ? -1 : 1;
  return (x->h > y->h) - (x->h < y->h);
}

void adaspa_head_sparsity(const double *recall, int heads, double s, double threshold, double *out) {
  head_rec *hr = malloc((size_t)heads * sizeof *hr + 1);
  int n = 0;
  for (int h = 0; h < heads; h++) {
    out[h] = s;
    n += recall[h] > threshold;
    if (hr) hr[h] = (head_rec){.r = recall[h], .h = h};
  }
  if (!hr) return;
  if (n > heads / 2) n = heads / 2;
  qsort(hr, (size_t)heads, sizeof *hr, cmp_rec);
  for (int x = 0; x < n; x++) {
    out[hr[x].h] = (1 + s) / 2;                              // easy heads: sparser
    out[hr[heads - 1 - x].h] = fmax(0.0, (3 * s - 1) / 2);  // hard heads: denser; the mean stays s
  }
  free(hr);
}

int adaspa_search_layer(const float *q, const float *k, int64_t n, int32_t heads, int32_t kv_heads, int32_t head_dim,
                        float scale, int32_t block, const double *lse, double s, pattern *p, int layer, double *recall,
                        sr_error *e) {
  if (layer < 0 || layer >= p->layers || p->heads != heads || p->n_tokens != n)
    return sr_input_error(e, NULL, "estimate", "pattern shape does not match the AdaSpa inputs");
  if (!(s >= 0 && s < 1)) return sr_input_error(e, NULL, "estimate", "sparsity %g must be in [0, 1)", s);
  int64_t nb = sr_cdiv(n, block), rw = sr_cdiv(nb, 64);
  double *mass = malloc((size_t)(heads * nb * nb) * sizeof *mass + 1), *sp = malloc((size_t)heads * sizeof *sp + 1);
  if (!mass || !sp) {
    free(mass);
    free(sp);
    return sr_internal_error(e, 0, "estimate: out of memory for %lld x %lld block masses", (long long)nb, (long long)nb);
  }
  int rc = SR_OK;
  for (int h = 0; h < heads && !rc; h++) {
    head_pattern *hp = pattern_head(p, layer, h);
    free(hp->vertical);
    free(hp->slash);
    free(hp->mask);
    memset(hp, 0, sizeof *hp);
    hp->kind = PATTERN_BLOCK;
    hp->block = block;
    hp->n_blocks = nb;
    hp->row_words = rw;
    hp->mask = malloc((size_t)(nb * rw) * sizeof(uint64_t) + 1);
    if (!hp->mask) rc = sr_internal_error(e, 0, "estimate: out of memory");
    if (!rc)
      rc = adaspa_block_mass(q, k, n, heads, kv_heads, head_dim, h, scale, block, lse ? lse + (int64_t)h * n : NULL,
                             mass + (int64_t)h * nb * nb, e);
    if (!rc) recall[h] = adaspa_select(mass + (int64_t)h * nb * nb, nb, s, rw, hp->mask);
  }
  if (!rc) {
    adaspa_head_sparsity(recall, heads, s, 0.8, sp);
    for (int h = 0; h < heads; h++)
      recall[h] = adaspa_select(mass + (int64_t)h * nb * nb, nb, sp[h], rw, pattern_head(p, layer, h)->mask);
  }
  free(mass);
  free(sp);
  return rc;
}
