// test_balance_bound.c — what whole tiles allow (plan/balance_bound.c) and the step refinement's search
// (plan/balance_steps.c) against every dealing of a few tiles, enumerated: the bound never lies above the
// best dealing, it is reached where one heavy tile decides, and the refinement never ends below it.
#include <stdlib.h>
#include <string.h>

#include "plan/balance.h"
#include "plan/balance_internal.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "tests/test.h"
#include "traces/trace.h"

// The step figure's numerator (sum over layers and ring steps of the slowest rank's work) and the heaviest
// rank's load of one dealing, straight from the definition (balance.h): rank r at step t meets rank (r - t)'s keys.
static void dealing_figures(const double *P, int L, int nb, int W, const int *R, double *step, double *heaviest) {
  double load[8] = {0};
  *step = 0;
  for (int l = 0; l < L; l++)
    for (int t = 0; t < W; t++) {
      double mx = 0;
      for (int r = 0; r < W; r++) {
        double x = 0;
        for (int q = 0; q < nb; q++)
          for (int c = 0; c < nb; c++)
            if (R[q] == r && R[c] == (r - t + W) % W) x += P[(l * nb + q) * nb + c];
        load[r] += x;
        if (x > mx) mx = x;
      }
      *step += mx;
    }
  *heaviest = 0;
  for (int r = 0; r < W; r++) *heaviest = load[r] > *heaviest ? load[r] : *heaviest;
}

// The lowest of both over every dealing with nb / W tiles a rank (nb a multiple of W), by enumeration.
static void brute_force(const double *P, int L, int nb, int W, double *best_step, double *best_heaviest) {
  int R[16] = {0};
  *best_step = *best_heaviest = 1e300;
  for (long code = 0;; code++) {
    long x = code;
    int held[8] = {0}, ok = 1;
    for (int b = 0; b < nb; b++) R[b] = (int)(x % W), x /= W, ok &= ++held[R[b]] <= nb / W;
    if (x) break;
    if (!ok) continue;
    double s, h;
    dealing_figures(P, L, nb, W, R, &s, &h);
    if (s < *best_step) *best_step = s;
    if (h < *best_heaviest) *best_heaviest = h;
  }
}

TEST(heaviest_bound_counts_the_places_a_heavy_value_shares) {
  double scratch[6];
  // 10 shares its rank with at least one other value, at least 1: 11, which {10, 1} | {1, 1} reaches.
  const double a[] = {10, 1, 1, 1};
  CHECK_NEAR(balance_heaviest_bound(a, 4, 2, scratch), 11, 1e-12);
  // three 5s over two ranks of three: one rank holds two of them and one more value: 5 + 5 + 1 = 11 (mean 9).
  const double b[] = {5, 1, 5, 1, 5, 1};
  CHECK_NEAR(balance_heaviest_bound(b, 6, 2, scratch), 11, 1e-12);
  // nothing heavy: the mean
  const double c[] = {2, 2, 2, 2, 2, 2};
  CHECK_NEAR(balance_heaviest_bound(c, 6, 3, scratch), 4, 1e-12);
}

// A sink column: every query tile spends 10 on key tile 0, 1 on its own diagonal. Whichever rank holds key
// tile 0 meets it once per step, with its other key tile's work: 41 + 1 = 42, and {0, 1} | {2, 3} reaches it
// (step 0: 22 and 2, step 1: 0 and 20).
TEST(tile_bound_of_a_sink_column_is_the_best_dealing) {
  double P[16] = {0};
  for (int q = 0; q < 4; q++) P[q * 4 + 0] += 10, P[q * 4 + q] += 1;
  sr_error e;
  double heaviest, step, best_step, best_heaviest;
  CHECK_EQ_INT(balance_pair_bound(P, 1, 4, 2, &heaviest, &step, &e), SR_OK);
  brute_force(P, 1, 4, 2, &best_step, &best_heaviest);
  CHECK_NEAR(best_step, 42, 1e-12);
  CHECK_NEAR(step, 42, 1e-12);
  CHECK(heaviest <= best_heaviest + 1e-12);
}

static double lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(*s >> 11) / 9007199254740992.0;
}

// Causal pair work with a few heavy cells, two layers, eight tiles over four ranks (2520 dealings).
static void random_pairs(uint64_t seed, double *P) {
  for (int l = 0; l < 2; l++)
    for (int q = 0; q < 8; q++)
      for (int c = 0; c < 8; c++) {
        double w = c > q ? 0 : lcg(&seed);
        P[(l * 8 + q) * 8 + c] = w > 0.9 ? 20 * w : w;
      }
}

TEST(tile_bound_never_exceeds_the_best_dealing_and_the_refinement_never_ends_below_it) {
  sr_error e;
  for (uint64_t seed = 1; seed <= 6; seed++) {
    double P[128], heaviest, step, best_step, best_heaviest;
    random_pairs(seed, P);
    CHECK_EQ_INT(balance_pair_bound(P, 2, 8, 4, &heaviest, &step, &e), SR_OK);
    brute_force(P, 2, 8, 4, &best_step, &best_heaviest);
    CHECK(step <= best_step * (1 + 1e-12));
    CHECK(heaviest <= best_heaviest * (1 + 1e-12));
    for (int spread = 0; spread < 2; spread++) {
      int32_t R[8];
      int Ri[8];
      for (int b = 0; b < 8; b++) R[b] = b % 4;  // striped
      double s0, h0, s1, h1;
      for (int b = 0; b < 8; b++) Ri[b] = R[b];
      dealing_figures(P, 2, 8, 4, Ri, &s0, &h0);
      int64_t swaps;
      CHECK_EQ_INT(balance_refine_steps(P, 2, 8, 4, spread, R, &swaps, &e), SR_OK);
      int held[4] = {0};
      for (int b = 0; b < 8; b++) held[Ri[b] = R[b]]++;
      for (int r = 0; r < 4; r++) CHECK_EQ_INT(held[r], 2);
      dealing_figures(P, 2, 8, 4, Ri, &s1, &h1);
      CHECK(s1 <= s0 * (1 + 1e-12));          // never worse than where it started
      CHECK(s1 >= best_step * (1 - 1e-12));   // and no dealing is better than the best
    }
  }
}

// The plateau walk is deterministic: the same dealing from the same start, twice.
TEST(step_refinement_with_the_plateau_walk_is_deterministic) {
  sr_error e;
  double P[128];
  random_pairs(7, P);
  int32_t a[8], b[8];
  for (int i = 0; i < 8; i++) a[i] = b[i] = (int32_t)(i % 4);
  int64_t sa, sb;
  CHECK_EQ_INT(balance_refine_steps(P, 2, 8, 4, 1, a, &sa, &e), SR_OK);
  CHECK_EQ_INT(balance_refine_steps(P, 2, 8, 4, 1, b, &sb, &e), SR_OK);
  CHECK(memcmp(a, b, sizeof a) == 0);
  CHECK_EQ_INT(sa, sb);
}

// Every layout of whole tiles is at or above the bound: striped:128 and balanced on a vs-topp pattern.
TEST(striped_and_balanced_are_never_below_the_tile_bound) {
  sr_error e;
  model_config m = {.num_layers = 2, .num_heads = 4};
  pattern p;
  CHECK_EQ_INT(pattern_from_spec("vs-topp:0.9", &m, 128 * 48, 3, 0, &p, &e), SR_OK);
  const int ranks[] = {4, 8, 16};
  for (int k = 0; k < 3; k++) {
    balance_figures bound;
    CHECK_EQ_INT(balance_tile_bound(&p, ranks[k], &bound, &e), SR_OK);
    const char *names[] = {"striped:128", "balanced"};
    for (int i = 0; i < 2; i++) {
      layout l;
      balance_figures f;
      CHECK_EQ_INT(balance_layout_named(&p, names[i], ranks[k], &l, &e), SR_OK);
      CHECK_EQ_INT(balance_of(&p, &l, &f, &e), SR_OK);
      layout_free(&l);
      CHECK(f.worker >= bound.worker * (1 - 1e-9));
      CHECK(f.step >= bound.step * (1 - 1e-9));
      CHECK(bound.step >= bound.worker * (1 - 1e-12));
    }
  }
  pattern_free(&p);
}
