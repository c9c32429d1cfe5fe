// attn_inputs.c — deterministic attention inputs (attn_inputs.h): hashed uniform tensors and Q / K whose
// attention is vertical-slash, shared by `sparsering-exec attn` and bin/sparsering-bench-vs.
#include "kernels/attn_inputs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"

// splitmix64 (Steele, Lea, Flood 2014): a counter-based generator, so any element is computable alone.
static uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void attn_data_fill(uint64_t seed, int layer, int tensor, const int64_t *pos, int64_t n, int heads, int d, float *x) {
  uint64_t base = mix(seed ^ mix(((uint64_t)layer << 8) | (uint64_t)tensor));
  for (int64_t t = 0; t < n; t++) {
    uint64_t tok = mix(base ^ (uint64_t)pos[t]);
    for (int64_t i = 0; i < (int64_t)heads * d; i++) {
      uint64_t r = mix(tok + (uint64_t)i);
      x[t * heads * d + i] = (float)((double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// vertical-slash inputs

// Uniform in [-1, 1) from one hash.
static double unit(uint64_t r) { return (double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0; }

// Split of head_dim: the first `rot` dims (even) are rotated by RoPE, the last vdims carry the vertical channel.
static void vs_dims(int d, int *rot, int *vdims) {
  int v = d >= 2 * ATTN_VS_VDIMS ? ATTN_VS_VDIMS : d / 2;
  if ((d - v) % 2) v++;
  *rot = d - v, *vdims = v;
}

// Band profile f(delta) = (1/P) sum_p cos(theta_p delta): q.k of the content directions at offset delta
// (every pair carries 1/P of the energy, so f does not depend on the direction's phases).
static double vs_band(int rot, double delta) {
  int P = rot / 2;
  if (P == 0) return 1;
  double f = 0;
  for (int p = 0; p < P; p++) f += cos(delta * pow(ATTN_VS_ROPE_BASE, -2.0 * p / rot));
  return f / P;
}

void attn_vs_bonus(int64_t n_tokens, int d, double *sink, double *vert) {
  int rot, vd;
  vs_dims(d, &rot, &vd);
  // S_b: the band's attention mass in units of the peak's, exp(T (f(delta) - 1)) summed over offsets.
  double sb = 0;
  for (int64_t t = 0; t < sr_min64(n_tokens, 16384); t++) sb += exp(ATTN_VS_PEAK * (vs_band(rot, (double)t) - 1));
  double share_band = 1 - ATTN_VS_SHARE_SINK - ATTN_VS_SHARE_VERT;
  double nv = sr_max64(1, (n_tokens - ATTN_VS_SINKS) / ATTN_VS_VERT_EVERY);
  // A late query gives the band e^T S_b, each sink e^{b_sink}, each vertical e^{b_vert} (far from the diagonal
  // the content term averages 0), so these bonuses give the target shares.
  *sink = ATTN_VS_PEAK + log(ATTN_VS_SHARE_SINK * sb / (share_band * ATTN_VS_SINKS));
  *vert = ATTN_VS_PEAK + log(ATTN_VS_SHARE_VERT * sb / (share_band * nv));
}

int attn_vs_planted(uint64_t seed, int layer, int kv_head, int64_t pos) {
  if (pos < ATTN_VS_SINKS) return 0;
  uint64_t r = mix(mix(seed ^ mix(((uint64_t)layer << 8) | 0xf1u)) ^ mix(((uint64_t)kv_head << 40) ^ (uint64_t)pos));
  return r % ATTN_VS_VERT_EVERY == 0;
}

// Q (tensor ATTN_Q, heads query heads) or K (ATTN_K, heads = kv_heads): with s = sqrt(T sqrt(d)),
//   Q[i, h] = s [R(i) (a_g + eta n_Q(i, h)) ; w_g],  K[j, g] = s [R(j) (c_j a_g + eta n_K(j, g)) ; (b_j / T) w_g]
// g the head's KV head, a_g and w_g unit directions, R(i) RoPE at position i, b_j the sink / vertical bonus
// and c_j = 0 for sinks and planted verticals, b_j = 0 and c_j = 1 for other keys. The logit q.k / sqrt(d) is
// T f(i - j) + noise for other keys and b_j + noise for sinks and verticals (a content term there would add
// T f(i - j), which far from the diagonal swings by several logits from key to key).
static int vs_fill(uint64_t seed, int layer, int tensor, const int64_t *pos, int64_t n, int64_t n_tokens, int heads,
                   int group, int d, float *x, sr_error *e) {
  int rot, vd;
  vs_dims(d, &rot, &vd);
  int P = rot / 2;
  double T = ATTN_VS_PEAK, s = sqrt(T * sqrt((double)d)), bs, bv;
  attn_vs_bonus(n_tokens, d, &bs, &bv);
  double *dir = malloc(sizeof(double) * (size_t)(heads * d + 3 * P + 1));
  if (!dir) return sr_internal_error(e, 0, "out of memory");
  double *cs = dir + heads * d, *theta = cs + 2 * P;
  for (int p = 0; p < P; p++) theta[p] = pow(ATTN_VS_ROPE_BASE, -2.0 * p / rot);
  uint64_t hb = mix(seed ^ mix(((uint64_t)layer << 8) | 0xa5u));
  for (int h = 0; h < heads; h++) {  // a_g (phases hashed, |a_p|^2 = 1/P) and w_g of the head's KV head
    int g = h / group;
    double *a = dir + h * d, norm = 0;
    for (int p = 0; p < P; p++) {
      double phi = M_PI * unit(mix(hb ^ mix(((uint64_t)g << 32) | (uint64_t)p)));
      a[2 * p] = cos(phi) / sqrt((double)P), a[2 * p + 1] = sin(phi) / sqrt((double)P);
    }
    for (int v = 0; v < vd; v++) a[rot + v] = unit(mix(hb ^ mix(((uint64_t)g << 32) | (uint64_t)(1 << 20) | (uint64_t)v)));
    for (int v = 0; v < vd; v++) norm += a[rot + v] * a[rot + v];
    for (int v = 0; v < vd; v++) a[rot + v] /= norm > 0 ? sqrt(norm) : 1;
  }
  uint64_t base = mix(seed ^ mix(((uint64_t)layer << 8) | (uint64_t)tensor | 0x80u));
  double amp = sqrt(3.0 / (rot > 0 ? rot : 1));  // noise entries of variance 1 / rot: |n| ~ 1
  for (int64_t t = 0; t < n; t++) {
    for (int p = 0; p < P; p++) {
      double ang = (double)pos[t] * theta[p];
      cs[2 * p] = cos(ang), cs[2 * p + 1] = sin(ang);
    }
    for (int h = 0; h < heads; h++) {
      double vscale = 1, content = 1;  // a sink or vertical key drops the content: its logit is b_j alone
      if (tensor == ATTN_K) {
        vscale = pos[t] < ATTN_VS_SINKS ? bs / T : attn_vs_planted(seed, layer, h, pos[t]) ? bv / T : 0;
        content = vscale == 0;
      }
      const double *a = dir + h * d;
      uint64_t tok = mix(base ^ mix(((uint64_t)pos[t] << 12) ^ (uint64_t)h));
      float *o = x + (t * heads + h) * d;
      for (int p = 0; p < P; p++) {
        double u0 = content * a[2 * p] + ATTN_VS_NOISE * amp * unit(mix(tok + (uint64_t)(2 * p)));
        double u1 = content * a[2 * p + 1] + ATTN_VS_NOISE * amp * unit(mix(tok + (uint64_t)(2 * p + 1)));
        o[2 * p] = (float)(s * (u0 * cs[2 * p] - u1 * cs[2 * p + 1]));
        o[2 * p + 1] = (float)(s * (u0 * cs[2 * p + 1] + u1 * cs[2 * p]));
      }
      for (int v = 0; v < vd; v++) o[rot + v] = (float)(s * vscale * a[rot + v]);
    }
  }
  free(dir);
  return SR_OK;
}

int attn_inputs_parse(const char *s, int *kind, sr_error *e) {
  if (strcmp(s, "random") == 0) *kind = ATTN_INPUTS_RANDOM;
  else if (strcmp(s, "vs") == 0) *kind = ATTN_INPUTS_VS;
  else return sr_input_error(e, NULL, "--inputs", "'%s': expected random or vs", s);
  return SR_OK;
}

int attn_inputs_fill(int kind, uint64_t seed, int layer, int tensor, const int64_t *pos, int64_t n, int64_t n_tokens,
                     int heads, int kv_heads, int d, float *x, sr_error *e) {
  int nh = tensor == ATTN_K || tensor == ATTN_V ? kv_heads : heads;
  if (kind == ATTN_INPUTS_VS && (tensor == ATTN_Q || tensor == ATTN_K))
    return vs_fill(seed, layer, tensor, pos, n, n_tokens, nh, tensor == ATTN_Q ? heads / kv_heads : 1, d, x, e);
  attn_data_fill(seed, layer, tensor, pos, n, nh, d, x);
  return SR_OK;
}
