// test_kernels_ref.c — the CPU reference attention (kernels/ref_attn.c) against a separate, naive
// dense masked attention written here in float64, and its backward against finite differences.
// Execution forms are built here by brute force (every KV tile with a kept element becomes a tile
// entry, or, in the bar variant, columns kept for every causal row become bars), so these tests do
// not depend on the planner's builder.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"
#include "plan/layout.h"
#include "plan/pattern.h"
#include "plan/tiles.h"
#include "tests/test.h"

// ---- random numbers and a test pattern with its own (naive) semantics ---------------------------

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double rnd(void) {  // splitmix64 -> uniform [0, 1)
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

typedef struct {
  int kind;
  int64_t sinks, window;
  int nv, ns;
  int64_t vert[64], slash[64];
  int block;
  int64_t nb;
  unsigned char *bkeep;  // [nb * nb]
} tpat;

// The pattern's definition (plan/pattern.h) from lists, independent of the bit-set head_mask.
static int tpat_keeps(const tpat *p, int64_t q, int64_t k) {
  if (k > q) return 0;
  switch (p->kind) {
    case PATTERN_DENSE: return 1;
    case PATTERN_WINDOW: return k < p->sinks || q - k < p->window;
    case PATTERN_VS:
      for (int i = 0; i < p->nv; i++)
        if (p->vert[i] == k) return 1;
      for (int i = 0; i < p->ns; i++)
        if (p->slash[i] == q - k) return 1;
      return 0;
    default: return p->bkeep[(q / p->block) * p->nb + k / p->block];
  }
}

static void tpat_random(tpat *p, int kind, int64_t n) {
  memset(p, 0, sizeof *p);
  p->kind = kind;
  if (kind == PATTERN_WINDOW) p->sinks = 1 + (int64_t)(rnd() * 9), p->window = 5 + (int64_t)(rnd() * 60);
  if (kind == PATTERN_VS) {
    // Few slashes near the diagonal so that far tiles hold verticals alone (which become bars).
    p->nv = 1 + (int)(rnd() * 12), p->ns = 1 + (int)(rnd() * 3);
    for (int i = 0; i < p->nv; i++) p->vert[i] = (int64_t)(rnd() * n);
    for (int i = 0; i < p->ns; i++) p->slash[i] = i == 0 ? 0 : (int64_t)(rnd() * n * 0.3);
  }
  if (kind == PATTERN_BLOCK) {
    p->block = 16 + (int)(rnd() * 40), p->nb = (n + p->block - 1) / p->block;
    p->bkeep = malloc((size_t)(p->nb * p->nb));
    for (int64_t i = 0; i < p->nb * p->nb; i++) p->bkeep[i] = rnd() < 0.4 || i / p->nb == i % p->nb;
  }
}

// The head_mask of a test pattern (bit sets built from the lists).
static head_mask tpat_mask(const tpat *p, int64_t n) {
  head_mask m = {.kind = p->kind, .n_tokens = n, .sinks = p->sinks, .window = p->window, .block = p->block};
  if (p->kind == PATTERN_VS) {
    uint32_t *vb = calloc((size_t)(n / 32 + 1), 4), *sb = calloc((size_t)(n / 32 + 1), 4);
    for (int i = 0; i < p->nv; i++) vb[p->vert[i] >> 5] |= 1u << (p->vert[i] & 31);
    for (int i = 0; i < p->ns; i++) sb[p->slash[i] >> 5] |= 1u << (p->slash[i] & 31);
    m.vbits = vb, m.sbits = sb;
  }
  if (p->kind == PATTERN_BLOCK) {
    m.row_words = (p->nb + 63) / 64;
    uint64_t *bm = calloc((size_t)(p->nb * m.row_words), 8);
    for (int64_t a = 0; a < p->nb; a++)
      for (int64_t c = 0; c < p->nb; c++)
        if (p->bkeep[a * p->nb + c]) bm[a * m.row_words + c / 64] |= 1ull << (c % 64);
    m.bmask = bm;
  }
  return m;
}

// ---- a problem: tokens striped over W ranks, one query rank, its execution form ---------------

typedef struct {
  int H, KH, d, W, qr;
  int64_t N, n_q, n_k[8];
  int64_t *qpos, *kpos[8];
  double *q, *k[8], *v[8];  // the test's own float64 copies
  float *qf, *kf[8], *vf[8];
  tpat pat[16];
  head_mask masks[16];
  tile_index ti;
} prob;

// Rank r holds global blocks b with b mod W == r (blocks of g tokens), in global order.
static int64_t positions(int64_t N, int W, int64_t g, int r, int64_t *out) {
  int64_t n = 0;
  for (int64_t t = 0; t < N; t++)
    if ((t / g) % W == r) {
      if (out) out[n] = t;
      n++;
    }
  return n;
}

static void push64(int64_t **a, int64_t *n, int64_t *cap, int64_t x) {
  if (*n == *cap) *cap = *cap ? 2 * *cap : 64, *a = realloc(*a, sizeof(int64_t) * (size_t)*cap);
  (*a)[(*n)++] = x;
}

// Brute-force execution form over every (head, query tile, src, KV tile) cell. With bars, a cell
// whose kept elements all lie in columns kept for every causal row of the tile becomes bars.
static void build_index(prob *P, int bars) {
  tile_index *t = &P->ti;
  memset(t, 0, sizeof *t);
  t->heads = P->H, t->world = P->W, t->q_rank = P->qr, t->n_qtiles = (int32_t)((P->n_q + TILE - 1) / TILE);
  size_t cells = (size_t)P->H * t->n_qtiles * (P->W + 1);
  t->tile_cnt = calloc(cells, 8), t->bar_cnt = calloc(cells, 8);
  int64_t *tl = NULL, nt = 0, ct = 0, *bl = NULL, nb = 0, cb = 0;
  for (int h = 0; h < P->H; h++)
    for (int i = 0; i < t->n_qtiles; i++) {
      int64_t r0 = (int64_t)i * TILE, r1 = r0 + TILE < P->n_q ? r0 + TILE : P->n_q;
      for (int s = 0; s < P->W; s++) {
        int64_t cell = ((int64_t)h * t->n_qtiles + i) * (P->W + 1);
        t->tile_cnt[cell + s] = nt, t->bar_cnt[cell + s] = nb;
        for (int64_t j = 0; j * TILE < P->n_k[s]; j++) {
          int64_t k0 = j * TILE, k1 = k0 + TILE < P->n_k[s] ? k0 + TILE : P->n_k[s];
          int64_t kept = 0, total = 0, barable_kept = 0;
          for (int64_t k = k0; k < k1; k++) {
            int64_t col_kept = 0, col_causal = 0;
            for (int64_t r = r0; r < r1; r++) {
              int causal = P->kpos[s][k] <= P->qpos[r], keep = tpat_keeps(&P->pat[h], P->qpos[r], P->kpos[s][k]);
              col_causal += causal, col_kept += keep;
            }
            kept += col_kept, total += r1 - r0;
            if (col_kept > 0 && col_kept == col_causal) barable_kept += col_kept;
          }
          if (kept == 0) continue;
          if (bars && barable_kept == kept && kept < total) {
            for (int64_t k = k0; k < k1; k++) {
              int any = 0;
              for (int64_t r = r0; r < r1 && !any; r++) any = tpat_keeps(&P->pat[h], P->qpos[r], P->kpos[s][k]);
              if (any) push64(&bl, &nb, &cb, k);
            }
          } else {
            push64(&tl, &nt, &ct, j * 2 + (kept == total ? TILE_FULL : TILE_PARTIAL));
          }
        }
        t->tile_cnt[cell + s + 1] = nt, t->bar_cnt[cell + s + 1] = nb;
      }
    }
  t->n_tiles = nt, t->n_bars = nb;
  t->tile_idx = malloc(sizeof(int32_t) * (size_t)(nt + 1)), t->tile_kind = malloc((size_t)(nt + 1));
  t->bar_idx = malloc(sizeof(int32_t) * (size_t)(nb + 1));
  for (int64_t x = 0; x < nt; x++) t->tile_idx[x] = (int32_t)(tl[x] / 2), t->tile_kind[x] = (uint8_t)(tl[x] % 2);
  for (int64_t x = 0; x < nb; x++) t->bar_idx[x] = (int32_t)bl[x];
  free(tl), free(bl);
}

static void fill(double *d, float *f, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = f[i] = (float)(2 * rnd() - 1);
}

static prob *prob_new(int64_t N, int W, int64_t g, int qr, int H, int KH, int d, int kind, int bars) {
  prob *P = calloc(1, sizeof *P);
  P->N = N, P->W = W, P->qr = qr, P->H = H, P->KH = KH, P->d = d;
  P->n_q = positions(N, W, g, qr, NULL);
  P->qpos = malloc(sizeof(int64_t) * (size_t)(P->n_q + 1));
  positions(N, W, g, qr, P->qpos);
  P->q = malloc(sizeof(double) * (size_t)(P->n_q * H * d + 1)), P->qf = malloc(sizeof(float) * (size_t)(P->n_q * H * d + 1));
  fill(P->q, P->qf, P->n_q * H * d);
  for (int s = 0; s < W; s++) {
    P->n_k[s] = positions(N, W, g, s, NULL);
    P->kpos[s] = malloc(sizeof(int64_t) * (size_t)(P->n_k[s] + 1));
    positions(N, W, g, s, P->kpos[s]);
    int64_t e = P->n_k[s] * KH * d + 1;
    P->k[s] = malloc(sizeof(double) * (size_t)e), P->kf[s] = malloc(sizeof(float) * (size_t)e);
    P->v[s] = malloc(sizeof(double) * (size_t)e), P->vf[s] = malloc(sizeof(float) * (size_t)e);
    fill(P->k[s], P->kf[s], e - 1), fill(P->v[s], P->vf[s], e - 1);
  }
  for (int h = 0; h < H; h++) tpat_random(&P->pat[h], kind, N), P->masks[h] = tpat_mask(&P->pat[h], N);
  build_index(P, bars);
  return P;
}

static sa_shape shape_of(const prob *P, int s) {
  return (sa_shape){.n_q = P->n_q, .n_k = P->n_k[s], .heads = P->H, .kv_heads = P->KH, .head_dim = P->d,
                    .scale = (float)(1.0 / sqrt((double)P->d))};
}

// ---- the naive dense reference (float64, over every key of every rank) -------------------------

// O [n_q, H, d] and LSE [H, n_q] of masked softmax attention over all ranks' keys; empty rows O = 0,
// LSE = -inf. Returns the loss sum(O * G) when G != NULL.
static double naive_attention(const prob *P, const double *q, double *const *k, double *const *v, double *o, double *lse,
                              const double *G) {
  int d = P->d, H = P->H, KH = P->KH;
  double scale = (double)(float)(1.0 / sqrt((double)d)), loss = 0;
  double *sc = malloc(sizeof(double) * (size_t)(P->N + 1));
  for (int h = 0; h < H; h++)
    for (int64_t r = 0; r < P->n_q; r++) {
      int kh = h / (H / KH);
      double mx = -INFINITY, sum = 0, *orow = o + (r * H + h) * d;
      int64_t x = 0;
      for (int s = 0; s < P->W; s++)
        for (int64_t j = 0; j < P->n_k[s]; j++, x++) {
          sc[x] = -INFINITY;
          if (!tpat_keeps(&P->pat[h], P->qpos[r], P->kpos[s][j])) continue;
          double dot = 0;
          for (int c = 0; c < d; c++) dot += q[(r * H + h) * d + c] * k[s][(j * KH + kh) * d + c];
          sc[x] = dot * scale;
          if (sc[x] > mx) mx = sc[x];
        }
      memset(orow, 0, sizeof(double) * (size_t)d);
      x = 0;
      for (int s = 0; s < P->W; s++)
        for (int64_t j = 0; j < P->n_k[s]; j++, x++) {
          if (isinf(sc[x])) continue;
          double p = exp(sc[x] - mx);
          sum += p;
          for (int c = 0; c < d; c++) orow[c] += p * v[s][(j * KH + kh) * d + c];
        }
      for (int c = 0; c < d; c++) orow[c] = sum > 0 ? orow[c] / sum : 0;
      lse[(int64_t)h * P->n_q + r] = sum > 0 ? mx + log(sum) : -INFINITY;
      if (G)
        for (int c = 0; c < d; c++) loss += orow[c] * G[(r * H + h) * d + c];
    }
  free(sc);
  return loss;
}

// Runs every ring step of the reference forward; returns max |O - naive| and max |LSE - naive|
// (matching infinities count as equal; a mismatch in infinity returns 1e9).
static void ref_all_steps(const prob *P, float *o, float *lse) {
  for (int64_t i = 0; i < P->n_q * P->H * P->d; i++) o[i] = 0;
  for (int64_t i = 0; i < P->n_q * P->H; i++) lse[i] = -INFINITY;
  for (int s = 0; s < P->W; s++) {
    sa_shape sh = shape_of(P, s);
    CHECK_EQ_INT(sa_ref_fwd(&sh, P->qf, P->kf[s], P->vf[s], P->qpos, P->kpos[s], &P->ti, s, P->masks, o, lse), 0);
  }
}

static void compare_fwd(const prob *P, double tol) {
  int64_t no = P->n_q * P->H * P->d, nl = P->n_q * P->H;
  float *o = malloc(sizeof(float) * (size_t)(no + 1)), *lse = malloc(sizeof(float) * (size_t)(nl + 1));
  double *on = malloc(sizeof(double) * (size_t)(no + 1)), *ln = malloc(sizeof(double) * (size_t)(nl + 1));
  ref_all_steps(P, o, lse);
  naive_attention(P, P->q, P->k, P->v, on, ln, NULL);
  double eo = 0, el = 0;
  for (int64_t i = 0; i < no; i++) eo = fmax(eo, fabs(o[i] - on[i]));
  for (int64_t i = 0; i < nl; i++) {
    if (isinf(ln[i]) || isinf(lse[i])) el = fmax(el, isinf(ln[i]) && isinf(lse[i]) && ln[i] < 0 && lse[i] < 0 ? 0 : 1e9);
    else el = fmax(el, fabs(lse[i] - ln[i]));
  }
  if (eo > tol || el > tol)
    test_fail(__FILE__, __LINE__, "N=%lld W=%d H=%d KH=%d d=%d kind=%d: max|dO|=%g max|dLSE|=%g", (long long)P->N,
              P->W, P->H, P->KH, P->d, P->pat[0].kind, eo, el);
  free(o), free(lse), free(on), free(ln);
}

// ---- forward -----------------------------------------------------------------------------------

TEST(ref_fwd_matches_dense_masked_attention_for_every_pattern_kind) {
  for (int kind = PATTERN_DENSE; kind <= PATTERN_BLOCK; kind++)
    for (int bars = 0; bars <= 1; bars++) {
      prob *P = prob_new(301, 1, 1, 0, 4, 2, 16, kind, bars);  // 301: not a multiple of the tile
      compare_fwd(P, 1e-5);
    }
}

TEST(ref_fwd_bar_variant_actually_runs_bars) {
  prob *P = prob_new(400, 1, 1, 0, 2, 1, 8, PATTERN_VS, 1);
  CHECK(P->ti.n_bars > 0);
  compare_fwd(P, 1e-5);
}

TEST(ref_fwd_handles_gqa_ratios_1_2_8) {
  int ratio[3][2] = {{2, 2}, {4, 2}, {8, 1}};
  for (int i = 0; i < 3; i++) compare_fwd(prob_new(200, 1, 1, 0, ratio[i][0], ratio[i][1], 8, PATTERN_WINDOW, 0), 1e-5);
}

TEST(ref_fwd_handles_head_dims_64_and_128) {
  compare_fwd(prob_new(150, 1, 1, 0, 2, 1, 64, PATTERN_VS, 1), 1e-5);
  compare_fwd(prob_new(150, 1, 1, 0, 2, 2, 128, PATTERN_DENSE, 0), 1e-5);
}

TEST(ref_fwd_ring_steps_merged_equal_one_shot_attention) {
  // 3 ranks, striped blocks of 16 tokens, 4 query ranks' views; each step merges one source shard.
  for (int qr = 0; qr < 3; qr++) {
    compare_fwd(prob_new(500, 3, 16, qr, 2, 1, 8, PATTERN_VS, 1), 1e-5);
    compare_fwd(prob_new(500, 3, 64, qr, 2, 2, 8, PATTERN_WINDOW, 0), 1e-5);
  }
}

TEST(ref_fwd_single_token_shards) {
  // 3 tokens over 3 ranks: every shard holds one token; rank 0's query sees only key 0.
  for (int qr = 0; qr < 3; qr++) compare_fwd(prob_new(3, 3, 1, qr, 2, 1, 8, PATTERN_DENSE, 0), 1e-6);
}

TEST(ref_fwd_rows_without_work_keep_running_state) {
  prob *P = prob_new(40, 2, 20, 0, 1, 1, 4, PATTERN_DENSE, 0);  // rank 0 holds tokens 0..19: nothing from rank 1
  sa_shape sh = shape_of(P, 1);
  float o[20 * 4], lse[20];
  for (int i = 0; i < 80; i++) o[i] = (float)i;
  for (int i = 0; i < 20; i++) lse[i] = (float)(-i);
  CHECK_EQ_INT(sa_ref_fwd(&sh, P->qf, P->kf[1], P->vf[1], P->qpos, P->kpos[1], &P->ti, 1, P->masks, o, lse), 0);
  for (int i = 0; i < 80; i++) CHECK(o[i] == (float)i);
  for (int i = 0; i < 20; i++) CHECK(lse[i] == (float)(-i));
}

TEST(ref_fwd_row_empty_in_every_step_ends_zero_with_lse_minus_inf) {
  // A block pattern whose first block row keeps nothing: rows 0..block-1 stay empty.
  prob *P = prob_new(200, 2, 32, 0, 1, 1, 4, PATTERN_BLOCK, 0);
  for (int64_t c = 0; c < P->pat[0].nb; c++) P->pat[0].bkeep[c] = 0;
  P->masks[0] = tpat_mask(&P->pat[0], P->N);
  build_index(P, 0);
  float o[200 * 4], lse[200];
  ref_all_steps(P, o, lse);
  for (int64_t r = 0; r < P->n_q && P->qpos[r] < P->pat[0].block; r++) {
    CHECK(isinf(lse[r]) && lse[r] < 0);
    for (int c = 0; c < 4; c++) CHECK(o[r * 4 + c] == 0.0f);
  }
  compare_fwd(P, 1e-5);
}

TEST(ref_merge_of_two_partials_equals_attention_over_both) {
  prob *P = prob_new(300, 2, 50, 1, 2, 1, 8, PATTERN_DENSE, 0);
  int64_t no = P->n_q * P->H * P->d, nl = P->n_q * P->H;
  float *o[2], *l[2];
  for (int s = 0; s < 2; s++) {  // each step's partial alone, from an empty running state
    o[s] = calloc((size_t)no, 4), l[s] = malloc(sizeof(float) * (size_t)nl);
    for (int64_t i = 0; i < nl; i++) l[s][i] = -INFINITY;
    sa_shape sh = shape_of(P, s);
    sa_ref_fwd(&sh, P->qf, P->kf[s], P->vf[s], P->qpos, P->kpos[s], &P->ti, s, P->masks, o[s], l[s]);
  }
  sa_ref_merge(P->n_q, P->H, P->d, o[1], l[1], o[0], l[0]);  // merge step 0 into step 1 (order-free)
  double *on = malloc(sizeof(double) * (size_t)no), *ln = malloc(sizeof(double) * (size_t)nl);
  naive_attention(P, P->q, P->k, P->v, on, ln, NULL);
  for (int64_t i = 0; i < no; i++) CHECK_NEAR(o[1][i], on[i], 1e-5);
  for (int64_t i = 0; i < nl; i++) CHECK_NEAR(l[1][i], ln[i], 1e-5);
}

TEST(ref_merge_with_empty_partial_changes_nothing) {
  float o[2] = {0.25f, -3.0f}, lse[1] = {1.5f}, ob[2] = {7, 7}, lb[1] = {-INFINITY};
  sa_ref_merge(1, 1, 2, o, lse, ob, lb);
  CHECK(o[0] == 0.25f && o[1] == -3.0f && lse[0] == 1.5f);
}

TEST(ref_merge_is_stable_for_far_apart_lse) {
  // L_b - L = 200: exp(200) overflows nothing in the stable form; the result is the partial's.
  float o[1] = {1.0f}, lse[1] = {-100.0f}, ob[1] = {2.0f}, lb[1] = {100.0f};
  sa_ref_merge(1, 1, 1, o, lse, ob, lb);
  CHECK_NEAR(o[0], 2.0, 1e-6);
  CHECK_NEAR(lse[0], 100.0, 1e-4);
}

// ---- backward ----------------------------------------------------------------------------------

// Gradients of loss = sum(O * G) by central differences of the naive float64 attention, against the
// reference backward summed over ring steps (dQ accumulates over steps; dK, dV per source shard).
static void check_bwd(prob *P, double tol) {
  int H = P->H, d = P->d;
  int64_t no = P->n_q * H * d, nl = P->n_q * H;
  double *G = malloc(sizeof(double) * (size_t)no), *on = malloc(sizeof(double) * (size_t)no);
  double *ln = malloc(sizeof(double) * (size_t)nl);
  float *Gf = malloc(sizeof(float) * (size_t)no), *o = malloc(sizeof(float) * (size_t)no);
  float *lse = malloc(sizeof(float) * (size_t)nl), *dq = calloc((size_t)no, 4);
  fill(G, Gf, no);
  ref_all_steps(P, o, lse);
  float *dk[8], *dv[8];
  for (int s = 0; s < P->W; s++) {
    sa_shape sh = shape_of(P, s);
    int64_t e = P->n_k[s] * P->KH * d;
    dk[s] = calloc((size_t)e + 1, 4), dv[s] = calloc((size_t)e + 1, 4);
    CHECK_EQ_INT(sa_ref_bwd(&sh, P->qf, P->kf[s], P->vf[s], o, lse, Gf, P->qpos, P->kpos[s], &P->ti, s, P->masks, dq,
                            dk[s], dv[s]),
                 0);
  }
  const double h = 1e-5;
  double err = 0, norm = 0;
#define FD(arr, n, grad)                                                  \
  for (int64_t i = 0; i < (n); i++) {                                     \
    double x = (arr)[i];                                                  \
    (arr)[i] = x + h;                                                     \
    double lp = naive_attention(P, P->q, P->k, P->v, on, ln, G);          \
    (arr)[i] = x - h;                                                     \
    double lm = naive_attention(P, P->q, P->k, P->v, on, ln, G);          \
    (arr)[i] = x;                                                         \
    double g = (lp - lm) / (2 * h);                                       \
    err += (g - (grad)[i]) * (g - (grad)[i]), norm += g * g;              \
  }
  FD(P->q, no, dq);
  for (int s = 0; s < P->W; s++) {
    FD(P->k[s], P->n_k[s] * P->KH * d, dk[s]);
    FD(P->v[s], P->n_k[s] * P->KH * d, dv[s]);
  }
#undef FD
  if (!(sqrt(err / norm) <= tol)) test_fail(__FILE__, __LINE__, "relative gradient error %g > %g", sqrt(err / norm), tol);
}

TEST(ref_bwd_matches_finite_differences_single_step) {
  check_bwd(prob_new(140, 1, 1, 0, 2, 1, 2, PATTERN_VS, 1), 1e-6);
}

TEST(ref_bwd_matches_finite_differences_over_ring_steps) {
  check_bwd(prob_new(150, 2, 32, 1, 2, 1, 2, PATTERN_WINDOW, 0), 1e-6);
  check_bwd(prob_new(150, 2, 32, 0, 2, 1, 2, PATTERN_BLOCK, 0), 1e-6);
}

// ---- the planner's execution form (plan/tiles.c) through the reference -------------------------

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

// Sorted, unique copy of n values as int32 (the planner's head_pattern lists).
static int32_t *sorted_unique(const int64_t *v, int n, int *out_n) {
  int64_t *tmp = malloc(sizeof(int64_t) * (size_t)(n + 1));
  memcpy(tmp, v, sizeof(int64_t) * (size_t)n);
  qsort(tmp, (size_t)n, sizeof *tmp, cmp_i64);
  int32_t *r = malloc(sizeof(int32_t) * (size_t)(n + 1));
  int m = 0;
  for (int i = 0; i < n; i++)
    if (m == 0 || r[m - 1] != tmp[i]) r[m++] = (int32_t)tmp[i];
  free(tmp);
  *out_n = m;
  return r;
}

TEST(ref_fwd_over_the_planners_tiles_equals_naive_attention) {
  // 2 ranks, striped G = 128, 768 tokens (no remainders, so the planner's positions are ours).
  for (int qr = 0; qr < 2; qr++) {
    prob *P = prob_new(768, 2, 128, qr, 4, 2, 8, PATTERN_VS, 0);
    pattern pat;
    layout lay;
    sr_error e;
    CHECK_EQ_INT(pattern_alloc(&pat, P->N, 1, P->H, &e), SR_OK);
    for (int h = 0; h < P->H; h++) {
      head_pattern *hp = pattern_head(&pat, 0, h);
      hp->kind = PATTERN_VS;
      hp->vertical = sorted_unique(P->pat[h].vert, P->pat[h].nv, &hp->n_vertical);
      hp->slash = sorted_unique(P->pat[h].slash, P->pat[h].ns, &hp->n_slash);
    }
    CHECK_EQ_INT(layout_build(LAYOUT_STRIPED, P->N, 2, 128, NULL, &lay, &e), SR_OK);
    int64_t pos[768];
    layout_positions(&lay, qr, pos);
    for (int64_t r = 0; r < P->n_q; r++) CHECK_EQ_INT(pos[r], P->qpos[r]);
    free(P->ti.tile_cnt), free(P->ti.bar_cnt), free(P->ti.tile_idx), free(P->ti.tile_kind), free(P->ti.bar_idx);
    CHECK_EQ_INT(tiles_build(&pat, 0, &lay, qr, &P->ti, &e), SR_OK);
    head_mask *pm = NULL;
    CHECK_EQ_INT(tiles_masks_build(&pat, 0, &pm, &e), SR_OK);
    for (int h = 0; h < P->H; h++) P->masks[h] = pm[h];
    compare_fwd(P, 1e-5);
    tiles_masks_free(pm, P->H);
    tiles_free(&P->ti);
    pattern_free(&pat);
    layout_free(&lay);
  }
}
