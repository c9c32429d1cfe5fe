// dist_cuda.h — small element-wise kernels the CUDA backend of distributed attention needs around
// the attention kernels: fp32 -> bf16 for the output, adding arriving dK/dV partial sums
// (also strided, for the Ulysses all-to-all of replicated KV heads), filling.
#ifndef SR_DIST_CUDA_H
#define SR_DIST_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// dst[i] = bf16(src[i]) (round to nearest even) for n elements, on `stream` (cudaStream_t). 0 or a CUDA error code.
int dist_cuda_to_bf16(void *dst, const float *src, int64_t n, void *stream);
// dst[i] += src[i] for n fp32 elements.
int dist_cuda_add(float *dst, const float *src, int64_t n, void *stream);
// dst[r*dst_pitch + i] += src[r*src_pitch + i] for rows x width fp32 elements (pitches in elements).
int dist_cuda_add2d(float *dst, int64_t dst_pitch, const float *src, int64_t src_pitch, int64_t rows, int64_t width,
                    void *stream);
// x[i] = value for n fp32 elements.
int dist_cuda_fill(float *x, float value, int64_t n, void *stream);

#ifdef __cplusplus
}
#endif

#endif
