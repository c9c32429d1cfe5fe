// sa_mask.h — the element mask of a head (plan/tile_index.h head_mask) as one inline predicate that the
// CPU reference and the CUDA kernels share, so PARTIAL tiles mean the same thing on both sides.
#ifndef SR_SA_MASK_H
#define SR_SA_MASK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "plan/head_mask_bits.h"  // SA_HD and the 64-element keep bits (sa_bits64, sa_vs_row64, ...)
#include "plan/pattern.h"
#include "plan/tile_index.h"

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
    case PATTERN_TOKENS: {  // the window, or a key of the query's group that its row chose
      if (q - k < m->window) return 1;
      int64_t t = q / TILE, r = q % TILE, lo = m->tok_off[t], hi = m->tok_off[t + 1], end = hi;
      while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (m->tok_key[mid] < k) lo = mid + 1;
        else hi = mid;
      }
      return lo < end && m->tok_key[lo] == k && (int)((m->tok_rows[2 * lo + r / 64] >> (r % 64)) & 1u);
    }
    default: return 0;
  }
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
