// head_mask_bits.h — a vertical-slash head's keep bits 64 elements at a time, from its bit sets
// (plan/tile_index.h head_mask): along 64 consecutive keys of one query row, or 64 consecutive query rows
// of one key. Pure bit arithmetic, the same on the host and the GPU: the planner's forward form
// (plan/tiles_runs.c) and the kernels' partial tiles (kernels/sa_mask.h, kernels/sa_cuda.cuh) read the
// mask through these, so both see the same bits.
#ifndef SR_HEAD_MASK_BITS_H
#define SR_HEAD_MASK_BITS_H

#include <stdint.h>

#include "plan/tile_index.h"

// Compiled by nvcc the helpers run on both sides; a C compiler sees plain static inline functions.
#ifndef SA_HD
#ifdef __CUDACC__
#define SA_HD __host__ __device__
#else
#define SA_HD
#endif
#endif

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

#endif
