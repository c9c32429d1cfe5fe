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

#ifdef __cplusplus
}
#endif

#endif
