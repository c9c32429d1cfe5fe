// test_exp2_poly.c — the FMA-pipe 2^x of kernels/exp2_poly.h that the Hopper AdaSpa kernel runs on part of its
// elements: within ex2.approx's error (2^-22 relative) over the normal range, where the bound of docs/design.md
// ("AdaSpa's block masses on the GPU") relies on it, 2^-126 below it, and exact at the integers.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/exp2_poly.h"
#include "tests/test.h"

static double rel_err(float x) {
  double want = exp2((double)x);
  return fabs((double)sr_exp2_poly(x) - want) / want;
}

TEST(exp2_poly_is_within_2_to_the_minus_22_relative_on_a_dense_sample_of_the_floats_of_minus_1_to_1) {
  // the fraction f covers [-0.5, 0.5] once for each integer part; every 61st float of [0, 1] by its bits, both signs
  double worst = 0;
  for (uint32_t b = 0; b <= 0x3f800000u; b += 61) {
    float x;
    memcpy(&x, &b, 4);
    worst = fmax(worst, fmax(rel_err(x), rel_err(-x)));
  }
  CHECK(worst < ldexp(1.0, -22));
}

TEST(exp2_poly_keeps_its_relative_error_over_the_whole_normal_range) {
  double worst = 0;
  for (double x = -126.0; x <= 127.0; x += 0.0009765625 * 3.7) worst = fmax(worst, rel_err((float)x));
  CHECK(worst < ldexp(1.0, -22));
}

TEST(exp2_poly_is_exact_at_the_integers) {
  for (int j = -126; j <= 127; j++) CHECK(sr_exp2_poly((float)j) == (float)ldexp(1.0, j));
}

TEST(exp2_poly_gives_2_to_the_minus_126_under_the_normal_range) {
  float xs[] = {-126.4f, -126.5f, -127.0f, -300.0f, -INFINITY};
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) CHECK(sr_exp2_poly(xs[i]) == (float)ldexp(1.0, -126));
}
