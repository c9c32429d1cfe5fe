// wgmma_check.cu — the Hopper products of kernels/sa_wgmma.cuh alone, exact: one warpgroup computes
// S = Q K^T (64 x 64, d = 128, both operands from swizzled shared memory) and O = P V (64 x 128, P
// from registers, V N-major) on small integers, whose bf16 products and fp32 sums are exact, so every
// element must equal the CPU's. Isolates descriptor, swizzle and fragment-layout errors from the
// attention kernel. Build (GPU machine, sm_90a): nvcc -std=c++17 -I. -gencode=arch=compute_90a,code=sm_90a
//   kernels/test/wgmma_check.cu -o bin/sparsering-wgmma-check     Exit 0 when both products match.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/sa_wgmma.cuh"
#include "kernels/test/check.h"

enum { R = 64, D = 128 };

__global__ void wgmma_check_kernel(const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                   const __nv_bfloat16 *p, float *s_out, float *o_out, uint32_t v_lbo,
                                   uint32_t v_sbo) {
  __shared__ __align__(1024) unsigned char sm[3 * R * D * 2];
  unsigned char *sq = sm, *sk = sm + R * D * 2, *sv = sm + 2 * R * D * 2;
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  sa_load_rows_sw128<D, R, 128>(sq, q, 0, NULL, R, D, tid);
  sa_load_rows_sw128<D, R, 128>(sk, k, 0, NULL, R, D, tid);
  sa_load_rows_sw128<D, R, 128>(sv, v, 0, NULL, R, D, tid);
  sa_cp_async_commit();
  sa_cp_async_wait<0>();
  sa_fence_proxy_async();
  __syncthreads();
  float s[R / 2], o[D / 2];
#pragma unroll
  for (int i = 0; i < R / 2; i++) s[i] = 0.f;
#pragma unroll
  for (int i = 0; i < D / 2; i++) o[i] = 0.f;
  sa_wgmma_fence();
  uint64_t dq = sa_desc_sw128(sq, 16, 1024), dk = sa_desc_sw128(sk, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++)
    sa_wgmma_m64n64_ss(s, dq + (((kk >> 2) * R * 128 + (kk & 3) * 32) >> 4), dk + (((kk >> 2) * R * 128 + (kk & 3) * 32) >> 4));
  sa_wgmma_commit();
  sa_wgmma_wait<0>();
  // P fragments (mma.sync A layout) straight from global memory.
  uint32_t pa[R / 16][4];
  int r0 = warp * 16 + g;
#pragma unroll
  for (int kk = 0; kk < R / 16; kk++) {
    pa[kk][0] = *(const uint32_t *)(p + r0 * R + kk * 16 + 2 * t);
    pa[kk][1] = *(const uint32_t *)(p + (r0 + 8) * R + kk * 16 + 2 * t);
    pa[kk][2] = *(const uint32_t *)(p + r0 * R + kk * 16 + 8 + 2 * t);
    pa[kk][3] = *(const uint32_t *)(p + (r0 + 8) * R + kk * 16 + 8 + 2 * t);
  }
  sa_wgmma_fence();
  uint64_t dv = sa_desc_sw128(sv, v_lbo, v_sbo);
#pragma unroll
  for (int kk = 0; kk < R / 16; kk++) sa_wgmma_m64n128_rs_tb(o, pa[kk], dv + ((kk * 16 * 128) >> 4));
  sa_wgmma_commit();
  sa_wgmma_wait<0>();
#pragma unroll
  for (int j = 0; j < R / 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) s_out[(r0 + 8 * (e >> 1)) * R + j * 8 + 2 * t + (e & 1)] = s[j * 4 + e];
#pragma unroll
  for (int j = 0; j < D / 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) o_out[(r0 + 8 * (e >> 1)) * D + j * 8 + 2 * t + (e & 1)] = o[j * 4 + e];
}

static __nv_bfloat16 *ints(int n, float *host, uint64_t *st) {
  __nv_bfloat16 *h = (__nv_bfloat16 *)malloc(sizeof(__nv_bfloat16) * n), *d;
  for (int i = 0; i < n; i++) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    host[i] = (float)((int)(*st >> 60) - 8);  // -8..7
    h[i] = __float2bfloat16(host[i]);
  }
  CK(cudaMalloc((void **)&d, sizeof(__nv_bfloat16) * n));
  CK(cudaMemcpy(d, h, sizeof(__nv_bfloat16) * n, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

int main(void) {
  static float q[R * D], k[R * D], v[R * D], p[R * R], s[R * R], o[R * D];
  uint64_t st = 1;
  __nv_bfloat16 *qd = ints(R * D, q, &st), *kd = ints(R * D, k, &st), *vd = ints(R * D, v, &st), *pd = ints(R * R, p, &st);
  float *sd, *od;
  CK(cudaMalloc((void **)&sd, sizeof s));
  CK(cudaMalloc((void **)&od, sizeof o));
  // V's descriptor as the forward builds it (LBO = the next 64 columns, SBO = the next 8 keys), then
  // with the two offsets exchanged, which must fail (shows the check can tell them apart).
  int bad_s = 0, bad_o = 0, bad_o_swapped = 0;
  for (int pass = 0; pass < 2; pass++) {
    wgmma_check_kernel<<<1, 128>>>(qd, kd, vd, pd, sd, od, pass ? 1024 : R * 128, pass ? R * 128 : 1024);
    CK(cudaGetLastError());
    CK(cudaMemcpy(s, sd, sizeof s, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(o, od, sizeof o, cudaMemcpyDeviceToHost));
    int *bo = pass ? &bad_o_swapped : &bad_o;
    for (int i = 0; i < R && !pass; i++)
      for (int j = 0; j < R; j++) {
        double x = 0;
        for (int c = 0; c < D; c++) x += (double)q[i * D + c] * k[j * D + c];
        if (s[i * R + j] != x && bad_s++ < 4) printf("S[%d][%d] = %g, expected %g\n", i, j, s[i * R + j], x);
      }
    for (int i = 0; i < R; i++)
      for (int j = 0; j < D; j++) {
        double x = 0;
        for (int c = 0; c < R; c++) x += (double)p[i * R + c] * v[c * D + j];
        if (o[i * D + j] != x && (*bo)++ < 4 && !pass) printf("O[%d][%d] = %g, expected %g\n", i, j, o[i * D + j], x);
      }
  }
  printf("wgmma-check: S = Q K^T %d of %d wrong, O = P V %d of %d wrong (V offsets exchanged: %d wrong)\n", bad_s,
         R * R, bad_o, R * D, bad_o_swapped);
  return bad_s || bad_o;
}
