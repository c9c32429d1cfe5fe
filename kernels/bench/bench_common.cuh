// bench_common.cuh — what the kernel benchmarks (bench_attn.cu, bench_adaspa.cu, bench_vs.cu) share: the float
// order their medians sort by and the random bf16 inputs they time on.
#ifndef SR_BENCH_COMMON_CUH
#define SR_BENCH_COMMON_CUH

#include <cuda_bf16.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/test/check.h"
#include "kernels/test/index_build.h"

// qsort's order of floats, ascending.
static int bench_cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

// n bf16 values uniform in [-1, 1) from the generator state *st, on the device.
static void *bench_rand_bf16(int64_t n, uint64_t *st) {
  __nv_bfloat16 *h = (__nv_bfloat16 *)malloc(sizeof(__nv_bfloat16) * (size_t)n);
  for (int64_t i = 0; i < n; i++) h[i] = __float2bfloat16((float)(2 * ib_uniform(st) - 1));
  void *d;
  CK(cudaMalloc(&d, sizeof(__nv_bfloat16) * (size_t)n));
  CK(cudaMemcpy(d, h, sizeof(__nv_bfloat16) * (size_t)n, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

#endif
