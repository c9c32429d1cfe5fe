// test_adaspa_search.c — AdaSpa's exact block search (plan/pattern_estimate.h, "AdaSpa block search over ranks"):
// it picks exactly the blocks a brute-force search over the whole score matrix picks (ties to the lower column),
// its head budgets average to the base sparsity, and the same search split over ranks (queries dealt out, keys
// in shards visited in any order) gives one process's masks bit for bit. The pattern source adaspa-online parses
// into its settings and plans as adaspa's stand-in.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/pattern_estimate.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"
#include "plan/vs_fixed.h"
#include "tests/test.h"

enum { N = 203, H = 4, HKV = 2, D = 8, B = 16, NB = (N + B - 1) / B };

static float frand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(*s >> 11) / 9007199254740992.0 - 0.5);
}

// Q [N, H, D] and K [N, HKV, D]: odd heads' queries 20x shorter than even heads' (flat attention, low recall,
// next to peaked attention, high recall); scale 0: every score 0 (uniform attention: whole blocks of a row tie).
static void inputs(uint64_t seed, float scale, float *q, float *k) {
  for (int i = 0; i < N * H * D; i++) q[i] = scale * ((i / D) % 2 ? 0.05f : 1.0f) * frand(&seed);
  for (int i = 0; i < N * HKV * D; i++) k[i] = 3 * frand(&seed);
}

static adaspa_query whole(const float *q, const int64_t *pos) {
  adaspa_query qs = {H, HKV, D, B, N, N, 1.0f / sqrtf((float)D), q, pos};
  return qs;
}

// ---- the brute force: the whole N x N matrix a head at a time -------------------------------------------

// Block masses of head h: each row's scores, its LSE from the max and the fixed-point sum of exp(s - max),
// then each element's fixed-point probability added into its block (vs_fixed.h's exp and rounding: the numbers
// the search is defined with).
static void brute_mass(const float *q, const float *k, int h, vs_acc *mass) {
  memset(mass, 0, sizeof(vs_acc) * NB * NB);
  static double s[N];
  for (int i = 0; i < N; i++) {
    double m = -INFINITY;
    for (int j = 0; j <= i; j++) {
      double d = 0;
      for (int x = 0; x < D; x++) d += (double)q[(i * H + h) * D + x] * (double)k[(j * HKV + h / (H / HKV)) * D + x];
      s[j] = d * (double)(1.0f / sqrtf((float)D));
      m = fmax(m, s[j]);
    }
    vs_acc z = 0;
    for (int j = 0; j <= i; j++) z += vs_to_fixed(vs_exp_neg(s[j] - m));
    double lse = m + log(vs_fixed_to_double(z));
    for (int j = i; j >= 0; j--) mass[(i / B) * NB + j / B] += vs_to_fixed(vs_exp_neg(s[j] - lse));
  }
}

// The blocks of row pb a brute force keeps at sparsity sp: repeatedly the largest remaining mass, the lower
// column first among equals, ceil((1 - sp)(pb + 1)) times (at least one).
static uint64_t brute_row(const vs_acc *mass, int pb, double sp, vs_acc *kept, vs_acc *total) {
  int quota = (int)ceil((1 - sp) * (pb + 1) - 1e-9);
  quota = quota < 1 ? 1 : quota > pb + 1 ? pb + 1 : quota;
  uint64_t taken = 0;
  for (int c = 0; c <= pb; c++) *total += mass[pb * NB + c];
  for (int t = 0; t < quota; t++) {
    int best = -1;
    for (int c = 0; c <= pb; c++)
      if (!(taken >> c & 1) && (best < 0 || mass[pb * NB + c] > mass[pb * NB + best])) best = c;
    taken |= 1ull << best;
    *kept += mass[pb * NB + best];
  }
  return taken;
}

// AdaSpa's budgets by hand: n = heads above the threshold (at most half); the n highest recalls get (1 + s) / 2,
// the n lowest (3s - 1) / 2 (ties: the lower head first, as ranked high to low).
static void brute_budgets(const double *recall, double s, double *sp) {
  int n = 0, order[H];
  for (int h = 0; h < H; h++) n += recall[h] > 0.8, order[h] = h, sp[h] = s;
  if (n > H / 2) n = H / 2;
  for (int a = 0; a < H; a++)
    for (int b = a + 1; b < H; b++)
      if (recall[order[b]] > recall[order[a]] || (recall[order[b]] == recall[order[a]] && order[b] < order[a])) {
        int t = order[a];
        order[a] = order[b], order[b] = t;
      }
  for (int x = 0; x < n; x++) sp[order[x]] = (1 + s) / 2, sp[order[H - 1 - x]] = fmax(0, (3 * s - 1) / 2);
}

static double ratio(vs_acc k, vs_acc t) { return vs_fixed_to_double(k) / vs_fixed_to_double(t); }

// The brute force's masks (rows of 64-bit words: NB <= 64) and recall of every head at base sparsity s.
static void brute_search(const float *q, const float *k, double s, uint64_t masks[H][NB], double *recall, double *sp) {
  static vs_acc mass[H][NB * NB];
  double base[H];
  for (int h = 0; h < H; h++) {
    brute_mass(q, k, h, mass[h]);
    vs_acc kept = 0, total = 0;
    for (int pb = 0; pb < NB; pb++) brute_row(mass[h], pb, s, &kept, &total);
    base[h] = ratio(kept, total);
  }
  brute_budgets(base, s, sp);
  for (int h = 0; h < H; h++) {
    vs_acc kept = 0, total = 0;
    for (int pb = 0; pb < NB; pb++) masks[h][pb] = brute_row(mass[h], pb, sp[h], &kept, &total);
    recall[h] = ratio(kept, total);
  }
}

static void check_same_masks(const pattern *p, uint64_t want[H][NB]) {
  for (int h = 0; h < H; h++) {
    const head_pattern *hp = pattern_head(p, 0, h);
    CHECK_EQ_INT(hp->kind, PATTERN_BLOCK);
    CHECK_EQ_INT(hp->block, B);
    CHECK_EQ_INT(hp->n_blocks, NB);
    for (int pb = 0; pb < NB && hp->mask; pb++)
      if (hp->mask[pb] != want[h][pb]) {
        CHECK_EQ_INT(hp->mask[pb], want[h][pb]);
        return;
      }
  }
}

// moved: the budgets of this case must move some heads off s (the head-adaptive rule at work)
static void search_matches_brute_force(float qscale, uint64_t seed, double s, int moved) {
  static float q[N * H * D], k[N * HKV * D];
  static int64_t pos[N];
  static uint64_t want[H][NB];
  for (int i = 0; i < N; i++) pos[i] = i;
  inputs(seed, qscale, q, k);
  double rw[H], rg[H], sp[H];
  brute_search(q, k, s, want, rw, sp);
  int n_moved = 0;
  for (int h = 0; h < H; h++) n_moved += sp[h] != s;
  CHECK_EQ_INT(n_moved > 0, moved);
  pattern p;
  sr_error e = {0};
  adaspa_opts o = {s, B, 0.8};
  adaspa_query qs = whole(q, pos);
  CHECK_EQ_INT(pattern_alloc(&p, N, 1, H, &e), SR_OK);
  CHECK_EQ_INT(adaspa_search_exact(&qs, k, pos, N, NULL, &o, &p, 0, rg, &e), SR_OK);
  check_same_masks(&p, want);
  for (int h = 0; h < H; h++) CHECK_EQ_INT(rg[h] == rw[h], 1);
  pattern_free(&p);
}

TEST(adaspa_search_picks_exactly_the_blocks_a_brute_force_search_picks) {
  search_matches_brute_force(40.0f, 11, 0.4, 1);  // peaked attention: heads of different recall, budgets that move
  search_matches_brute_force(1.0f, 12, 0.75, 0);
}

TEST(adaspa_search_breaks_ties_to_the_lower_column_as_the_brute_force_does) {
  // Q = 0: every score is 0, a row spreads its mass evenly, and the whole blocks of a block row hold exactly the
  // same fixed-point mass; the search must keep the lowest columns among them, as the brute force does
  search_matches_brute_force(0.0f, 13, 0.5, 0);
  static float q[N * H * D], k[N * HKV * D];
  static int64_t pos[N];
  for (int i = 0; i < N; i++) pos[i] = i;
  inputs(13, 0.0f, q, k);
  pattern p;
  sr_error e = {0};
  adaspa_opts o = {0.5, B, 0.8};
  adaspa_query qs = whole(q, pos);
  double r[H];
  CHECK_EQ_INT(pattern_alloc(&p, N, 1, H, &e), SR_OK);
  CHECK_EQ_INT(adaspa_search_exact(&qs, k, pos, N, NULL, &o, &p, 0, r, &e), SR_OK);
  // uniform heads tie everywhere: all keep s; block row 7 keeps 4 of its 8 blocks, the whole ones 0..3
  CHECK_EQ_INT(pattern_head(&p, 0, 0)->mask[7], 0xF);
  pattern_free(&p);
}

TEST(adaspa_budgets_average_to_the_base_sparsity) {
  // six heads, three above 0.8: they go to (1 + s) / 2, the three lowest to (3s - 1) / 2; for s >= 1/3 the mean is s
  enum { HH = 6, NBB = 3 };
  static vs_acc mass[HH * NBB * NBB];
  vs_acc kept[HH], total[HH];
  const double rec[HH] = {0.9, 0.5, 0.95, 0.6, 0.85, 0.7};
  for (int h = 0; h < HH; h++) total[h] = (vs_acc)1 << 62, kept[h] = (vs_acc)(rec[h] * VS_ACC_ONE);
  for (int x = 0; x < HH * NBB * NBB; x++) mass[x] = (vs_acc)(x % 7 + 1) << 50;
  const double bases[] = {0.4, 0.6, 0.8, 0.95};
  for (size_t i = 0; i < sizeof bases / sizeof *bases; i++) {
    pattern p;
    sr_error e = {0};
    CHECK_EQ_INT(pattern_alloc(&p, NBB * 4, 1, HH, &e), SR_OK);
    adaspa_opts o = {bases[i], 4, 0.8};
    double sp[HH], r[HH], mean = 0;
    CHECK_EQ_INT(adaspa_masks_build(mass, kept, total, &o, &p, 0, sp, r, &e), SR_OK);
    for (int h = 0; h < HH; h++) mean += sp[h] / HH;
    CHECK_NEAR(mean, bases[i], 1e-12);
    CHECK_NEAR(sp[2], (1 + bases[i]) / 2, 1e-12);  // the easiest head
    CHECK_NEAR(sp[1], (3 * bases[i] - 1) / 2, 1e-12);  // the hardest
    pattern_free(&p);
  }
}

// One "rank" of a split search: its queries (every W-th stripe of G tokens starting at stripe r) against the key
// shards visited from shard `first` on, masses and kept / total of its share of the block rows added into the sums.
static void rank_search(const float *q, const float *k, int W, int r, int G, int first, double s, vs_acc *mass,
                        vs_acc *kt) {
  static float qr[N * H * D], ks[N * HKV * D];
  static int64_t qpos[N], kpos[N];
  static double row_max[H * N], lse[H * N];
  static vs_acc row_sum[H * N], part[H * NB * NB];
  int64_t nq = 0;
  for (int i = 0; i < N; i++)
    if ((i / G) % W == r) memcpy(qr + nq * H * D, q + i * H * D, sizeof(float) * H * D), qpos[nq++] = i;
  adaspa_query qs = {H, HKV, D, B, nq, N, 1.0f / sqrtf((float)D), qr, qpos};
  for (int x = 0; x < H * nq; x++) row_max[x] = -INFINITY, row_sum[x] = 0;
  memset(part, 0, sizeof part);
  for (int pass = 0; pass < 3; pass++) {
    if (pass == 2) adaspa_lse(&qs, row_max, row_sum, lse);
    for (int t = 0; t < W; t++) {  // shard g holds the keys of stripe class g, visited from `first` on
      int g = (first + t) % W;
      int64_t nk = 0;
      for (int j = 0; j < N; j++)
        if ((j / G) % W == g) memcpy(ks + nk * HKV * D, k + j * HKV * D, sizeof(float) * HKV * D), kpos[nk++] = j;
      if (pass == 0) adaspa_rowmax(&qs, ks, kpos, nk, row_max);
      if (pass == 1) adaspa_rowsum(&qs, ks, kpos, nk, row_max, row_sum);
      if (pass == 2) adaspa_mass_add(&qs, ks, kpos, nk, lse, part);
    }
  }
  for (int x = 0; x < H * NB * NB; x++) mass[x] += part[x];
}

TEST(adaspa_search_split_over_ranks_equals_one_process_bit_for_bit) {
  static float q[N * H * D], k[N * HKV * D];
  static int64_t pos[N];
  static vs_acc mass[H * NB * NB];
  for (int i = 0; i < N; i++) pos[i] = i;
  inputs(21, 3.0f, q, k);
  const double s = 0.7;
  pattern one;
  sr_error e = {0};
  adaspa_opts o = {s, B, 0.8};
  adaspa_query qs = whole(q, pos);
  double r1[H];
  CHECK_EQ_INT(pattern_alloc(&one, N, 1, H, &e), SR_OK);
  CHECK_EQ_INT(adaspa_search_exact(&qs, k, pos, N, NULL, &o, &one, 0, r1, &e), SR_OK);
  const int ws[] = {2, 3, 4}, gs[] = {5, 16, 24};  // stripes that split block rows between ranks, and whole ones
  for (int a = 0; a < 3; a++) {
    int W = ws[a], G = gs[a];
    memset(mass, 0, sizeof mass);
    for (int r = 0; r < W; r++) rank_search(q, k, W, r, G, (r + a) % W, s, mass, NULL);
    vs_acc kt[2 * H] = {0};
    for (int r = 0; r < W; r++)  // each rank selects its share of the block rows; the kept and total masses add up
      for (int h = 0; h < H; h++)
        adaspa_select_rows(mass + h * NB * NB, NB, s, NB * r / W, NB * (r + 1) / W, 0, NULL, &kt[h], &kt[H + h]);
    pattern split;
    double r2[H];
    CHECK_EQ_INT(pattern_alloc(&split, N, 1, H, &e), SR_OK);
    CHECK_EQ_INT(adaspa_masks_build(mass, kt, kt + H, &o, &split, 0, NULL, r2, &e), SR_OK);
    for (int h = 0; h < H; h++) {
      CHECK_EQ_INT(memcmp(pattern_head(&split, 0, h)->mask, pattern_head(&one, 0, h)->mask, sizeof(uint64_t) * NB), 0);
      CHECK_EQ_INT(r2[h] == r1[h], 1);
    }
    pattern_free(&split);
  }
  pattern_free(&one);
}

TEST(adaspa_online_spec_parses_and_plans_as_the_adaspa_stand_in) {
  adaspa_opts o;
  sr_error e = {0};
  CHECK_EQ_INT(pattern_spec_adaspa_opts("adaspa-online:0.85:64", &o, &e), SR_OK);
  CHECK_NEAR(o.sparsity, 0.85, 0);
  CHECK_EQ_INT(o.block, 64);
  CHECK_NEAR(o.threshold, 0.8, 0);
  CHECK_EQ_INT(pattern_spec_adaspa_opts("adaspa-online:0.5", &o, &e), SR_OK);
  CHECK_EQ_INT(o.block, 128);
  CHECK_EQ_INT(pattern_spec_estimation("adaspa-online:0.5"), PATTERN_SEARCHED);
  CHECK_EQ_INT(pattern_spec_estimation("adaspa:0.5"), PATTERN_FIXED);
  CHECK(pattern_spec_at_run_time("adaspa-online:0.5") && pattern_spec_at_run_time("vs-online:0.9"));
  CHECK(!pattern_spec_at_run_time("adaspa:0.5") && !pattern_spec_at_run_time("vs-topp:0.9"));
  const char *bad[] = {"adaspa-online:1", "adaspa-online", "adaspa-online:0.5:0", "adaspa-online:0.5:16:2", "adaspa:0.5"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    e = (sr_error){0};
    CHECK_EQ_INT(pattern_spec_adaspa_opts(bad[i], &o, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, "pattern");
  }
  // planned and simulated as adaspa:S[:B]: the same synthetic heads
  model_config m;
  CHECK_EQ_INT(model_load("tiny-test", &m, &e), SR_OK);
  pattern a, b;
  CHECK_EQ_INT(pattern_from_spec("adaspa-online:0.7:32", &m, 1000, 3, 0, &a, &e), SR_OK);
  CHECK_EQ_INT(pattern_from_spec("adaspa:0.7:32", &m, 1000, 3, 0, &b, &e), SR_OK);
  for (int64_t h = 0; h < (int64_t)a.layers * a.heads; h++) CHECK(pattern_heads_equal(&a.h[h], &b.h[h]));
  pattern_free(&a), pattern_free(&b);
}
