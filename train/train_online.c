// train_online.c — MTraining's online vertical-slash estimation for the trainer (train_online.h), on top of
// the float64 reference passes and the top-p selection of plan/pattern_estimate.c.
#include "train/train_online.h"

#include "plan/pattern_spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int online_vs_from_spec(online_vs *o, const char *spec, sr_error *e) {
  memset(o, 0, sizeof *o);
  o->n_last = 64;  // MTraining / MInference estimate from the last 64 queries
  return pattern_spec_online_opts(spec, &o->opts, e);
}

int online_vs_select(const online_vs *o, const float *vert, const float *slash, int heads, pattern *pat, int layer,
                     sr_error *e) {
  int64_t N = pat->n_tokens, n = (int64_t)heads * N;
  vs_acc *v = malloc((size_t)(2 * n) * sizeof *v);
  if (!v) return sr_internal_error(e, 0, "online estimate: out of memory for %lld scores", (long long)n);
  // the selection ranks fixed-point sums (2^62 = 1.0), exact to add; a probability sum is at most n_last
  for (int64_t i = 0; i < n; i++) {
    v[i] = (vs_acc)((double)fmaxf(vert[i], 0.0f) * VS_ACC_ONE);
    v[n + i] = (vs_acc)((double)fmaxf(slash[i], 0.0f) * VS_ACC_ONE);
  }
  vs_est_query qs = {0};
  qs.heads = heads;
  qs.n_tokens = N;
  int rc = vs_est_select(v, v + n, &qs, &o->opts, pat, layer, e);
  free(v);
  return rc;
}

static int by_pos(const void *a, const void *b, void *pos) {
  int64_t x = ((const int64_t *)pos)[*(const int64_t *)a], y = ((const int64_t *)pos)[*(const int64_t *)b];
  return (x > y) - (x < y);
}

int online_vs_estimate(const online_vs *o, const float *q, const float *k, const int64_t *pos, int64_t T, int heads,
                       int kv_heads, int head_dim, pattern *pat, int layer, sr_error *e) {
  int64_t N = pat->n_tokens, nq = T < o->n_last ? T : o->n_last;
  int64_t *idx = malloc((size_t)(T > 0 ? T : 1) * sizeof *idx);
  float *qb = malloc((size_t)(nq * heads * head_dim + 1) * sizeof *qb);
  int64_t *qpos = malloc((size_t)(nq + 1) * sizeof *qpos);
  double *row_max = malloc((size_t)(heads * nq + 1) * sizeof *row_max);
  vs_acc *row_sum = calloc((size_t)(heads * nq + 1), sizeof *row_sum);
  vs_acc *sc = calloc((size_t)(2 * heads * N), sizeof *sc);
  int rc = SR_OK;
  if (!idx || !qb || !qpos || !row_max || !row_sum || !sc) {
    rc = sr_internal_error(e, 0, "online estimate: out of memory for %lld tokens", (long long)N);
    goto done;
  }
  // the queries: the nq rows of largest position, in position order
  for (int64_t i = 0; i < T; i++) idx[i] = i;
  qsort_r(idx, (size_t)T, sizeof *idx, by_pos, (void *)pos);
  for (int64_t r = 0; r < nq; r++) {
    int64_t i = idx[T - nq + r];
    memcpy(qb + r * heads * head_dim, q + i * heads * head_dim, (size_t)(heads * head_dim) * sizeof *qb);
    qpos[r] = pos[i];
  }
  vs_est_query qs = {heads, kv_heads, head_dim, (int32_t)nq, N, (float)(1.0 / sqrt((double)head_dim)), qb, qpos};
  for (int64_t i = 0; i < heads * nq; i++) row_max[i] = -INFINITY;
  vs_est_rowmax(&qs, k, pos, T, row_max);
  vs_est_rowsum(&qs, k, pos, T, row_max, row_sum);
  vs_est_scores(&qs, k, pos, T, row_max, row_sum, sc, sc + (int64_t)heads * N);
  rc = vs_est_select(sc, sc + (int64_t)heads * N, &qs, &o->opts, pat, layer, e);
done:
  free(idx);
  free(qb);
  free(qpos);
  free(row_max);
  free(row_sum);
  free(sc);
  return rc;
}
