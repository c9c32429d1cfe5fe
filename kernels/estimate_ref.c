// estimate_ref.c — CPU reference (float64) of the pattern estimation kernels: MTraining's distributed
// vertical-slash scoring of the last queries with top-p and cap, and AdaSpa's LSE-cached block mass
// with per-row top-k. The chosen indices become a pattern, which plan/tiles.c turns into the
// execution form.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"

static double dot(const float *a, const float *b, int d) {
  double x = 0;
  for (int c = 0; c < d; c++) x += (double)a[c] * b[c];
  return x;
}

// ---- MTraining vertical-slash estimation -------------------------------------------------------

void sa_ref_vs_pieces(const sa_shape *s, const float *q_last, const int64_t *qpos_last, const float *k,
                      const int64_t *kpos, double *row_max, double *row_sum) {
  int H = s->heads, KH = s->kv_heads, d = s->head_dim, group = H / KH;
  for (int h = 0; h < H; h++)
    for (int64_t r = 0; r < s->n_q; r++) {
      const float *q = q_last + (r * H + h) * d;
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < s->n_k; j++)
        if (kpos[j] <= qpos_last[r]) mx = fmax(mx, dot(q, k + (j * KH + h / group) * d, d) * s->scale);
      if (!isinf(mx))
        for (int64_t j = 0; j < s->n_k; j++)
          if (kpos[j] <= qpos_last[r]) sum += exp(dot(q, k + (j * KH + h / group) * d, d) * s->scale - mx);
      row_max[(int64_t)h * s->n_q + r] = mx, row_sum[(int64_t)h * s->n_q + r] = sum;
    }
}

void sa_softmax_combine(int world, int64_t n, const double *row_max, const double *row_sum, double *M, double *L) {
  for (int64_t i = 0; i < n; i++) {
    double m = -INFINITY, l = 0;
    for (int w = 0; w < world; w++) m = fmax(m, row_max[w * n + i]);
    if (!isinf(m))
      for (int w = 0; w < world; w++)
        if (!isinf(row_max[w * n + i])) l += row_sum[w * n + i] * exp(row_max[w * n + i] - m);
    M[i] = m, L[i] = l;
  }
}

void sa_ref_vs_scores(const sa_shape *s, const float *q_last, const int64_t *qpos_last, const float *k,
                      const int64_t *kpos, const double *M, const double *L, int64_t n_tokens, double *vertical,
                      double *slash) {
  int H = s->heads, KH = s->kv_heads, d = s->head_dim, group = H / KH;
  for (int h = 0; h < H; h++)
    for (int64_t r = 0; r < s->n_q; r++) {
      double m = M[(int64_t)h * s->n_q + r], l = L[(int64_t)h * s->n_q + r];
      if (isinf(m) || l <= 0) continue;
      const float *q = q_last + (r * H + h) * d;
      for (int64_t j = 0; j < s->n_k; j++) {
        if (kpos[j] > qpos_last[r]) continue;
        double p = exp(dot(q, k + (j * KH + h / group) * d, d) * s->scale - m) / l;
        vertical[(int64_t)h * s->n_k + j] += p;
        slash[(int64_t)h * n_tokens + (qpos_last[r] - kpos[j])] += p;
      }
    }
}

typedef struct {
  double score;
  int32_t idx;
} scored;

static int by_score_desc(const void *a, const void *b) {
  const scored *x = a, *y = b;
  if (x->score != y->score) return x->score > y->score ? -1 : 1;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

static int by_int32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

int64_t sa_top_p(const double *score, int64_t n, double p, int64_t cap, int32_t *out) {
  scored *v = malloc(sizeof *v * (size_t)(n + 1));
  if (!v) return 0;
  double total = 0;
  for (int64_t i = 0; i < n; i++) v[i].score = score[i], v[i].idx = (int32_t)i, total += score[i];
  qsort(v, (size_t)n, sizeof *v, by_score_desc);
  int64_t m = 0;
  double acc = 0;
  while (m < n && m < cap && acc < p * total && v[m].score > 0) acc += v[m].score, out[m] = v[m].idx, m++;
  free(v);
  qsort(out, (size_t)m, sizeof *out, by_int32);
  return m;
}

// ---- AdaSpa block search ---------------------------------------------------------------------------

void sa_ref_block_mass(const sa_shape *s, const float *q, const float *k, const int64_t *qpos, const int64_t *kpos,
                       const float *lse, int32_t block, double *mass) {
  int H = s->heads, KH = s->kv_heads, d = s->head_dim, group = H / KH;
  int64_t nqb = (s->n_q + block - 1) / block, nkb = (s->n_k + block - 1) / block;
  memset(mass, 0, sizeof(double) * (size_t)(H * nqb * nkb));
  for (int h = 0; h < H; h++)
    for (int64_t r = 0; r < s->n_q; r++) {
      double L = lse[(int64_t)h * s->n_q + r];
      if (isinf(L)) continue;
      const float *qr = q + (r * H + h) * d;
      double *row = mass + ((int64_t)h * nqb + r / block) * nkb;
      for (int64_t j = 0; j < s->n_k; j++)
        if (kpos[j] <= qpos[r]) row[j / block] += exp(dot(qr, k + (j * KH + h / group) * d, d) * s->scale - L);
    }
}

void sa_block_topk(const double *mass, int64_t nqb, int64_t nkb, int64_t topk, uint64_t *bmask) {
  int64_t words = (nkb + 63) / 64;
  scored *v = malloc(sizeof *v * (size_t)(nkb + 1));
  memset(bmask, 0, sizeof(uint64_t) * (size_t)(nqb * words));
  if (!v) return;
  for (int64_t a = 0; a < nqb; a++) {
    for (int64_t c = 0; c < nkb; c++) v[c].score = mass[a * nkb + c], v[c].idx = (int32_t)c;
    qsort(v, (size_t)nkb, sizeof *v, by_score_desc);
    for (int64_t x = 0; x < nkb && x < topk && v[x].score > 0; x++)
      bmask[a * words + v[x].idx / 64] |= 1ull << (v[x].idx % 64);
  }
  free(v);
}
