// exp2_poly.h — 2^x by fused multiply-adds alone (no special-function unit), for kernels whose exponentials
// outrun the special-function units (kernels/adaspa_wgmma.cu gives a share of its elements to the FMA pipes,
// as FlashAttention-4 does). Shared by the CUDA kernels and the CPU test of its accuracy (tests/test_exp2_poly.c):
// every operation is one IEEE fp32 rounding to nearest, so both sides give the same bits.
//
// x is clamped to [-126, 127]; j = round(x) comes from the low bits of x + 1.5 * 2^23, f = x - j in [-0.5, 0.5]
// exactly, 2^f by a degree-5 polynomial (Horner, fmaf; coefficients a relative minimax fit with c0 = 1), and 2^j
// is added to the result's exponent field. Relative error below 2^-22 (ex2.approx's 2 ulp) for x in [-126, 127];
// below -126 the result is 2^-126 (x = -inf too, not 0: callers that need exact zeros of masked elements use
// ex2.approx there, which flushes results below 2^-126 to 0). docs/design.md, "AdaSpa's block masses on the GPU".
#ifndef SR_EXP2_POLY_H
#define SR_EXP2_POLY_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SR_HD __host__ __device__ __forceinline__
#else
#define SR_HD static inline
#endif

SR_HD float sr_exp2_poly(float x) {
  const float shifter = 12582912.0f;  // 1.5 * 2^23: x + shifter is the integer 1.5 * 2^23 + round(x), exactly
  x = fminf(fmaxf(x, -126.0f), 127.0f);
  float t = x + shifter;
  float j = t - shifter;
  float f = x - j;
  float p = fmaf(f, 0x1.5bd17cp-10f, 0x1.3cea84p-7f);
  p = fmaf(p, f, 0x1.c6b712p-5f);
  p = fmaf(p, f, 0x1.ebf9bcp-3f);
  p = fmaf(p, f, 0x1.62e42ap-1f);
  p = fmaf(p, f, 1.0f);
  uint32_t pb, tb;
  memcpy(&pb, &p, 4);
  memcpy(&tb, &t, 4);
  pb += tb << 23;  // t's low bits are 0x400000 + j; shifted by 23 only j << 23 is left (mod 2^32)
  memcpy(&p, &pb, 4);
  return p;
}

#undef SR_HD
#endif
