// attn_data.c — hashed inputs (uniform, or with vertical-slash attention) and the dense check of distributed
// attention (attn_data.h).
#include "exec/attn_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/dense_ref.h"
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

// Rank 0 receives each rank's rows of [n_r, width] and scatters them into global order [N, width].
static int gather_rows(const layout *l, comm *c, const float *mine, int64_t width, float *global, sr_error *e) {
  if (c->rank != 0) {
    int rc = MPI_Send(mine, (int)(l->rank_count[c->rank] * width), MPI_FLOAT, 0, 91, c->mpi);
    return rc == MPI_SUCCESS ? SR_OK : sr_internal_error(e, 0, "rank %d: check: MPI_Send failed", c->rank);
  }
  int64_t nmax = 0;
  for (int r = 0; r < c->world; r++) nmax = sr_max64(nmax, l->rank_count[r]);
  float *buf = malloc(sizeof(float) * (size_t)sr_max64(1, nmax * width));
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)sr_max64(1, nmax));
  if (!buf || !pos) {
    free(buf), free(pos);
    return sr_internal_error(e, 0, "out of memory");
  }
  for (int r = 0; r < c->world; r++) {
    int64_t n = l->rank_count[r];
    if (r == 0) memcpy(buf, mine, sizeof(float) * (size_t)(n * width));
    else MPI_Recv(buf, (int)(n * width), MPI_FLOAT, r, 91, c->mpi, MPI_STATUS_IGNORE);
    layout_positions(l, r, pos);
    for (int64_t t = 0; t < n; t++) memcpy(global + pos[t] * width, buf + t * width, sizeof(float) * (size_t)width);
  }
  free(buf), free(pos);
  return SR_OK;
}

// LSE is [H, n] per rank: transpose to rows [n, H] so it gathers like the other tensors.
static float *lse_rows(const float *lse, int64_t n, int H) {
  float *t = malloc(sizeof(float) * (size_t)sr_max64(1, n * H));
  if (t)
    for (int h = 0; h < H; h++)
      for (int64_t i = 0; i < n; i++) t[i * H + h] = lse[h * n + i];
  return t;
}

static double rel_err(const float *got, const float *ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]);
    if (!(d <= num)) num = d;  // NaN propagates
    if (fabs(ref[i]) > den) den = fabs(ref[i]);
  }
  return den > 0 ? num / den : num;
}

static double lse_err(const float *got, const float *ref_t, int64_t N, int H) {
  double worst = 0;
  for (int64_t i = 0; i < N; i++)
    for (int h = 0; h < H; h++) {
      double g = got[i * H + h], r = ref_t[h * N + i];
      double d = isinf(g) && isinf(r) && g < 0 && r < 0 ? 0 : isinf(g) || isinf(r) ? INFINITY : fabs(g - r);
      if (!(d <= worst)) worst = d;
    }
  return worst;
}

// Round to the nearest bf16 (ties to even) and back: what the GPU run saw.
static void round_bf16(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x[i], &u, 4);
  }
}

int attn_check_layer(const plan *p, const pattern *pat, int layer, int inputs, uint64_t seed, int bf16_inputs, comm *c,
                     const float *o, const float *lse, const float *dq, const float *dk, const float *dv,
                     attn_errors *err, sr_error *e) {
  const model_config *m = &p->model;
  const layout *l = &p->layout;
  int H = (int)m->num_heads, Hkv = (int)m->num_kv_heads, d = (int)m->head_dim;
  int64_t N = l->n_tokens, nl = l->rank_count[c->rank];
  int root = c->rank == 0;
  size_t qsz = (size_t)(N * H * d), ksz = (size_t)(N * Hkv * d);
  float *g[6] = {0}, *ref[5] = {0}, *in[4] = {0};
  float *lt = lse_rows(lse, nl, H);
  int rc = SR_OK;
  if (!lt) return sr_internal_error(e, 0, "out of memory");
  if (root) {
    size_t sz[6] = {qsz, (size_t)(N * H), qsz, ksz, ksz, 0};
    for (int i = 0; i < 5; i++)
      if (!(g[i] = malloc(sizeof(float) * sz[i]))) rc = sr_internal_error(e, 0, "out of memory");
  }
  int bad = rc != SR_OK;
  MPI_Bcast(&bad, 1, MPI_INT, 0, c->mpi);  // every rank must join the gathers, or none
  if (bad) goto done;
  if (gather_rows(l, c, o, (int64_t)H * d, g[0], e) || gather_rows(l, c, lt, H, g[1], e) ||
      gather_rows(l, c, dq, (int64_t)H * d, g[2], e) || gather_rows(l, c, dk, (int64_t)Hkv * d, g[3], e) ||
      gather_rows(l, c, dv, (int64_t)Hkv * d, g[4], e)) {
    rc = e->code;
    goto done;
  }
  if (!root) goto done;
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)N);
  for (int i = 0; i < 4; i++) in[i] = malloc(sizeof(float) * (i == 1 || i == 2 ? ksz : qsz));
  ref[0] = malloc(sizeof(float) * qsz), ref[1] = malloc(sizeof(float) * (size_t)(N * H));
  ref[2] = malloc(sizeof(float) * qsz), ref[3] = malloc(sizeof(float) * ksz), ref[4] = malloc(sizeof(float) * ksz);
  int ok = pos != NULL;
  for (int i = 0; i < 5; i++) ok = ok && ref[i] && (i == 4 || in[i]);
  if (!ok) {
    free(pos);
    rc = sr_internal_error(e, 0, "out of memory");
    goto done;
  }
  for (int64_t t = 0; t < N; t++) pos[t] = t;
  for (int i = 0; i < 4 && rc == SR_OK; i++) rc = attn_inputs_fill(inputs, seed, layer, i, pos, N, N, H, Hkv, d, in[i], e);
  free(pos);
  if (rc) goto done;
  if (bf16_inputs) {
    round_bf16(in[0], (int64_t)qsz), round_bf16(in[1], (int64_t)ksz);
    round_bf16(in[2], (int64_t)ksz), round_bf16(in[3], (int64_t)qsz);
  }
  float scale = 1.0f / sqrtf((float)d);
  if (dense_attn_fwd(pat, layer, N, H, Hkv, d, scale, in[0], in[1], in[2], ref[0], ref[1]) ||
      dense_attn_bwd(pat, layer, N, H, Hkv, d, scale, in[0], in[1], in[2], ref[0], ref[1], in[3], ref[2], ref[3],
                     ref[4])) {
    rc = sr_internal_error(e, 0, "out of memory");
    goto done;
  }
  err->o = rel_err(g[0], ref[0], (int64_t)qsz);
  err->lse = lse_err(g[1], ref[1], N, H);
  err->dq = rel_err(g[2], ref[2], (int64_t)qsz);
  err->dk = rel_err(g[3], ref[3], (int64_t)ksz);
  err->dv = rel_err(g[4], ref[4], (int64_t)ksz);
done:
  free(lt);
  for (int i = 0; i < 6; i++) free(g[i]);
  for (int i = 0; i < 5; i++) free(ref[i]);
  for (int i = 0; i < 4; i++) free(in[i]);
  return rc;
}
