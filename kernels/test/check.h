// check.h — fail-fast checks for the GPU test and benchmark tools (not library code: these exit).
#ifndef SR_KERNELS_TEST_CHECK_H
#define SR_KERNELS_TEST_CHECK_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

// A CUDA runtime call that must succeed: print file:line, the call and CUDA's message, then exit.
#define CK(call)                                                                               \
  do {                                                                                         \
    cudaError_t err_ = (call);                                                                 \
    if (err_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)
// A planner call that must succeed; pass E as its sr_error argument.
#define SR(call)                                                             \
  do {                                                                       \
    sr_error e_;                                                             \
    if ((call) != SR_OK) {                                                   \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, e_.msg); \
      exit(1);                                                               \
    }                                                                        \
  } while (0)
#define E (&e_)

// Device copy of `bytes` bytes of host memory `h` (at least one byte allocated, so empty arrays are valid).
static inline void *dev_copy(const void *h, size_t bytes) {
  void *d;
  CK(cudaMalloc(&d, bytes ? bytes : 1));
  if (bytes) CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  return d;
}

// Device bf16 copy of n floats; `rounded` (may alias `src`) gets the float values of those bf16 numbers,
// which is what the GPU sees and what the CPU reference must be given.
static inline void *to_bf16_dev(const float *src, int64_t n, float *rounded) {
  __nv_bfloat16 *b = (__nv_bfloat16 *)malloc(sizeof(__nv_bfloat16) * (size_t)(n + 1));
  if (!b) { fprintf(stderr, "to_bf16_dev: out of memory\n"); exit(1); }
  for (int64_t i = 0; i < n; i++) b[i] = __float2bfloat16(src[i]), rounded[i] = __bfloat162float(b[i]);
  void *d = dev_copy(b, sizeof(__nv_bfloat16) * (size_t)n);
  free(b);
  return d;
}

#endif
