// dense_ref.c — brute-force dense masked attention, forward and backward, in float64 (dense_ref.h).
// Heads are independent, so they run on threads (one head each, in turn); backward gives every head
// its own dK/dV rows and sums them in head order afterwards, so the result does not depend on timing.
#include "exec/dense_ref.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  const pattern *p;
  int layer, H, Hkv, d, bwd;
  int64_t N;
  float scale;
  const float *q, *k, *v, *o, *lse, *dout;
  float *o_out, *lse_out;
  double *gq, *gk_h, *gv_h;  // backward: dQ [N, H, d]; per head dK, dV [H][N, d]
  int next_head, failed;
  pthread_mutex_t lock;
} dense_job;

static void fwd_head(dense_job *j, int h, double *s, double *acc);
static void bwd_head(dense_job *j, int h);

static void *worker(void *arg) {
  dense_job *j = arg;
  double *s = malloc(sizeof(double) * (size_t)(j->N > 0 ? j->N : 1)), *acc = malloc(sizeof(double) * (size_t)j->d);
  if (!s || !acc) {
    pthread_mutex_lock(&j->lock);
    j->failed = 1;
    pthread_mutex_unlock(&j->lock);
  }
  for (;;) {
    pthread_mutex_lock(&j->lock);
    int h = j->failed ? j->H : j->next_head++;
    pthread_mutex_unlock(&j->lock);
    if (h >= j->H) break;
    if (j->bwd) bwd_head(j, h);
    else fwd_head(j, h, s, acc);
  }
  free(s), free(acc);
  return NULL;
}

static int run_heads(dense_job *j) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int n = (int)(cpus < 1 ? 1 : cpus > j->H ? j->H : cpus);
  pthread_t t[256];
  if (n > 256) n = 256;
  pthread_mutex_init(&j->lock, NULL);
  int started = 0;
  for (int i = 0; i < n; i++)
    if (pthread_create(&t[i], NULL, worker, j) == 0) started++;
  if (started == 0) worker(j);
  for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
  pthread_mutex_destroy(&j->lock);
  return j->failed ? -1 : 0;
}

static void fwd_head(dense_job *j, int h, double *s, double *acc) {
  const head_pattern *hp = pattern_head(j->p, j->layer, h);
  int d = j->d, H = j->H, Hkv = j->Hkv, kh = h / (H / Hkv);
  int64_t N = j->N;
  for (int64_t i = 0; i < N; i++) {
    const float *qi = j->q + (i * H + h) * d;
    double m = -INFINITY;
    for (int64_t t = 0; t <= i; t++) {
      s[t] = -INFINITY;
      if (!pattern_keeps(hp, i, t)) continue;
      const float *kt = j->k + (t * Hkv + kh) * d;
      double dot = 0;
      for (int x = 0; x < d; x++) dot += (double)qi[x] * kt[x];
      s[t] = dot * j->scale;
      if (s[t] > m) m = s[t];
    }
    float *oi = j->o_out + (i * H + h) * d;
    if (m == -INFINITY) {  // no kept key: docs/design.md, "The LSE merge"
      memset(oi, 0, sizeof(float) * (size_t)d);
      j->lse_out[h * N + i] = -INFINITY;
      continue;
    }
    double sum = 0;
    memset(acc, 0, sizeof(double) * (size_t)d);
    for (int64_t t = 0; t <= i; t++) {
      if (s[t] == -INFINITY) continue;
      double w = exp(s[t] - m);
      sum += w;
      const float *vt = j->v + (t * Hkv + kh) * d;
      for (int x = 0; x < d; x++) acc[x] += w * vt[x];
    }
    for (int x = 0; x < d; x++) oi[x] = (float)(acc[x] / sum);
    j->lse_out[h * N + i] = (float)(m + log(sum));
  }
}

int dense_attn_fwd(const pattern *p, int layer, int64_t N, int H, int Hkv, int d, float scale, const float *q,
                   const float *k, const float *v, float *o, float *lse) {
  dense_job j = {.p = p, .layer = layer, .H = H, .Hkv = Hkv, .d = d, .N = N, .scale = scale, .q = q, .k = k, .v = v,
                 .o_out = o, .lse_out = lse};
  return run_heads(&j);
}

static void bwd_head(dense_job *j, int h) {
  const head_pattern *hp = pattern_head(j->p, j->layer, h);
  int d = j->d, H = j->H, Hkv = j->Hkv, kh = h / (H / Hkv);
  int64_t N = j->N;
  double *gk = j->gk_h + (int64_t)h * N * d, *gv = j->gv_h + (int64_t)h * N * d;
  for (int64_t i = 0; i < N; i++) {
    double L = j->lse[h * N + i];
    if (L == -INFINITY) continue;
    const float *qi = j->q + (i * H + h) * d, *doi = j->dout + (i * H + h) * d, *oi = j->o + (i * H + h) * d;
    double D = 0;  // rowsum(dO * O), FlashAttention-2's backward
    for (int x = 0; x < d; x++) D += (double)doi[x] * oi[x];
    for (int64_t t = 0; t <= i; t++) {
      if (!pattern_keeps(hp, i, t)) continue;
      const float *kt = j->k + (t * Hkv + kh) * d, *vt = j->v + (t * Hkv + kh) * d;
      double dot = 0, dp = 0;
      for (int x = 0; x < d; x++) dot += (double)qi[x] * kt[x], dp += (double)doi[x] * vt[x];
      double P = exp(dot * j->scale - L), ds = P * (dp - D);
      for (int x = 0; x < d; x++) {
        gv[t * d + x] += P * doi[x];
        j->gq[(i * H + h) * d + x] += j->scale * ds * kt[x];
        gk[t * d + x] += j->scale * ds * qi[x];
      }
    }
  }
}

int dense_attn_bwd(const pattern *p, int layer, int64_t N, int H, int Hkv, int d, float scale, const float *q,
                   const float *k, const float *v, const float *o, const float *lse, const float *dout, float *dq,
                   float *dk, float *dv) {
  dense_job j = {.p = p, .layer = layer, .H = H, .Hkv = Hkv, .d = d, .N = N, .scale = scale, .q = q, .k = k, .v = v,
                 .o = o, .lse = lse, .dout = dout, .bwd = 1};
  j.gq = calloc((size_t)(N * H * d), sizeof(double));
  j.gk_h = calloc((size_t)(N * H * d), sizeof(double));
  j.gv_h = calloc((size_t)(N * H * d), sizeof(double));
  int rc = -1;
  if (j.gq && j.gk_h && j.gv_h && run_heads(&j) == 0) {
    for (int64_t x = 0; x < N * H * d; x++) dq[x] = (float)j.gq[x];
    int g = H / Hkv;
    for (int64_t t = 0; t < N; t++)
      for (int kh = 0; kh < Hkv; kh++)
        for (int x = 0; x < d; x++) {
          double sk = 0, sv = 0;
          for (int h = kh * g; h < (kh + 1) * g; h++)  // fixed head order: deterministic sums
            sk += j.gk_h[((int64_t)h * N + t) * d + x], sv += j.gv_h[((int64_t)h * N + t) * d + x];
          dk[(t * Hkv + kh) * d + x] = (float)sk, dv[(t * Hkv + kh) * d + x] = (float)sv;
        }
    rc = 0;
  }
  free(j.gq), free(j.gk_h), free(j.gv_h);
  return rc;
}
