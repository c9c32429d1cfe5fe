// attn_data.c — the dense check of distributed attention (attn_data.h) on the inputs of kernels/attn_inputs.c.
#include "exec/attn_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/dense_ref.h"
#include "plan/util.h"

// Rank 0 receives each rank's rows of [n_r, width] and scatters them into global order [N, width].
static int gather_rows(const layout *l, comm *c, const float *mine, int64_t width, float *global, sr_error *e) {
  if (c->rank != 0) {
    return comm_host_send(c, mine, (int)(l->rank_count[c->rank] * width), MPI_FLOAT, 0, 91, e);
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
    else if (comm_host_recv(c, buf, (int)(n * width), MPI_FLOAT, r, 91, e)) {
      free(buf), free(pos);
      return e->code;
    }
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

void attn_round_bf16(float *x, int64_t n) {
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
  if (comm_host_bcast(c, &bad, 1, MPI_INT, 0, e)) bad = 1, rc = e->code;  // every rank must join the gathers, or none
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
    attn_round_bf16(in[0], (int64_t)qsz), attn_round_bf16(in[1], (int64_t)ksz);
    attn_round_bf16(in[2], (int64_t)ksz), attn_round_bf16(in[3], (int64_t)qsz);
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
