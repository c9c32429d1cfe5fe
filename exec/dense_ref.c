// dense_ref.c — brute-force dense masked attention, forward and backward, in float64 (dense_ref.h).
#include "exec/dense_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int dense_attn_fwd(const pattern *p, int layer, int64_t N, int H, int Hkv, int d, float scale, const float *q,
                   const float *k, const float *v, float *o, float *lse) {
  double *s = malloc(sizeof(double) * (size_t)(N > 0 ? N : 1)), *acc = malloc(sizeof(double) * (size_t)d);
  if (!s || !acc) {
    free(s), free(acc);
    return -1;
  }
  int g = H / Hkv;
  for (int h = 0; h < H; h++) {
    const head_pattern *hp = pattern_head(p, layer, h);
    int kh = h / g;
    for (int64_t i = 0; i < N; i++) {
      const float *qi = q + (i * H + h) * d;
      double m = -INFINITY;
      for (int64_t j = 0; j <= i; j++) {
        s[j] = -INFINITY;
        if (!pattern_keeps(hp, i, j)) continue;
        const float *kj = k + (j * Hkv + kh) * d;
        double dot = 0;
        for (int x = 0; x < d; x++) dot += (double)qi[x] * kj[x];
        s[j] = dot * scale;
        if (s[j] > m) m = s[j];
      }
      float *oi = o + (i * H + h) * d;
      if (m == -INFINITY) {  // no kept key: the convention of DESIGN.md
        memset(oi, 0, sizeof(float) * (size_t)d);
        lse[h * N + i] = -INFINITY;
        continue;
      }
      double sum = 0;
      memset(acc, 0, sizeof(double) * (size_t)d);
      for (int64_t j = 0; j <= i; j++) {
        if (s[j] == -INFINITY) continue;
        double w = exp(s[j] - m);
        sum += w;
        const float *vj = v + (j * Hkv + kh) * d;
        for (int x = 0; x < d; x++) acc[x] += w * vj[x];
      }
      for (int x = 0; x < d; x++) oi[x] = (float)(acc[x] / sum);
      lse[h * N + i] = (float)(m + log(sum));
    }
  }
  free(s), free(acc);
  return 0;
}

int dense_attn_bwd(const pattern *p, int layer, int64_t N, int H, int Hkv, int d, float scale, const float *q,
                   const float *k, const float *v, const float *o, const float *lse, const float *dout, float *dq,
                   float *dk, float *dv) {
  double *gq = calloc((size_t)(N * H * d), sizeof(double));
  double *gk = calloc((size_t)(N * Hkv * d), sizeof(double)), *gv = calloc((size_t)(N * Hkv * d), sizeof(double));
  if (!gq || !gk || !gv) {
    free(gq), free(gk), free(gv);
    return -1;
  }
  int g = H / Hkv;
  for (int h = 0; h < H; h++) {
    const head_pattern *hp = pattern_head(p, layer, h);
    int kh = h / g;
    for (int64_t i = 0; i < N; i++) {
      double L = lse[h * N + i];
      if (L == -INFINITY) continue;
      const float *qi = q + (i * H + h) * d, *doi = dout + (i * H + h) * d, *oi = o + (i * H + h) * d;
      double D = 0;  // rowsum(dO * O), FlashAttention-2's backward
      for (int x = 0; x < d; x++) D += (double)doi[x] * oi[x];
      for (int64_t j = 0; j <= i; j++) {
        if (!pattern_keeps(hp, i, j)) continue;
        const float *kj = k + (j * Hkv + kh) * d, *vj = v + (j * Hkv + kh) * d;
        double dot = 0, dp = 0;
        for (int x = 0; x < d; x++) dot += (double)qi[x] * kj[x], dp += (double)doi[x] * vj[x];
        double P = exp(dot * scale - L), ds = P * (dp - D);
        for (int x = 0; x < d; x++) {
          gv[(j * Hkv + kh) * d + x] += P * doi[x];
          gq[(i * H + h) * d + x] += scale * ds * kj[x];
          gk[(j * Hkv + kh) * d + x] += scale * ds * qi[x];
        }
      }
    }
  }
  for (int64_t x = 0; x < N * H * d; x++) dq[x] = (float)gq[x];
  for (int64_t x = 0; x < N * Hkv * d; x++) dk[x] = (float)gk[x], dv[x] = (float)gv[x];
  free(gq), free(gk), free(gv);
  return 0;
}
