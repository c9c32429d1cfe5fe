// online_vs_cuda.h — "vs-online:P" on the CUDA backend (online_vs_cuda.c): the hooks dist_attn_cuda.c calls
// to estimate the VS pattern on the GPU every forward pass and to run the ring over its execution form.
#ifndef SR_ONLINE_VS_CUDA_H
#define SR_ONLINE_VS_CUDA_H

#include "exec/dist_internal.h"

// Does the plan's pattern ask for the online estimation ("vs-online:P")? Always 0 in builds without CUDA.
int online_vs_wanted(const struct dist_attn *a);
// Allocate the estimator, the layout tables and the conversion state (a->online); refuses skipping.
int online_vs_setup(struct dist_attn *a, sr_error *e);
// Release what online_vs_setup allocated.
void online_vs_release(struct dist_attn *a);
// Estimate from this rank's q, k (device bf16) across the ranks and convert: *ix and *masks then point at
// this forward's execution form and element masks.
int online_vs_forward(struct dist_attn *a, const void *q, const void *k, const sa_gpu_index **ix,
                      const head_mask **masks, sr_error *e);
// The last forward's index, transposed indices (one per source; built on first use) and masks.
int online_vs_backward(struct dist_attn *a, const sa_gpu_index **ix, const sa_gpu_index_t **ixt,
                       const head_mask **masks, sr_error *e);
// The pattern the last forward estimated, downloaded from the device into layer a->layer of pat (all heads);
// a no-op when the plan is not estimated online on CUDA (dist_attn_pattern_used dispatches here).
int online_vs_pattern_used(dist_attn *a, pattern *pat, sr_error *e);

#endif
