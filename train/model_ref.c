// model_ref.c — CPU references of the GPU model's fused kernels (model_ref.h), in float as the kernels compute,
// row sums in double (the order differs from the kernels' tree sums anyway).
#include "train/model_ref.h"

#include <math.h>
#include <string.h>

#include "plan/model.h"

float model_bf16_round(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);                  // round to nearest, ties to even (infinities stay)
  u &= 0xffff0000u;
  memcpy(&x, &u, sizeof x);
  return x;
}

static float act(int act_bf16, float x) { return act_bf16 ? model_bf16_round(x) : x; }

void model_ref_rmsnorm_fwd(int act_bf16, const float *x, const float *w, int64_t T, int C, float eps, float *out,
                           float *rstd) {
  for (int64_t t = 0; t < T; t++) {
    const float *xt = x + t * C;
    double ss = 0;
    for (int i = 0; i < C; i++) ss += (double)xt[i] * xt[i];
    float r = (float)(1.0 / sqrt(ss / C + eps));
    rstd[t] = r;
    for (int i = 0; i < C; i++) out[t * C + i] = act(act_bf16, xt[i] * r * w[i]);
  }
}

void model_ref_rmsnorm_bwd(int act_bf16, float *dx, float *dx_act, float *tmp, const float *dout, const float *x,
                           const float *w, const float *rstd, int64_t T, int C) {
  for (int64_t t = 0; t < T; t++) {
    const float *xt = x + t * C, *dy = dout + t * C;
    float r = rstd[t];
    double dot = 0;
    for (int i = 0; i < C; i++) dot += (double)dy[i] * w[i] * xt[i];
    float c = (float)(dot * r * r * r / C);
    for (int i = 0; i < C; i++) {
      float g = dx[t * C + i] + dy[i] * w[i] * r - c * xt[i];
      dx[t * C + i] = g;
      if (dx_act) dx_act[t * C + i] = act(act_bf16, g);
      tmp[t * C + i] = dy[i] * xt[i] * r;
    }
  }
}

void model_ref_rope_table(const int64_t *pos, const double *inv_freq, double mscale, int64_t T, int half, float *cosv,
                          float *sinv) {
  for (int64_t t = 0; t < T; t++)
    for (int i = 0; i < half; i++) {
      double ang = (double)pos[t] * inv_freq[i];
      cosv[t * half + i] = (float)(cos(ang) * mscale);
      sinv[t * half + i] = (float)(sin(ang) * mscale);
    }
}

// Rotate the pairs (i, i + D/2) of `heads` heads of row src (D each) by (c, s) x f into dst (dst may be src).
static void rotate(const float *src, float *dst, int heads, int D, const float *cs, const float *sn, float f, float sign) {
  int half = D / 2;
  for (int h = 0; h < heads; h++)
    for (int i = 0; i < half; i++) {
      float a = src[h * D + i], b = src[h * D + i + half], c = cs[i] * f, s = sign * sn[i] * f;
      dst[h * D + i] = a * c - b * s;
      dst[h * D + i + half] = b * c + a * s;
    }
}

void model_ref_qkv_post(const float *qkv, const float *bq, const float *bk, const float *bv, const float *cosv,
                        const float *sinv, const int64_t *pos, int64_t logn_len, int64_t T, int Hq, int Hkv, int D,
                        float *q, float *k, float *v) {
  int QD = Hq * D, KD = Hkv * D, W = QD + 2 * KD, half = D / 2;
  for (int64_t t = 0; t < T; t++) {
    const float *row = qkv + t * W;
    float *qt = q + t * QD, *kt = k + t * KD, *vt = v + t * KD;
    for (int j = 0; j < QD; j++) qt[j] = row[j] + (bq ? bq[j] : 0.0f);
    for (int j = 0; j < KD; j++) kt[j] = row[QD + j] + (bk ? bk[j] : 0.0f);
    for (int j = 0; j < KD; j++) vt[j] = model_bf16_round(row[QD + KD + j] + (bv ? bv[j] : 0.0f));
    float f = (float)model_logn_factor(pos[t], logn_len);
    rotate(qt, qt, Hq, D, cosv + t * half, sinv + t * half, f, 1.0f);
    rotate(kt, kt, Hkv, D, cosv + t * half, sinv + t * half, 1.0f, 1.0f);
    for (int j = 0; j < QD; j++) qt[j] = model_bf16_round(qt[j]);
    for (int j = 0; j < KD; j++) kt[j] = model_bf16_round(kt[j]);
  }
}

void model_ref_qkv_bwd_post(int act_bf16, float *dq, float *dk, const float *dv, const float *cosv, const float *sinv,
                            const int64_t *pos, int64_t logn_len, int64_t T, int Hq, int Hkv, int D, float *dqkv) {
  int QD = Hq * D, KD = Hkv * D, W = QD + 2 * KD, half = D / 2;
  for (int64_t t = 0; t < T; t++) {
    float f = (float)model_logn_factor(pos[t], logn_len);
    rotate(dq + t * QD, dq + t * QD, Hq, D, cosv + t * half, sinv + t * half, f, -1.0f);
    rotate(dk + t * KD, dk + t * KD, Hkv, D, cosv + t * half, sinv + t * half, 1.0f, -1.0f);
    float *row = dqkv + t * W;
    for (int j = 0; j < QD; j++) row[j] = act(act_bf16, dq[t * QD + j]);
    for (int j = 0; j < KD; j++) row[QD + j] = act(act_bf16, dk[t * KD + j]);
    for (int j = 0; j < KD; j++) row[QD + KD + j] = act(act_bf16, dv[t * KD + j]);
  }
}

void model_ref_swiglu_fwd(int act_bf16, const float *gu, int64_t T, int I, float *h) {
  for (int64_t t = 0; t < T; t++)
    for (int j = 0; j < I; j++) {
      float g = gu[t * 2 * I + j], u = gu[t * 2 * I + I + j];
      h[t * I + j] = act(act_bf16, g / (1.0f + expf(-g)) * u);
    }
}

void model_ref_swiglu_bwd(int act_bf16, const float *dh, const float *gu, int64_t T, int I, float *dgu) {
  for (int64_t t = 0; t < T; t++)
    for (int j = 0; j < I; j++) {
      float g = gu[t * 2 * I + j], u = gu[t * 2 * I + I + j], d = dh[t * I + j], s = 1.0f / (1.0f + expf(-g));
      dgu[t * 2 * I + I + j] = act(act_bf16, d * g * s);
      dgu[t * 2 * I + j] = act(act_bf16, d * u * s * (1.0f + g * (1.0f - s)));
    }
}

void model_ref_cross_entropy(int act_bf16, float *logits, int64_t rows, int V, const int32_t *targets, float scale,
                             int grads, float *losses, int32_t *argmax) {
  for (int64_t r = 0; r < rows; r++) {
    float *lg = logits + r * V;
    int best = 0;
    for (int j = 1; j < V; j++)
      if (lg[j] > lg[best]) best = j;
    double sum = 0;
    for (int j = 0; j < V; j++) sum += exp((double)lg[j] - lg[best]);
    int tgt = targets[r];
    argmax[r] = best;
    losses[r] = tgt >= 0 ? (float)(lg[best] + log(sum) - lg[tgt]) : 0.0f;
    if (!grads) continue;
    float mx = lg[best];
    for (int j = 0; j < V; j++)
      lg[j] = tgt < 0 ? 0.0f : act(act_bf16, (float)((exp((double)lg[j] - mx) / sum - (j == tgt)) * scale));
  }
}
