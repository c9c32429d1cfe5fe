// test_kernels_mask64.c — the 64-element keep-bit forms of a VS head's mask (plan/head_mask_bits.h), which
// the kernels' partial tiles and the planner's forward form use, held to the kernels' per-element predicate
// sa_mask_keeps (kernels/sa_mask.h) on every (row, run) of a random mask, including runs that start before
// 0, end past n and straddle word boundaries.
#include <stdlib.h>
#include <string.h>

#include "kernels/sa_mask.h"
#include "tests/test.h"

enum { N = 300, WORDS = (N + 31) / 32 };

// A VS head over N tokens with random verticals and slashes (density ~1/5); the bits above N in the last
// word are set, which the 64-element forms must not read as kept.
static head_mask random_vs(uint32_t *vb, uint32_t *sb, unsigned seed) {
  srand(seed);
  memset(vb, 0, WORDS * 4), memset(sb, 0, WORDS * 4);
  for (int i = 0; i < N; i++) {
    if (rand() % 5 == 0) vb[i >> 5] |= 1u << (i & 31);
    if (rand() % 5 == 0) sb[i >> 5] |= 1u << (i & 31);
  }
  vb[WORDS - 1] |= ~0u << (N & 31), sb[WORDS - 1] |= ~0u << (N & 31);
  head_mask m;
  memset(&m, 0, sizeof m);
  m.kind = PATTERN_VS, m.n_tokens = N, m.vbits = vb, m.sbits = sb;
  return m;
}

TEST(bits64_reads_a_window_with_zeros_outside_the_set) {
  uint32_t w[3] = {0x80000001u, 0xffffffffu, 0x5u};  // bits 0, 31, 32..63, 64, 66 of a 70-bit set
  CHECK(sa_bits64(w, 70, 0) == 0xffffffff80000001ull);
  CHECK(sa_bits64(w, 70, 31) == (0x1ffffffffull | 1ull << 33 | 1ull << 35));
  CHECK(sa_bits64(w, 70, -1) == 0xffffffff00000002ull);
  CHECK(sa_bits64(w, 70, -64) == 0 && sa_bits64(w, 70, 70) == 0);
  CHECK(sa_bits64(w, 65, 64) == 1);  // bit 66 lies past the set's 65 bits
  CHECK(sa_brev64(1) == 1ull << 63 && sa_brev64(0xf0) == 0x0f00000000000000ull);
}

TEST(vs_row64_equals_the_element_predicate_for_every_row_and_key_run) {
  uint32_t vb[WORDS], sb[WORDS];
  for (unsigned seed = 1; seed <= 3; seed++) {
    head_mask m = random_vs(vb, sb, seed);
    int bad = 0;
    for (int64_t k0 = 0; k0 < N; k0++) {
      uint64_t vert = sa_bits64(m.vbits, N, k0);
      for (int64_t q = -2; q < N; q++) {
        uint64_t got = sa_vs_row64(&m, vert, q, k0);
        for (int c = 0; c < 64; c++) {
          int want = k0 + c < N && q >= 0 && sa_mask_keeps(&m, q, k0 + c);
          bad += (int)(got >> c & 1u) != want;
        }
      }
    }
    CHECK_EQ_INT(bad, 0);
  }
}

TEST(vs_col64_equals_the_element_predicate_for_every_key_and_row_run) {
  uint32_t vb[WORDS], sb[WORDS];
  for (unsigned seed = 4; seed <= 6; seed++) {
    head_mask m = random_vs(vb, sb, seed);
    int bad = 0;
    for (int64_t k = 0; k < N; k++)
      for (int64_t q0 = 0; q0 < N; q0++) {
        uint64_t got = sa_vs_col64(&m, q0, k);
        for (int c = 0; c < 64 && q0 + c < N; c++) bad += (int)(got >> c & 1u) != sa_mask_keeps(&m, q0 + c, k);
      }
    CHECK_EQ_INT(bad, 0);
  }
}

// sa_quad_cols against the per-element form it replaces in the kernels: bit n*4 + e = bit n*8 + 2t + e.
TEST(quad_cols_picks_each_quad_members_columns) {
  uint64_t s = 0x243f6a8885a308d3ull;
  for (int x = 0; x < 2000; x++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;  // xorshift64
    uint64_t w = x == 0 ? ~0ull : x == 1 ? 0 : s;
    for (int t = 0; t < 4; t++) {
      uint32_t want = 0;
      for (int i = 0; i < 32; i++)
        if (!(i & 2)) want |= (uint32_t)(w >> ((i >> 2) * 8 + 2 * t + (i & 1)) & 1u) << i;
      CHECK(sa_quad_cols(w, t) == want);
    }
  }
}
