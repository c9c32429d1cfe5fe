// attn_data.h — deterministic attention inputs and the check of a distributed run against the
// dense reference (dense_ref.h), for `sparsering-exec attn`.
//
// Every element is a hash of (seed, layer, tensor, global token, head, dim), so each rank generates
// exactly its layout's tokens and rank 0 can rebuild the global tensors without any transfer.
#ifndef SR_ATTN_DATA_H
#define SR_ATTN_DATA_H

#include <stdint.h>

#include "exec/comm.h"
#include "plan/error.h"
#include "plan/pattern.h"
#include "plan/plan.h"

enum { ATTN_Q = 0, ATTN_K = 1, ATTN_V = 2, ATTN_DO = 3 };

// Fill x [n, heads, d] for tokens pos[0..n) with the values of `tensor` (uniform in [-1, 1)).
void attn_data_fill(uint64_t seed, int layer, int tensor, const int64_t *pos, int64_t n, int heads, int d, float *x);

// Max relative errors of one layer: max |got - ref| / max |ref| per tensor (LSE: absolute, with
// -inf == -inf, and +inf when exactly one side is -inf).
typedef struct {
  double o, lse, dq, dk, dv;
} attn_errors;

// Gather every rank's O, LSE, dQ, dK, dV (host fp32, local order) to rank 0, compute the dense
// reference there and compare. bf16_inputs: the run saw Q, K, V, dO rounded to bf16 (CUDA backend),
// so the reference takes the same rounded inputs and the errors measure the kernels alone.
// Collective over c; *err is filled on rank 0 only.
int attn_check_layer(const plan *p, const pattern *pat, int layer, uint64_t seed, int bf16_inputs, comm *c,
                     const float *o, const float *lse, const float *dq, const float *dk, const float *dv,
                     attn_errors *err, sr_error *e);

#endif
