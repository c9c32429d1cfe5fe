// test_kernels_keep_words.c — the 32-bit forms of the keep words (kernels/sa_keep_words.h), which the forward's
// windowed keep bits use, held to the 64-bit forms the other kernels and the planner use (plan/head_mask_bits.h,
// kernels/sa_mask.h; those are held to the per-element predicate in test_kernels_mask64.c): every window of
// random bit sets of several lengths, windows before 0 and past the end included, every (row, key run) of a
// random VS head, and random words for every quad member.
#include <stdlib.h>
#include <string.h>

#include "kernels/sa_keep_words.h"
#include "kernels/sa_mask.h"
#include "tests/test.h"

enum { MAXN = 333, MAXW = (MAXN + 31) / 32 + 1 };

static uint64_t xorshift(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

// A bit set of n positions, density about 1/4, with the bits past n in its last word set (a window must not
// read them as members).
static void random_set(uint32_t *w, int n, uint64_t *s) {
  memset(w, 0, sizeof(uint32_t) * MAXW);
  for (int i = 0; i < n; i++)
    if (xorshift(s) % 4 == 0) w[i >> 5] |= 1u << (i & 31);
  if (n & 31) w[(n - 1) >> 5] |= ~0u << (n & 31);
}

TEST(bits64_32_equals_bits64_on_every_window) {
  static const int lens[] = {1, 31, 32, 33, 64, 65, 95, 96, 97, 200, MAXN};
  uint32_t w[MAXW];
  uint64_t s = 0x9e3779b97f4a7c15ull;
  int bad = 0;
  for (size_t x = 0; x < sizeof lens / sizeof lens[0]; x++) {
    int n = lens[x];
    random_set(w, n, &s);
    for (int b = -70; b <= n + 2; b++) bad += sa_bits64_32(w, n, b) != sa_bits64(w, n, b);
  }
  CHECK_EQ_INT(bad, 0);
}

TEST(vs_row64_32_equals_vs_row64_for_every_row_and_key_run) {
  uint32_t vb[MAXW], sb[MAXW];
  uint64_t s = 0x243f6a8885a308d3ull;
  int bad = 0;
  for (int rep = 0; rep < 2; rep++) {
    int n = rep ? MAXN : 130;
    random_set(vb, n, &s), random_set(sb, n, &s);
    head_mask m;
    memset(&m, 0, sizeof m);
    m.kind = PATTERN_VS, m.n_tokens = n, m.vbits = vb, m.sbits = sb;
    for (int k0 = 0; k0 < n; k0++) {
      uint64_t vert = sa_bits64(vb, n, k0);
      for (int q = -2; q < n; q++) bad += sa_vs_row64_32(sb, n, vert, q, k0) != sa_vs_row64(&m, vert, q, k0);
    }
  }
  CHECK_EQ_INT(bad, 0);
}

TEST(quad_cols_32_equals_quad_cols_for_every_quad_member) {
  uint64_t s = 0x452821e638d01377ull;
  int bad = 0;
  for (int x = 0; x < 4000; x++) {
    uint64_t w = x == 0 ? ~0ull : x == 1 ? 0 : x == 2 ? 0x5555555555555555ull : xorshift(&s);
    for (int t = 0; t < 4; t++) bad += sa_quad_cols_32(w, t) != sa_quad_cols(w, t);
  }
  CHECK_EQ_INT(bad, 0);
}
