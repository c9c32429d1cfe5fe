// sa_keep_words.h — a VS head's 64-bit keep words (plan/head_mask_bits.h: sa_bits64, sa_vs_row64) and a quad
// member's columns of one (kernels/sa_mask.h: sa_quad_cols) in 32-bit arithmetic, for bit sets of fewer than
// 2^30 positions: the same values in about two thirds of the instructions (64-bit compares and shifts are two
// or three instructions each on the GPU). The forward's windowed keep bits (kernels/sparse_attn_fwd_ws.cu)
// build every partial chunk's words with them; tests/test_kernels_keep_words.c holds them to the 64-bit forms.
#ifndef SR_SA_KEEP_WORDS_H
#define SR_SA_KEEP_WORDS_H

#include <stdint.h>

#include "plan/head_mask_bits.h"  // SA_HD, sa_brev64

#ifdef __cplusplus
extern "C" {
#endif

// The largest bit set (positions) the 32-bit forms take.
#define SA_KEEP_WORDS_MAX (1 << 30)

// The low 32 bits of (hi:lo) >> sh, sh < 32.
static inline SA_HD uint32_t sa_funnel_r32(uint32_t lo, uint32_t hi, int sh) {
#ifdef __CUDA_ARCH__
  return __funnelshift_r(lo, hi, (unsigned)sh);
#else
  return (uint32_t)((((uint64_t)hi << 32) | lo) >> sh);
#endif
}

// sa_bits64(w, nbits, b) for nbits <= SA_KEEP_WORDS_MAX (any b): bits [b, b + 64) of the set, 0 outside it.
static inline SA_HD uint64_t sa_bits64_32(const uint32_t *w, int32_t nbits, int32_t b) {
  if (b >= nbits || b <= -64) return 0;
  int32_t lo = b < 0 ? 0 : b, wi = lo >> 5, nw = (nbits + 31) >> 5;
  int sh = lo & 31;
  uint32_t x0 = w[wi], x1 = wi + 1 < nw ? w[wi + 1] : 0u, x2 = wi + 2 < nw ? w[wi + 2] : 0u;
  uint64_t v = (uint64_t)sa_funnel_r32(x1, x2, sh) << 32 | sa_funnel_r32(x0, x1, sh);
  if (nbits - lo < 64) v &= (1ull << (nbits - lo)) - 1;
  return b < 0 ? v << (lo - b) : v;
}

// sa_vs_row64 of a head whose slash set sbits spans n <= SA_KEEP_WORDS_MAX positions: row q (-2 and up)
// against the keys k0 .. k0 + 63 (k0 >= 0), vert their vertical word.
static inline SA_HD uint64_t sa_vs_row64_32(const uint32_t *sbits, int32_t n, uint64_t vert, int32_t q, int32_t k0) {
  int32_t d0 = q - k0;
  if (d0 < 0) return 0;
  uint64_t causal = d0 >= 63 ? ~0ull : (1ull << (d0 + 1)) - 1;
  return (vert | sa_brev64(sa_bits64_32(sbits, n, d0 - 63))) & causal;
}

// sa_quad_cols(x, t) on the word's two halves: bit n*4 + e of the result is bit n*8 + 2t + e of x.
static inline SA_HD uint32_t sa_quad_cols_32(uint64_t x, int t) {
  uint32_t a = ((uint32_t)x >> (2 * t)) & 0x03030303u, b = ((uint32_t)(x >> 32) >> (2 * t)) & 0x03030303u;
  a = (a | a >> 4) & 0x00330033u, b = (b | b >> 4) & 0x00330033u;  // pairs 2m, 2m + 1 at 16m, 16m + 4
  a = (a | a >> 8) & 0x3333u, b = (b | b >> 8) & 0x3333u;          // pairs 0..3 at 4i
  return a | b << 16;
}

#ifdef __cplusplus
}
#endif

#endif
