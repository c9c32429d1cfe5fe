// attn_data.h — the check of a distributed run of `sparsering-exec attn` against the dense reference
// (dense_ref.h). The inputs themselves (random or vertical-slash) are kernels/attn_inputs.h, which the
// benchmarks share; this header includes it.
#ifndef SR_ATTN_DATA_H
#define SR_ATTN_DATA_H

#include <stdint.h>

#include "exec/comm.h"
#include "kernels/attn_inputs.h"
#include "plan/error.h"
#include "plan/pattern.h"
#include "plan/plan.h"

// Max relative errors of one layer: max |got - ref| / max |ref| per tensor (LSE: absolute, with
// -inf == -inf, and +inf when exactly one side is -inf).
typedef struct {
  double o, lse, dq, dk, dv;
} attn_errors;

// Gather every rank's O, LSE, dQ, dK, dV (host fp32, local order) to rank 0, compute the dense
// reference there on the same inputs (kind `inputs`) and compare. bf16_inputs: the run saw Q, K, V, dO
// rounded to bf16 (CUDA backend), so the reference takes the same rounded inputs and the errors measure
// the kernels alone.
// Collective over c; *err is filled on rank 0 only.
int attn_check_layer(const plan *p, const pattern *pat, int layer, int inputs, uint64_t seed, int bf16_inputs, comm *c,
                     const float *o, const float *lse, const float *dq, const float *dk, const float *dv,
                     attn_errors *err, sr_error *e);

// Round x[0..n) to the nearest bf16 (ties to even) and back: what the CUDA backend's tensors hold.
void attn_round_bf16(float *x, int64_t n);

// The selection a run of a gated pattern (moba:B:K) made in layer `layer`, recomputed on the host from the run's
// inputs (kind `inputs`, seed `seed`; bf16_inputs: rounded to bf16 as the CUDA backend holds them, which its GPU
// gate selects from bit for bit, kernels/moba_gpu.h): layer `layer` of pat (the plan's pattern, e.g. its stand-in)
// becomes the run's MOBA heads (attn_selection.c). Token top-k: an input error.
int attn_gated_selection(const plan *p, int layer, int inputs, uint64_t seed, int bf16_inputs, pattern *pat,
                         sr_error *e);

#endif
