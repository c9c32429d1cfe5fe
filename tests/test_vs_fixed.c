// test_vs_fixed.c — the arithmetic the CPU and GPU VS estimators share (plan/vs_fixed.h): exp against libm,
// fixed-point conversion, and the exact top-p stopping rule against independent exact comparisons.
#include <math.h>
#include <stdint.h>

#include "plan/vs_fixed.h"
#include "tests/test.h"

TEST(vs_exp_neg_is_within_two_ulp_of_libm_on_minus_60_to_0) {
  double worst = 0;
  for (int i = 0; i <= 200000; i++) {
    double x = -60.0 * i / 200000.0, ref = exp(x), got = vs_exp_neg(x);
    double ulp = nextafter(ref, INFINITY) - ref;
    double err = fabs(got - ref) / ulp;
    if (err > worst) worst = err;
  }
  CHECK(worst <= 2.0);
  CHECK(vs_exp_neg(0.0) == 1.0);
}

TEST(vs_exp_neg_is_zero_below_minus_60_and_for_minus_infinity) {
  CHECK(vs_exp_neg(-60.5) == 0.0);
  CHECK(vs_exp_neg(-INFINITY) == 0.0);
  CHECK(vs_exp_neg(NAN) == 0.0);
  CHECK(vs_to_fixed(exp(-60.0)) == 0);  // the cut loses nothing in fixed point: exp(-60) * 2^62 < 0.5
}

TEST(vs_to_fixed_rounds_to_nearest_multiple_of_2_pow_minus_62) {
  CHECK(vs_to_fixed(1.0) == (uint64_t)1 << 62);
  CHECK(vs_to_fixed(0.5) == (uint64_t)1 << 61);
  CHECK(vs_to_fixed(0.0) == 0);
  CHECK(vs_to_fixed(ldexp(3.0, -64)) == 1);  // 0.75 units rounds up
  CHECK(vs_to_fixed(ldexp(1.0, -64)) == 0);  // 0.25 units rounds down
}

TEST(vs_fixed_to_double_is_exact_for_sums_below_2_pow_53) {
  for (uint64_t v = 1; v < ((uint64_t)1 << 53); v = v * 3 + 1)
    CHECK(vs_fixed_to_double((vs_u128)v) == ldexp((double)v, -62));
  vs_u128 big = ((vs_u128)5 << 64) | 7;  // 5 * 2^64 + 7: 7 is below the rounding unit
  CHECK(vs_fixed_to_double(big) == ldexp(5.0, 2));
}

TEST(vs_mass_reached_matches_exact_dyadic_comparison) {
  // p = a / 1024 exactly, so mass >= p * total  <=>  1024 * mass >= a * total in integers.
  uint64_t s = 99;
  for (int t = 0; t < 20000; t++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t a = 1 + (s >> 33) % 1024, total = 1 + (s >> 7) % 100000, mass = (s >> 20) % (total + 1);
    int want = (vs_u128)mass * 1024 >= (vs_u128)a * total;
    CHECK_EQ_INT(vs_mass_reached(mass, total, a / 1024.0), want);
  }
}

TEST(vs_mass_reached_decides_the_boundary_exactly_at_large_sums) {
  vs_u128 total = ((vs_u128)1 << 100) + 12345;  // beyond long double's 64-bit mantissa
  vs_u128 half = total / 2;                      // total is odd: half * 2 = total - 1
  CHECK(!vs_mass_reached(half, total, 0.5));
  CHECK(vs_mass_reached(half + 1, total, 0.5));
  CHECK(vs_mass_reached(total, total, 1.0));
  CHECK(!vs_mass_reached(total - 1, total, 1.0));
  CHECK(vs_mass_reached(0, 0, 0.9));  // nothing to keep: reached
  CHECK(!vs_mass_reached(0, 1, 0.9));
}

TEST(vs_mass_reached_agrees_with_long_double_away_from_the_boundary) {
  uint64_t s = 7;
  for (int t = 0; t < 20000; t++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    vs_u128 total = ((vs_u128)(s >> 3) << 8) | (s & 255);
    double p = 0.5 + 0.5 * (double)(s >> 11) / 9007199254740992.0;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    vs_u128 mass = (vs_u128)((long double)total * ((long double)(s >> 11) / 9007199254740992.0L));
    long double rel = ((long double)mass - (long double)p * (long double)total) / (long double)total;
    if (fabsl(rel) < 1e-12L) continue;
    CHECK_EQ_INT(vs_mass_reached(mass, total, p), rel >= 0);
  }
}
