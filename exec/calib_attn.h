// calib_attn.h — timing the sparse attention kernels on synthetic tile indices with one kind of
// entry (full tiles, partial tiles or bars), for calibration (calibrate.h). CUDA builds only.
#ifndef SR_CALIB_ATTN_H
#define SR_CALIB_ATTN_H

#include "plan/error.h"

// Time of one kernel call of phase (0 forward, 1 backward) on tile kind (0 full, 1 partial, 2 bar)
// over `size` units of work per query tile (8 tiles or 256 bars a unit), mean of 5 after 2 warm-ups,
// and its FLOPs: the computed elements (TILE x TILE per tile entry, TILE per bar) at 4 * d per element
// forward and 2.5 times that backward (FlashAttention-2's counts, as plan/model.h).
int calib_attn_time(int phase, int kind, int size, int heads, int kv_heads, int head_dim, double *flops, double *seconds,
                    sr_error *e);

#endif
