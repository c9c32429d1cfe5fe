// test_kernels_estimate.c — CPU reference of the pattern estimation (kernels/estimate_ref.c) against
// direct float64 computations written here: the distributed softmax pieces, the vertical and slash
// scores, top-p with cap, and AdaSpa's block mass with per-row top-k.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"
#include "plan/pattern.h"
#include "tests/test.h"

enum { N = 300, NL = 64, H = 4, KH = 2, D = 16, W = 3 };

static uint64_t st = 99;
static float rndf(void) {
  st = st * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(st >> 11) / 9007199254740992.0 * 2 - 1);
}

// Keys: all N tokens split contiguously over W ranks; queries: the last NL tokens.
typedef struct {
  float q[NL * H * D], k[N * KH * D];
  int64_t qpos[NL], kpos[N];
  int64_t start[W + 1];
} setup;

static setup *make_setup(void) {
  setup *S = calloc(1, sizeof *S);
  for (int i = 0; i < NL * H * D; i++) S->q[i] = 2 * rndf();
  for (int i = 0; i < N * KH * D; i++) S->k[i] = 2 * rndf();
  for (int i = 0; i < NL; i++) S->qpos[i] = N - NL + i;
  for (int i = 0; i < N; i++) S->kpos[i] = i;
  for (int w = 0; w <= W; w++) S->start[w] = (int64_t)N * w / W;
  return S;
}

static sa_shape shape_w(const setup *S, int w) {
  return (sa_shape){.n_q = NL, .n_k = S->start[w + 1] - S->start[w], .heads = H, .kv_heads = KH, .head_dim = D,
                    .scale = 0.25f};
}

// Probability of key j for last-query row r of head h over all N keys, computed directly.
static double prob_direct(const setup *S, int h, int r, int j) {
  if (j > S->qpos[r]) return 0;
  double sc[N], mx = -INFINITY, sum = 0;
  for (int x = 0; x <= S->qpos[r]; x++) {
    double dt = 0;
    for (int c = 0; c < D; c++) dt += (double)S->q[(r * H + h) * D + c] * S->k[(x * KH + h / 2) * D + c];
    sc[x] = dt * 0.25, mx = fmax(mx, sc[x]);
  }
  for (int x = 0; x <= S->qpos[r]; x++) sum += exp(sc[x] - mx);
  return exp(sc[j] - mx) / sum;
}

static void global_pieces(const setup *S, double *M, double *L) {
  double mx[W * H * NL], sm[W * H * NL];
  for (int w = 0; w < W; w++) {
    sa_shape s = shape_w(S, w);
    sa_ref_vs_pieces(&s, S->q, S->qpos, S->k + S->start[w] * KH * D, S->kpos + S->start[w], mx + w * H * NL,
                     sm + w * H * NL);
  }
  sa_softmax_combine(W, H * NL, mx, sm, M, L);
}

TEST(vs_pieces_combined_over_ranks_give_the_global_row_max_and_sum) {
  setup *S = make_setup();
  double M[H * NL], L[H * NL];
  global_pieces(S, M, L);
  for (int h = 0; h < H; h++)
    for (int r = 0; r < NL; r += 7) {
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j <= S->qpos[r]; j++) {
        double dt = 0;
        for (int c = 0; c < D; c++) dt += (double)S->q[(r * H + h) * D + c] * S->k[(j * KH + h / 2) * D + c];
        mx = fmax(mx, dt * 0.25);
      }
      for (int j = 0; j <= S->qpos[r]; j++) {
        double dt = 0;
        for (int c = 0; c < D; c++) dt += (double)S->q[(r * H + h) * D + c] * S->k[(j * KH + h / 2) * D + c];
        sum += exp(dt * 0.25 - mx);
      }
      CHECK_NEAR(M[h * NL + r], mx, 1e-12);
      CHECK_REL(L[h * NL + r], sum, 1e-12);
    }
  free(S);
}

TEST(vs_scores_are_the_column_and_diagonal_sums_of_the_softmax) {
  setup *S = make_setup();
  double M[H * NL], L[H * NL];
  global_pieces(S, M, L);
  double *vert = calloc((size_t)H * N, sizeof(double)), *slash = calloc((size_t)H * N, sizeof(double));
  for (int w = 0; w < W; w++) {  // each rank scores its columns; slash sums over ranks
    sa_shape s = shape_w(S, w);
    double *v = calloc((size_t)H * s.n_k, sizeof(double));
    sa_ref_vs_scores(&s, S->q, S->qpos, S->k + S->start[w] * KH * D, S->kpos + S->start[w], M, L, N, v, slash);
    for (int h = 0; h < H; h++)
      for (int64_t j = 0; j < s.n_k; j++) vert[h * N + S->start[w] + j] = v[h * s.n_k + j];
    free(v);
  }
  for (int h = 0; h < H; h++) {
    double total_v = 0, total_s = 0;
    for (int j = 0; j < N; j++) total_v += vert[h * N + j], total_s += slash[h * N + j];
    CHECK_NEAR(total_v, NL, 1e-9);  // every row's probabilities sum to one
    CHECK_NEAR(total_s, NL, 1e-9);
    for (int j = 0; j < N; j += 37) {
      double want = 0;
      for (int r = 0; r < NL; r++) want += prob_direct(S, h, r, j);
      CHECK_NEAR(vert[h * N + j], want, 1e-12);
    }
    for (int off = 0; off < N; off += 41) {
      double want = 0;
      for (int r = 0; r < NL; r++)
        if (S->qpos[r] - off >= 0) want += prob_direct(S, h, r, (int)(S->qpos[r] - off));
      CHECK_NEAR(slash[h * N + off], want, 1e-12);
    }
  }
  // The chosen indices form a valid pattern head (what plan/tiles.c turns into the execution form).
  head_pattern hp;
  memset(&hp, 0, sizeof hp);
  int32_t vi[N], si[N];
  hp.kind = PATTERN_VS;
  hp.n_vertical = (int32_t)sa_top_p(vert, N, 0.9, 4096, vi), hp.vertical = vi;
  hp.n_slash = (int32_t)sa_top_p(slash, N, 0.9, 4096, si), hp.slash = si;
  sr_error e;
  CHECK(hp.n_vertical > 0 && hp.n_slash > 0);
  CHECK_EQ_INT(pattern_validate_head(&hp, N, "est", "head", &e), SR_OK);
  free(vert), free(slash), free(S);
}

TEST(top_p_takes_the_fewest_heaviest_indices_reaching_the_mass) {
  double sc[5] = {0.1, 0.5, 0.05, 0.3, 0.05};
  int32_t out[5];
  CHECK_EQ_INT(sa_top_p(sc, 5, 0.75, 10, out), 2);  // 0.5 + 0.3 >= 0.75
  CHECK_EQ_INT(out[0], 1);
  CHECK_EQ_INT(out[1], 3);
  CHECK_EQ_INT(sa_top_p(sc, 5, 0.5, 10, out), 1);
  CHECK_EQ_INT(out[0], 1);
  CHECK_EQ_INT(sa_top_p(sc, 5, 0.93, 10, out), 4);  // 0.9 + one 0.05; of the tied 0.05s the lower index (2)
  CHECK_EQ_INT(out[0], 0);
  CHECK_EQ_INT(out[1], 1);
  CHECK_EQ_INT(out[2], 2);
  CHECK_EQ_INT(out[3], 3);
}

TEST(top_p_stops_at_the_cap) {
  double sc[4] = {0.25, 0.25, 0.25, 0.25};
  int32_t out[4];
  CHECK_EQ_INT(sa_top_p(sc, 4, 0.9, 2, out), 2);
  CHECK_EQ_INT(out[0], 0);
  CHECK_EQ_INT(out[1], 1);
  double zero[3] = {0, 0, 0};
  CHECK_EQ_INT(sa_top_p(zero, 3, 0.9, 8, out), 0);
}

TEST(block_mass_with_the_exact_lse_sums_to_the_rows_of_each_block) {
  // One sequence (AdaSpa has no ring): N tokens, block 32; LSE computed directly here.
  enum { BN = 100, B = 32 };
  static float q[BN * H * D], k[BN * KH * D], lse[H * BN];
  int64_t pos[BN];
  for (int i = 0; i < BN * H * D; i++) q[i] = rndf();
  for (int i = 0; i < BN * KH * D; i++) k[i] = rndf();
  for (int i = 0; i < BN; i++) pos[i] = i;
  for (int h = 0; h < H; h++)
    for (int r = 0; r < BN; r++) {
      double mx = -INFINITY, sum = 0, sc[BN];
      for (int j = 0; j <= r; j++) {
        double dt = 0;
        for (int c = 0; c < D; c++) dt += (double)q[(r * H + h) * D + c] * k[(j * KH + h / 2) * D + c];
        sc[j] = dt * 0.25, mx = fmax(mx, sc[j]);
      }
      for (int j = 0; j <= r; j++) sum += exp(sc[j] - mx);
      lse[h * BN + r] = (float)(mx + log(sum));
    }
  sa_shape s = {.n_q = BN, .n_k = BN, .heads = H, .kv_heads = KH, .head_dim = D, .scale = 0.25f};
  int nb = (BN + B - 1) / B;
  double *mass = malloc(sizeof(double) * (size_t)(H * nb * nb));
  sa_ref_block_mass(&s, q, k, pos, pos, lse, B, mass);
  for (int h = 0; h < H; h++)
    for (int a = 0; a < nb; a++) {
      double row = 0;
      for (int c = 0; c < nb; c++) row += mass[(h * nb + a) * nb + c];
      int rows = (a + 1) * B <= BN ? B : BN - a * B;
      CHECK_NEAR(row, rows, 1e-4);  // float LSE: each row's mass is 1 within ~1e-6
      for (int c = a + 1; c < nb; c++) CHECK(mass[(h * nb + a) * nb + c] == 0.0);  // above the diagonal
    }
  free(mass);
}

TEST(block_topk_keeps_the_k_heaviest_blocks_of_each_row) {
  double mass[6] = {0.2, 0.5, 0.3, 0.0, 0.9, 0.1};
  uint64_t bm[2];
  sa_block_topk(mass, 2, 3, 2, bm);
  CHECK_EQ_INT(bm[0], 0x6);  // blocks 1 and 2
  CHECK_EQ_INT(bm[1], 0x6);
  sa_block_topk(mass, 2, 3, 3, bm);
  CHECK_EQ_INT(bm[0], 0x7);
  CHECK_EQ_INT(bm[1], 0x6);  // a block without mass is never kept
}
