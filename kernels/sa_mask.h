// sa_mask.h — the element mask of a head (plan/tile_index.h head_mask) as one inline predicate that the
// CPU reference and the CUDA kernels share, so PARTIAL tiles mean the same thing on both sides.
#ifndef SR_SA_MASK_H
#define SR_SA_MASK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "plan/pattern.h"
#include "plan/tile_index.h"

#ifdef __CUDACC__
#define SA_HD __host__ __device__
#else
#define SA_HD
#endif

// Does the head keep (q, k), q and k global positions? Causal included (plan/pattern.h semantics).
static inline SA_HD int sa_mask_keeps(const head_mask *m, int64_t q, int64_t k) {
  if (k > q) return 0;
  switch (m->kind) {
    case PATTERN_DENSE: return 1;
    case PATTERN_WINDOW: return k < m->sinks || q - k < m->window;
    case PATTERN_VS: {
      int64_t d = q - k;
      return (int)((m->vbits[k >> 5] >> (k & 31)) & 1u) | (int)((m->sbits[d >> 5] >> (d & 31)) & 1u);
    }
    case PATTERN_BLOCK: {
      int64_t c = k / m->block;
      return (int)((m->bmask[(q / m->block) * m->row_words + (c >> 6)] >> (c & 63)) & 1u);
    }
    default: return 0;
  }
}

// Bit reversal of a 64-bit word (bit i to bit 63 - i).
static inline SA_HD uint64_t sa_brev64(uint64_t x) {
#ifdef __CUDA_ARCH__
  return __brevll(x);
#else
  x = (x >> 1 & 0x5555555555555555ull) | (x & 0x5555555555555555ull) << 1;
  x = (x >> 2 & 0x3333333333333333ull) | (x & 0x3333333333333333ull) << 2;
  x = (x >> 4 & 0x0f0f0f0f0f0f0f0full) | (x & 0x0f0f0f0f0f0f0f0full) << 4;
  x = (x >> 8 & 0x00ff00ff00ff00ffull) | (x & 0x00ff00ff00ff00ffull) << 8;
  x = (x >> 16 & 0x0000ffff0000ffffull) | (x & 0x0000ffff0000ffffull) << 16;
  return x >> 32 | x << 32;
#endif
}

// ---- 64 elements at once: a VS head's keep bits along a run of consecutive keys or query rows, which
// the kernels' partial tiles use in place of one sa_mask_keeps an element (kernels/sa_cuda.cuh).

// Bits [b, b + 64) of a bit set over [0, nbits) held in 32-bit words; positions outside it read as 0.
static inline SA_HD uint64_t sa_bits64(const uint32_t *w, int64_t nbits, int64_t b) {
  if (b >= nbits || b <= -64) return 0;
  int64_t lo = b < 0 ? 0 : b, wi = lo >> 5, nw = (nbits + 31) >> 5;
  int sh = (int)(lo & 31);
  uint64_t x0 = w[wi], x1 = wi + 1 < nw ? w[wi + 1] : 0u, x2 = wi + 2 < nw ? w[wi + 2] : 0u;
  uint64_t v = ((x0 | x1 << 32) >> sh) | (sh ? x2 << (64 - sh) : 0);
  if (nbits - lo < 64) v &= (1ull << (nbits - lo)) - 1;
  return b < 0 ? v << (lo - b) : v;
}

// A VS head's keep bits of one query row q against 64 consecutive keys k0 .. k0 + 63: bit c = keep(q, k0 + c).
// vert = sa_bits64(m->vbits, m->n_tokens, k0), the same for every row. Column c has offset d = q - k0 - c,
// so the slash bits are the 64 offsets ending at q - k0, reversed.
static inline SA_HD uint64_t sa_vs_row64(const head_mask *m, uint64_t vert, int64_t q, int64_t k0) {
  int64_t d0 = q - k0;
  if (d0 < 0) return 0;
  uint64_t causal = d0 >= 63 ? ~0ull : (1ull << (d0 + 1)) - 1;
  return (vert | sa_brev64(sa_bits64(m->sbits, m->n_tokens, d0 - 63))) & causal;
}

// A VS head's keep bits of one key k against 64 consecutive query rows q0 .. q0 + 63: bit c = keep(q0 + c, k).
static inline SA_HD uint64_t sa_vs_col64(const head_mask *m, int64_t q0, int64_t k) {
  int64_t d0 = q0 - k;
  if (d0 <= -64) return 0;
  uint64_t causal = d0 >= 0 ? ~0ull : ~0ull << (-d0);
  int vert = k >= 0 && k < m->n_tokens && ((m->vbits[k >> 5] >> (k & 31)) & 1u);
  return (vert ? ~0ull : sa_bits64(m->sbits, m->n_tokens, d0)) & causal;
}

// A thread's keep bits of one row from the row's 64-bit keep word, in the accumulator layout of the
// kernels (kernels/sa_cuda.cuh): bit n*4 + e of the result is bit n*8 + 2t + e of x (n < 8, e < 2), the
// columns n*8 + 2t and n*8 + 2t + 1 that quad member t holds; the second row of the thread goes to bits
// n*4 + 2 + e by a shift of 2. Four shift-or-mask steps instead of a shift and a mask an element (the
// budget mix's partial chunks spend much of their integer work on these bits).
static inline SA_HD uint32_t sa_quad_cols(uint64_t x, int t) {
  x = (x >> (2 * t)) & 0x0303030303030303ull;  // pair n at 8n
  x = (x | x >> 4) & 0x0033003300330033ull;    // pairs 2m, 2m + 1 at 16m, 16m + 4
  x = (x | x >> 8) & 0x0000333300003333ull;    // pairs 4m .. 4m + 3 at 32m + 4i
  return (uint32_t)(x | x >> 16) & 0x33333333u; // pair n at 4n
}

#ifdef __cplusplus
}
#endif

#endif
