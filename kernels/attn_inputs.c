// attn_inputs.c — deterministic attention inputs (attn_inputs.h): hashed uniform tensors and Q / K whose
// attention is vertical-slash, shared by `sparsering-exec attn` and bin/sparsering-bench-vs.
#include "kernels/attn_inputs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/parallel.h"
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
// What every token of one (seed, layer, tensor) shares: the heads' directions, the RoPE frequencies, the bonuses.
typedef struct {
  uint64_t seed, base;
  int layer, tensor, heads, d, rot, vd, P;
  double T, s, bs, bv, amp;
  double *dir, *theta;  // [heads * d], [P]
} vs_setup;

static int vs_prepare(uint64_t seed, int layer, int tensor, int64_t n_tokens, int heads, int group, int d, vs_setup *v,
                      sr_error *e) {
  memset(v, 0, sizeof *v);
  int rot, vd;
  vs_dims(d, &rot, &vd);
  int P = rot / 2;
  v->seed = seed, v->layer = layer, v->tensor = tensor, v->heads = heads, v->d = d, v->rot = rot, v->vd = vd, v->P = P;
  v->T = ATTN_VS_PEAK, v->s = sqrt(v->T * sqrt((double)d));
  attn_vs_bonus(n_tokens, d, &v->bs, &v->bv);
  v->dir = malloc(sizeof(double) * (size_t)(heads * d + P + 1));
  if (!v->dir) return sr_internal_error(e, 0, "out of memory");
  v->theta = v->dir + heads * d;
  for (int p = 0; p < P; p++) v->theta[p] = pow(ATTN_VS_ROPE_BASE, -2.0 * p / rot);
  uint64_t hb = mix(seed ^ mix(((uint64_t)layer << 8) | 0xa5u));
  for (int h = 0; h < heads; h++) {  // a_g (phases hashed, |a_p|^2 = 1/P) and w_g of the head's KV head
    int g = h / group;
    double *a = v->dir + h * d, norm = 0;
    for (int p = 0; p < P; p++) {
      double phi = M_PI * unit(mix(hb ^ mix(((uint64_t)g << 32) | (uint64_t)p)));
      a[2 * p] = cos(phi) / sqrt((double)P), a[2 * p + 1] = sin(phi) / sqrt((double)P);
    }
    for (int i = 0; i < vd; i++) a[rot + i] = unit(mix(hb ^ mix(((uint64_t)g << 32) | (uint64_t)(1 << 20) | (uint64_t)i)));
    for (int i = 0; i < vd; i++) norm += a[rot + i] * a[rot + i];
    for (int i = 0; i < vd; i++) a[rot + i] /= norm > 0 ? sqrt(norm) : 1;
  }
  v->base = mix(seed ^ mix(((uint64_t)layer << 8) | (uint64_t)tensor | 0x80u));
  v->amp = sqrt(3.0 / (rot > 0 ? rot : 1));  // noise entries of variance 1 / rot: |n| ~ 1
  return SR_OK;
}

// Tokens pos[0..n) of the prepared tensor into x [n, heads, d]; cs: 2 P doubles of scratch.
static void vs_fill_range(const vs_setup *v, const int64_t *pos, int64_t n, float *x, double *cs) {
  int d = v->d, rot = v->rot, P = v->P;
  for (int64_t t = 0; t < n; t++) {
    for (int p = 0; p < P; p++) {
      double ang = (double)pos[t] * v->theta[p];
      cs[2 * p] = cos(ang), cs[2 * p + 1] = sin(ang);
    }
    for (int h = 0; h < v->heads; h++) {
      double vscale = 1, content = 1;  // a sink or vertical key drops the content: its logit is b_j alone
      if (v->tensor == ATTN_K) {
        vscale = pos[t] < ATTN_VS_SINKS ? v->bs / v->T : attn_vs_planted(v->seed, v->layer, h, pos[t]) ? v->bv / v->T : 0;
        content = vscale == 0;
      }
      const double *a = v->dir + h * d;
      uint64_t tok = mix(v->base ^ mix(((uint64_t)pos[t] << 12) ^ (uint64_t)h));
      float *o = x + (t * v->heads + h) * d;
      for (int p = 0; p < P; p++) {
        double u0 = content * a[2 * p] + ATTN_VS_NOISE * v->amp * unit(mix(tok + (uint64_t)(2 * p)));
        double u1 = content * a[2 * p + 1] + ATTN_VS_NOISE * v->amp * unit(mix(tok + (uint64_t)(2 * p + 1)));
        o[2 * p] = (float)(v->s * (u0 * cs[2 * p] - u1 * cs[2 * p + 1]));
        o[2 * p + 1] = (float)(v->s * (u0 * cs[2 * p + 1] + u1 * cs[2 * p]));
      }
      for (int i = 0; i < v->vd; i++) o[rot + i] = (float)(v->s * vscale * a[rot + i]);
    }
  }
}

// The fill in chunks of tokens over the host's threads (sr_threads): every element is a function of its token
// alone, so the values do not depend on the chunks or the thread count (a 512K-token layer's Q and dO are 1.07e9
// elements each, seconds on one thread).
#define FILL_CHUNK 4096
typedef struct {
  int kind, tensor, nh, d;
  uint64_t seed;
  int layer;
  const int64_t *pos;
  int64_t n;
  float *x;
  const vs_setup *vs;
} fill_ctx;

static int fill_item(void *ctx, int item, int thread, sr_error *e) {
  (void)thread;
  const fill_ctx *f = ctx;
  int64_t t0 = (int64_t)item * FILL_CHUNK, cnt = sr_min64(FILL_CHUNK, f->n - t0);
  float *x = f->x + t0 * f->nh * f->d;
  if (!f->vs) {
    attn_data_fill(f->seed, f->layer, f->tensor, f->pos + t0, cnt, f->nh, f->d, x);
    return SR_OK;
  }
  double *cs = malloc(sizeof(double) * (size_t)(2 * f->vs->P + 1));
  if (!cs) return sr_internal_error(e, 0, "out of memory");
  vs_fill_range(f->vs, f->pos + t0, cnt, x, cs);
  free(cs);
  return SR_OK;
}

int attn_inputs_fill(int kind, uint64_t seed, int layer, int tensor, const int64_t *pos, int64_t n, int64_t n_tokens,
                     int heads, int kv_heads, int d, float *x, sr_error *e) {
  int nh = tensor == ATTN_K || tensor == ATTN_V ? kv_heads : heads;
  vs_setup vs;
  int use_vs = kind == ATTN_INPUTS_VS && (tensor == ATTN_Q || tensor == ATTN_K);
  if (use_vs && vs_prepare(seed, layer, tensor, n_tokens, nh, tensor == ATTN_Q ? heads / kv_heads : 1, d, &vs, e))
    return e->code;
  fill_ctx f = {kind, tensor, nh, d, seed, layer, pos, n, x, use_vs ? &vs : NULL};
  int64_t chunks = (n + FILL_CHUNK - 1) / FILL_CHUNK;
  int rc = chunks > 0 ? sr_parallel_for((int)chunks, sr_threads(), fill_item, &f, e) : SR_OK;
  if (use_vs) free(vs.dir);
  return rc;
}

int attn_inputs_parse(const char *s, int *kind, sr_error *e) {
  if (strcmp(s, "random") == 0) *kind = ATTN_INPUTS_RANDOM;
  else if (strcmp(s, "vs") == 0) *kind = ATTN_INPUTS_VS;
  else return sr_input_error(e, NULL, "--inputs", "'%s': expected random or vs", s);
  return SR_OK;
}

