// adaspa_wgmma.h — the Hopper (sm_90a) kernel of AdaSpa's block masses, dispatched by kernels/adaspa_gpu.cu
// (not part of the public API; kernels/vs_gpu.h is). Arguments as adaspa_gpu_block_mass's.
#ifndef SR_ADASPA_WGMMA_H
#define SR_ADASPA_WGMMA_H

#include <stdint.h>

#include "kernels/vs_gpu.h"  // C linkage of sr_error and its constructors

// The masses by the wgmma kernel (mass already zeroed by the caller); an input error where
// adaspa_gpu_wgmma_applies (kernels/vs_gpu.h) says no.
int adaspa_wgmma_block_mass(const void *q, const void *k, int64_t n, int32_t heads, int32_t kv_heads, int32_t head_dim,
                            float scale, int32_t block, const float *lse, float *mass, void *stream, sr_error *e);

#endif
