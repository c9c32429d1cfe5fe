// ref_attn.c — CPU reference of the sparse attention kernels (float64 accumulation): one ring step
// of the forward with the running (O, LSE) merge, the backward of one step, and the LSE merge.
// It is the ground truth of the GPU tests and the executor's CPU backend, so it favours plain loops
// that read like the definitions over speed.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sa_mask.h"
#include "kernels/sparse_attn.h"

// ---- the keys of one query row in one ring step ------------------------------------------------

// Segment [a, b) of the (head, query tile, src) cell in an offsets array (tile_index.h layout).
static void segment(const tile_index *ti, const int64_t *cnt, int h, int64_t qt, int src, int64_t *a, int64_t *b) {
  int hi = ti->heads == 1 ? 0 : h;  // an index built for one head serves every head
  const int64_t *c = cnt + ((int64_t)hi * ti->n_qtiles + qt) * (ti->world + 1);
  *a = c[src];
  *b = c[src + 1];
}

// The source-local keys that local query row r of head h attends to in this step (exactly the
// elements the execution form keeps: FULL tiles whole, PARTIAL tiles and runs under the head's element
// mask, bars under the causal mask, or under the element mask for a TOKENS head, whose rows choose their
// keys one by one). Returns the count written into keys.
static int64_t row_keys(const sa_shape *s, const int64_t *qpos, const int64_t *kpos, const tile_index *ti, int src,
                        const head_mask *masks, int h, int64_t r, int64_t *keys) {
  int64_t qt = r / TILE, n = 0, a, b;
  const head_mask *m = masks ? &masks[h] : NULL;
  segment(ti, ti->tile_cnt, h, qt, src, &a, &b);
  for (int64_t t = a; t < b; t++) {
    int64_t k0 = (int64_t)ti->tile_idx[t] * TILE, k1 = k0 + TILE < s->n_k ? k0 + TILE : s->n_k;
    for (int64_t k = k0; k < k1; k++) {
      int keep = ti->tile_kind[t] == TILE_FULL ? 1 : m ? sa_mask_keeps(m, qpos[r], kpos[k]) : kpos[k] <= qpos[r];
      if (keep) keys[n++] = k;
    }
  }
  if (ti->run_cnt) {  // runs (the forward form): like PARTIAL tiles, over run_len keys from run_key
    segment(ti, ti->run_cnt, h, qt, src, &a, &b);
    for (int64_t t = a; t < b; t++) {
      int64_t k0 = ti->run_key[t], k1 = k0 + ti->run_len[t] < s->n_k ? k0 + ti->run_len[t] : s->n_k;
      for (int64_t k = k0; k < k1; k++)
        if (m ? sa_mask_keeps(m, qpos[r], kpos[k]) : kpos[k] <= qpos[r]) keys[n++] = k;
    }
  }
  segment(ti, ti->bar_cnt, h, qt, src, &a, &b);
  int masked_bars = m && m->kind == PATTERN_TOKENS;
  for (int64_t t = a; t < b; t++) {
    int64_t k = ti->bar_idx[t];
    if (k < s->n_k && (masked_bars ? sa_mask_keeps(m, qpos[r], kpos[k]) : kpos[k] <= qpos[r])) keys[n++] = k;
  }
  return n;
}

static int shape_ok(const sa_shape *s, const tile_index *ti, int src) {
  if (!s || !ti || s->n_q < 0 || s->n_k < 0 || s->heads < 1 || s->kv_heads < 1 || s->head_dim < 1) return 0;
  if (s->heads % s->kv_heads != 0 || src < 0 || src >= ti->world) return 0;
  if (ti->heads != 1 && ti->heads != s->heads) return 0;
  return ti->n_qtiles >= (s->n_q + TILE - 1) / TILE;
}

// ---- merge -------------------------------------------------------------------------------------

// The stable LSE merge of docs/design.md ("The LSE merge") for one row, in double:
// O <- O - sigma(Lb - L) (O - Ob), L <- L + softplus(Lb - L); an empty partial changes nothing and
// an empty running state takes the partial as it is (softplus(inf) would give -inf + inf).
static void merge_row(int d, float *o, float *lse, const double *ob, double lb) {
  if (isinf(lb) && lb < 0) return;
  double l = *lse;
  if (isinf(l) && l < 0) {
    for (int c = 0; c < d; c++) o[c] = (float)ob[c];
    *lse = (float)lb;
    return;
  }
  double x = lb - l;
  double sig = x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
  double sp = x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
  for (int c = 0; c < d; c++) o[c] = (float)(o[c] - sig * (o[c] - ob[c]));
  *lse = (float)(l + sp);
}

void sa_ref_merge(int64_t n_q, int32_t heads, int32_t head_dim, float *o, float *lse, const float *o_b,
                  const float *lse_b) {
  double *ob = malloc(sizeof(double) * (size_t)head_dim);
  if (!ob) return;
  for (int64_t r = 0; r < n_q; r++)
    for (int h = 0; h < heads; h++) {
      const float *src = o_b + (r * heads + h) * head_dim;
      for (int c = 0; c < head_dim; c++) ob[c] = src[c];
      merge_row(head_dim, o + (r * heads + h) * head_dim, lse + (int64_t)h * n_q + r, ob, lse_b[(int64_t)h * n_q + r]);
    }
  free(ob);
}

// ---- forward -----------------------------------------------------------------------------------

int sa_ref_fwd(const sa_shape *s, const float *q, const float *k, const float *v, const int64_t *qpos,
               const int64_t *kpos, const tile_index *ti, int src, const head_mask *masks, float *o_run,
               float *lse_run) {
  if (!shape_ok(s, ti, src)) return -1;
  int d = s->head_dim, H = s->heads, KH = s->kv_heads, group = H / KH;
  int64_t *keys = malloc(sizeof(int64_t) * (size_t)(s->n_k + 1));
  double *sc = malloc(sizeof(double) * (size_t)(s->n_k + 1));
  double *ob = malloc(sizeof(double) * (size_t)d);
  if (!keys || !sc || !ob) {
    free(keys), free(sc), free(ob);
    return -1;
  }
  for (int h = 0; h < H; h++) {
    int kh = h / group;
    for (int64_t r = 0; r < s->n_q; r++) {
      int64_t n = row_keys(s, qpos, kpos, ti, src, masks, h, r, keys);
      if (n == 0) continue;  // no work for this row in this step: the running state stays
      const float *qr = q + (r * H + h) * d;
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; j++) {
        const float *kr = k + (keys[j] * KH + kh) * d;
        double dot = 0;
        for (int c = 0; c < d; c++) dot += (double)qr[c] * kr[c];
        sc[j] = dot * s->scale;
        if (sc[j] > mx) mx = sc[j];
      }
      memset(ob, 0, sizeof(double) * (size_t)d);
      for (int64_t j = 0; j < n; j++) {
        double p = exp(sc[j] - mx);
        const float *vr = v + (keys[j] * KH + kh) * d;
        sum += p;
        for (int c = 0; c < d; c++) ob[c] += p * vr[c];
      }
      for (int c = 0; c < d; c++) ob[c] /= sum;
      merge_row(d, o_run + (r * H + h) * d, lse_run + (int64_t)h * s->n_q + r, ob, mx + log(sum));
    }
  }
  free(keys), free(sc), free(ob);
  return 0;
}

// ---- backward ----------------------------------------------------------------------------------

// With the final (O, L): P = exp(s q.k - L), dP = dO.v, D = rowsum(dO o O), dS = P (dP - D);
// dQ += s dS k, dK += s dS q, dV += P dO (FlashAttention-2's backward, Dao 2023, Algorithm 2).
int sa_ref_bwd(const sa_shape *s, const float *q, const float *k, const float *v, const float *o,
               const float *lse, const float *dout, const int64_t *qpos, const int64_t *kpos, const tile_index *ti,
               int src, const head_mask *masks, float *dq, float *dk, float *dv) {
  if (!shape_ok(s, ti, src)) return -1;
  int d = s->head_dim, H = s->heads, KH = s->kv_heads, group = H / KH;
  size_t kv_elems = (size_t)s->n_k * KH * d;
  int64_t *keys = malloc(sizeof(int64_t) * (size_t)(s->n_k + 1));
  double *dq_row = malloc(sizeof(double) * (size_t)d);
  double *dk64 = calloc(kv_elems + 1, sizeof(double)), *dv64 = calloc(kv_elems + 1, sizeof(double));
  if (!keys || !dq_row || !dk64 || !dv64) {
    free(keys), free(dq_row), free(dk64), free(dv64);
    return -1;
  }
  for (int h = 0; h < H; h++) {
    int kh = h / group;
    for (int64_t r = 0; r < s->n_q; r++) {
      double L = lse[(int64_t)h * s->n_q + r];
      if (isinf(L) && L < 0) continue;  // a row with no keys anywhere has no gradient
      int64_t n = row_keys(s, qpos, kpos, ti, src, masks, h, r, keys);
      if (n == 0) continue;
      const float *qr = q + (r * H + h) * d, *orow = o + (r * H + h) * d, *dor = dout + (r * H + h) * d;
      double D = 0;
      for (int c = 0; c < d; c++) D += (double)dor[c] * orow[c];
      memset(dq_row, 0, sizeof(double) * (size_t)d);
      for (int64_t j = 0; j < n; j++) {
        const float *kr = k + (keys[j] * KH + kh) * d, *vr = v + (keys[j] * KH + kh) * d;
        double dot = 0, dp = 0;
        for (int c = 0; c < d; c++) dot += (double)qr[c] * kr[c], dp += (double)dor[c] * vr[c];
        double p = exp(dot * s->scale - L), ds = p * (dp - D);
        double *dkr = dk64 + (keys[j] * KH + kh) * d, *dvr = dv64 + (keys[j] * KH + kh) * d;
        for (int c = 0; c < d; c++) {
          dq_row[c] += s->scale * ds * kr[c];
          dkr[c] += s->scale * ds * qr[c];
          dvr[c] += p * dor[c];
        }
      }
      float *dqr = dq + (r * H + h) * d;
      for (int c = 0; c < d; c++) dqr[c] += (float)dq_row[c];
    }
  }
  for (size_t i = 0; i < kv_elems; i++) dk[i] += (float)dk64[i], dv[i] += (float)dv64[i];
  free(keys), free(dq_row), free(dk64), free(dv64);
  return 0;
}
