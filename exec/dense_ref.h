// dense_ref.h — single-process dense masked attention over the whole sequence, in float64: the
// independent ground truth the distributed runs are checked against (brute force over every (q, k)
// pair with pattern_keeps, no tiles, no merging). Small shapes only: O(N^2 * heads * d).
#ifndef SR_DENSE_REF_H
#define SR_DENSE_REF_H

#include <stdint.h>

#include "plan/pattern.h"

// Forward of one layer in global token order: Q [N, H, d], K, V [N, Hkv, d] -> O [N, H, d], LSE [H, N]
// (rows with no kept key: O = 0, LSE = -inf). scale is the softmax scale. Returns 0, -1 on no memory.
int dense_attn_fwd(const pattern *p, int layer, int64_t N, int H, int Hkv, int d, float scale, const float *q,
                   const float *k, const float *v, float *o, float *lse);
// Backward with the forward's O and LSE: writes dQ [N, H, d], dK, dV [N, Hkv, d].
int dense_attn_bwd(const pattern *p, int layer, int64_t N, int H, int Hkv, int d, float scale, const float *q,
                   const float *k, const float *v, const float *o, const float *lse, const float *dout, float *dq,
                   float *dk, float *dv);

#endif
