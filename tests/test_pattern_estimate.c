// test_pattern_estimate.c — online estimation against brute-force float64: MTraining's VS estimation (and its
// independence of how K is spread over ranks) and AdaSpa's block search with head-adaptive budgets.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/pattern_estimate.h"
#include "tests/test.h"

enum { N = 400, H = 4, KVH = 2, DIM = 8, NQ = 64 };

static float frand(uint64_t *s) {  // uniform in [-1, 1)
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(*s >> 11) / 9007199254740992.0 * 2 - 1);
}

typedef struct {
  float q[NQ * H * DIM], k[N * KVH * DIM];
  int64_t qpos[NQ];
  vs_est_query qs;
} vs_case;

static void make_case(vs_case *c, uint64_t seed) {
  for (int i = 0; i < NQ * H * DIM; i++) c->q[i] = 3 * frand(&seed);
  for (int i = 0; i < N * KVH * DIM; i++) c->k[i] = 3 * frand(&seed);
  for (int i = 0; i < NQ; i++) c->qpos[i] = N - NQ + i;
  c->qs = (vs_est_query){.heads = H, .kv_heads = KVH, .head_dim = DIM, .n_q = NQ, .n_tokens = N,
                         .scale = 1.0f / sqrtf((float)DIM), .q = c->q, .qpos = c->qpos};
}

// Run the three passes with keys dealt to W ranks in blocks of 7 (uneven), combining after each pass.
static void run_distributed(const vs_case *c, int W, vs_acc *vert, vs_acc *slash) {
  double row_max[H * NQ];
  vs_acc row_sum[H * NQ];
  for (int i = 0; i < H * NQ; i++) row_max[i] = -INFINITY, row_sum[i] = 0;
  memset(vert, 0, sizeof(vs_acc) * H * N);
  memset(slash, 0, sizeof(vs_acc) * H * N);
  static float kr[N * KVH * DIM];
  static int64_t kp[N];
  for (int pass = 0; pass < 3; pass++)
    for (int r = 0; r < W; r++) {
      int64_t n = 0;
      for (int64_t t = 0; t < N; t++)
        if ((t / 7) % W == r) {
          memcpy(kr + n * KVH * DIM, c->k + t * KVH * DIM, sizeof(float) * KVH * DIM);
          kp[n++] = t;
        }
      double rm[H * NQ];  // each rank's own partial, merged like an allreduce would
      for (int i = 0; i < H * NQ; i++) rm[i] = -INFINITY;
      if (pass == 0) {
        vs_est_rowmax(&c->qs, kr, kp, n, rm);
        for (int i = 0; i < H * NQ; i++) row_max[i] = fmax(row_max[i], rm[i]);
      } else if (pass == 1) {
        vs_est_rowsum(&c->qs, kr, kp, n, row_max, row_sum);
      } else {
        vs_est_scores(&c->qs, kr, kp, n, row_max, row_sum, vert, slash);
      }
    }
}

// Brute force: float64 softmax of each query row, column and diagonal sums.
static void brute_scores(const vs_case *c, double *vert, double *slash) {
  memset(vert, 0, sizeof(double) * H * N);
  memset(slash, 0, sizeof(double) * H * N);
  for (int h = 0; h < H; h++)
    for (int i = 0; i < NQ; i++) {
      double s[N], m = -INFINITY, z = 0;
      for (int64_t t = 0; t <= c->qpos[i]; t++) {
        double d = 0;
        for (int x = 0; x < DIM; x++) d += (double)c->q[(i * H + h) * DIM + x] * c->k[(t * KVH + h / 2) * DIM + x];
        s[t] = d * (double)(1.0f / sqrtf((float)DIM));  // the float scale the API takes
        m = fmax(m, s[t]);
      }
      for (int64_t t = 0; t <= c->qpos[i]; t++) z += exp(s[t] - m);
      for (int64_t t = 0; t <= c->qpos[i]; t++) {
        vert[h * N + t] += exp(s[t] - m) / z;
        slash[h * N + (c->qpos[i] - t)] += exp(s[t] - m) / z;
      }
    }
}

// Brute-force top-p with cap on doubles: count of the fewest top scores reaching p of the total.
static int brute_topp(const double *sc, double p, int cap, int32_t *out) {
  int used[N] = {0}, n = 0;
  double total = 0, mass = 0;
  for (int x = 0; x < N; x++) total += sc[x];
  while (mass < p * total && n < cap) {
    int best = -1;
    for (int x = 0; x < N; x++)
      if (!used[x] && (best < 0 || sc[x] > sc[best])) best = x;
    used[best] = 1;
    mass += sc[best];
    n++;
  }
  int m = 0;
  for (int x = 0; x < N; x++)
    if (used[x]) out[m++] = x;
  return m;
}

TEST(vs_estimation_scores_match_brute_force_float64) {
  static vs_case c;
  make_case(&c, 1);
  static vs_acc vert[H * N], slash[H * N];
  static double bv[H * N], bs[H * N];
  run_distributed(&c, 1, vert, slash);
  brute_scores(&c, bv, bs);
  double worst = 0;
  for (int x = 0; x < H * N; x++) {
    worst = fmax(worst, fabs((double)vert[x] / VS_ACC_ONE - bv[x]));
    worst = fmax(worst, fabs((double)slash[x] / VS_ACC_ONE - bs[x]));
  }
  CHECK(worst < 1e-12);
}

TEST(vs_estimation_selects_the_brute_force_top_p_set_with_cap) {
  static vs_case c;
  make_case(&c, 2);
  static vs_acc vert[H * N], slash[H * N];
  static double bv[H * N], bs[H * N];
  run_distributed(&c, 1, vert, slash);
  brute_scores(&c, bv, bs);
  sr_error e;
  pattern p;
  pattern_alloc(&p, N, 1, H, &e);
  const double ps[] = {0.5, 0.9, 0.95};
  for (int t = 0; t < 3; t++) {
    vs_est_opts o = vs_est_defaults();
    o.p = ps[t];
    o.cap = t == 2 ? 30 : 4096;
    CHECK_EQ_INT(vs_est_select(vert, slash, &c.qs, &o, &p, 0, &e), SR_OK);
    for (int h = 0; h < H; h++) {
      int32_t want[N];
      const head_pattern *hp = pattern_head(&p, 0, h);
      int n = brute_topp(bv + h * N, o.p, o.cap, want);
      CHECK_EQ_INT(hp->n_vertical, n);
      CHECK(hp->n_vertical == n && memcmp(hp->vertical, want, sizeof(int32_t) * n) == 0);
      n = brute_topp(bs + h * N, o.p, o.cap, want);
      CHECK_EQ_INT(hp->n_slash, n);
      CHECK(hp->n_slash == n && memcmp(hp->slash, want, sizeof(int32_t) * n) == 0);
    }
  }
  pattern_free(&p);
}

TEST(vs_estimation_is_identical_for_any_number_of_ranks) {
  static vs_case c;
  make_case(&c, 3);
  static vs_acc v1[H * N], s1[H * N], vw[H * N], sw[H * N];
  run_distributed(&c, 1, v1, s1);
  const int ws[] = {2, 3, 5};
  for (int i = 0; i < 3; i++) {
    run_distributed(&c, ws[i], vw, sw);
    CHECK(memcmp(v1, vw, sizeof v1) == 0);
    CHECK(memcmp(s1, sw, sizeof s1) == 0);
  }
}

TEST(vs_fixed_budget_mode_takes_top_k_plus_forced_sinks_and_window) {
  static vs_case c;
  make_case(&c, 4);
  static vs_acc vert[H * N], slash[H * N];
  run_distributed(&c, 2, vert, slash);
  sr_error e;
  pattern p;
  pattern_alloc(&p, N, 1, H, &e);
  vs_est_opts o = vs_est_defaults();
  o.topk_v = 10;
  o.topk_s = 7;
  o.sinks = 4;
  o.window = 3;
  CHECK_EQ_INT(vs_est_select(vert, slash, &c.qs, &o, &p, 0, &e), SR_OK);
  for (int h = 0; h < H; h++) {
    const head_pattern *hp = pattern_head(&p, 0, h);
    CHECK_EQ_INT(hp->n_vertical, 14);
    CHECK_EQ_INT(hp->n_slash, 10);
    for (int x = 0; x < 4; x++) CHECK_EQ_INT(hp->vertical[x], x);
    for (int x = 0; x < 3; x++) CHECK_EQ_INT(hp->slash[x], x);
    CHECK_EQ_INT(pattern_validate_head(hp, N, NULL, "est", &e), SR_OK);
  }
  pattern_free(&p);
}

// ---------------------------------------------------------------------------------------------
// AdaSpa

enum { AN = 200, AB = 32, ANB = (AN + AB - 1) / AB };

static void brute_block_mass(const float *q, const float *k, int h, double *mass, double *lse) {
  memset(mass, 0, sizeof(double) * ANB * ANB);
  for (int i = 0; i < AN; i++) {
    double s[AN], m = -INFINITY, z = 0;
    for (int j = 0; j <= i; j++) {
      double d = 0;
      for (int x = 0; x < DIM; x++) d += (double)q[(i * 2 + h) * DIM + x] * k[j * DIM + x];
      s[j] = d * (double)(1.0f / sqrtf((float)DIM));
      m = fmax(m, s[j]);
    }
    for (int j = 0; j <= i; j++) z += exp(s[j] - m);
    lse[i] = m + log(z);
    for (int j = 0; j <= i; j++) mass[(i / AB) * ANB + j / AB] += exp(s[j] - m) / z;
  }
}

TEST(adaspa_block_mass_fused_and_cached_match_brute_force) {
  static float q[AN * 2 * DIM], k[AN * DIM];
  uint64_t seed = 5;
  for (int i = 0; i < AN * 2 * DIM; i++) q[i] = 2 * frand(&seed);
  for (int i = 0; i < AN * DIM; i++) k[i] = 2 * frand(&seed);
  static double want[ANB * ANB], fused[ANB * ANB], cached[ANB * ANB], lse[AN];
  sr_error e;
  for (int h = 0; h < 2; h++) {
    brute_block_mass(q, k, h, want, lse);
    CHECK_EQ_INT(adaspa_block_mass(q, k, AN, 2, 1, DIM, h, 1.0f / sqrtf((float)DIM), AB, NULL, fused, &e), SR_OK);
    CHECK_EQ_INT(adaspa_block_mass(q, k, AN, 2, 1, DIM, h, 1.0f / sqrtf((float)DIM), AB, lse, cached, &e), SR_OK);
    double worst = 0;
    for (int x = 0; x < ANB * ANB; x++) worst = fmax(worst, fmax(fabs(fused[x] - want[x]), fabs(cached[x] - want[x])));
    CHECK(worst < 1e-10);
    for (int pb = 0; pb < ANB; pb++) {  // every row's probabilities sum to one
      double row = 0;
      for (int c = 0; c < ANB; c++) row += fused[pb * ANB + c];
      CHECK_NEAR(row, (pb + 1) * AB <= AN ? AB : AN - pb * AB, 1e-9);
    }
  }
}

TEST(adaspa_select_keeps_the_top_blocks_of_each_row_and_reports_recall) {
  double mass[4 * 4] = {5, 0, 0, 0, 1, 3, 0, 0, 2, 0.5, 4, 0, 0.1, 6, 0.2, 3};
  uint64_t mask[4];
  double recall = adaspa_select(mass, 4, 0.5, 1, mask);
  // quotas ceil(0.5 (p+1)) = 1, 1, 2, 2: rows keep {0}, {1}, {2, 0}, {1, 3}
  CHECK_EQ_INT(mask[0], 0x1);
  CHECK_EQ_INT(mask[1], 0x2);
  CHECK_EQ_INT(mask[2], 0x5);
  CHECK_EQ_INT(mask[3], 0xA);
  CHECK_NEAR(recall, (5 + 3 + 6 + 9) / (5 + 4 + 6.5 + 9.3), 1e-12);
}

TEST(adaspa_head_adaptive_budgets_move_n_easy_and_n_hard_heads) {
  double recall[6] = {0.9, 0.85, 0.5, 0.6, 0.95, 0.7}, out[6];
  adaspa_head_sparsity(recall, 6, 0.6, 0.8, out);
  const double want[6] = {0.8, 0.8, 0.4, 0.4, 0.8, 0.4};  // three heads above 0.8; the three lowest below
  for (int h = 0; h < 6; h++) CHECK_NEAR(out[h], want[h], 1e-12);
  double few[4] = {0.9, 0.3, 0.5, 0.4}, o2[4];
  adaspa_head_sparsity(few, 4, 0.9, 0.8, o2);  // one easy head: it goes to 0.95, the lowest (0.3) to 0.85
  CHECK_NEAR(o2[0], 0.95, 1e-12);
  CHECK_NEAR(o2[1], 0.85, 1e-12);
  CHECK_NEAR(o2[2], 0.9, 1e-12);
  CHECK_NEAR(o2[3], 0.9, 1e-12);
}

TEST(adaspa_search_layer_builds_valid_block_heads_with_recall) {
  static float q[AN * 2 * DIM], k[AN * DIM];
  uint64_t seed = 6;
  for (int i = 0; i < AN * 2 * DIM; i++) q[i] = 2 * frand(&seed);
  for (int i = 0; i < AN * DIM; i++) k[i] = 2 * frand(&seed);
  sr_error e;
  pattern p;
  pattern_alloc(&p, AN, 1, 2, &e);
  double recall[2];
  CHECK_EQ_INT(adaspa_search_layer(q, k, AN, 2, 1, DIM, 1.0f / sqrtf((float)DIM), AB, NULL, 0.5, &p, 0, recall, &e),
               SR_OK);
  for (int h = 0; h < 2; h++) {
    CHECK_EQ_INT(pattern_validate_head(pattern_head(&p, 0, h), AN, NULL, "adaspa", &e), SR_OK);
    CHECK(recall[h] > 0.5 && recall[h] <= 1.0);
  }
  pattern_free(&p);
}
