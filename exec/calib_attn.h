// calib_attn.h — timing the sparse attention kernels on synthetic tile indices with one kind of
// entry (full tiles, partial tiles or bars), for calibration (calibrate.h). The timing needs a CUDA build; the
// indices it times are plain host data (the bars' walk fit, exec/calib_walk.c, rebuilds them without a GPU).
#ifndef SR_CALIB_ATTN_H
#define SR_CALIB_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "plan/error.h"
#include "plan/tile_index.h"

// The index calib_attn_time times: one head (it serves every head), 32K tokens (256 query tiles), entries of one
// kind (0 full, 1 partial, 2 bar), `size` units a query tile (8 tiles, below the diagonal, or the 256 keys just
// before the query tile); *elems the computed (q, k) elements of one head. Release its arrays with free(). -1 when
// memory runs out.
int calib_attn_index(int kind, int size, tile_index *t, double *elems);

// Time of one kernel call of phase (0 forward, 1 backward) on tile kind (0 full, 1 partial, 2 bar)
// over `size` units of work per query tile (8 tiles or 256 bars a unit), mean of 5 after 2 warm-ups,
// and its FLOPs: the computed elements (TILE x TILE per tile entry, TILE per bar) at 4 * d per element
// forward and 2.5 times that backward (FlashAttention-2's counts, as plan/model.h).
int calib_attn_time(int phase, int kind, int size, int heads, int kv_heads, int head_dim, double *flops, double *seconds,
                    sr_error *e);

// n bf16 values uniform in [-1, 1) into device memory (a splitmix64 stream from seed): the operands the GEMMs and the
// layer-shaped attention calls are timed on (exec/calib_kernels.c says why not zeros). CUDA builds only.
int calib_fill_bf16_uniform(void *dev, size_t n, uint64_t seed, sr_error *e);

// One timed attention call's operands on the GPU, n_q queries and n_k keys: bf16 Q, K, V, dO and O (the backward's
// inputs), fp32 O, LSE, D (each row's dO . O), dQ, dK, dV.
typedef struct {
  void *q, *k, *v, *dout, *o16;
  float *o, *lse, *drow, *dq, *dk, *dv;
} calib_operands;
// Allocate them, fill the bf16 ones (seed > 0: uniform in [-1, 1), seeds seed .. seed + 4, calib_fill_bf16_uniform;
// seed 0: the small equal value 0x3c3c), zero O and LSE and prepare D (sa_bwd_prepare). Release with
// calib_operands_free, after a failure too. CUDA builds only.
int calib_operands_make(int64_t n_q, int64_t n_k, int heads, int kv_heads, int head_dim, uint64_t seed,
                        calib_operands *x, sr_error *e);
void calib_operands_free(calib_operands *x);

#endif
