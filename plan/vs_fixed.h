// vs_fixed.h — the arithmetic of vertical-slash estimation that the CPU reference (plan/pattern_estimate.c)
// and the GPU estimator (kernels/vs_estimate.cu) share, written so that both produce the same bits:
//   - exp of a non-positive argument from IEEE basic operations only (no libm, no fused multiply-add), so
//     glibc's exp and CUDA's exp (which differ in the last bit now and then) never enter the result;
//   - the fixed-point form of a probability (2^62 = 1.0) and the conversion of a fixed-point sum to double;
//   - the top-p stopping rule "kept mass >= p * total" decided exactly in integers (no long double, whose
//     width differs between x86 and other hosts and does not exist on the GPU).
// Every function is a static inline usable from C11 and from CUDA device code.
#ifndef SR_VS_FIXED_H
#define SR_VS_FIXED_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define VS_HD __host__ __device__ __forceinline__
#else
#define VS_HD static inline
#endif

// Products and sums rounded one at a time: on the GPU the _rn intrinsics stop nvcc from fusing them into
// an FMA; C11 mode keeps gcc from contracting (-ffp-contract=off is its ISO default).
#if defined(__CUDA_ARCH__)
#define VS_MUL(a, b) __dmul_rn((a), (b))
#define VS_ADD(a, b) __dadd_rn((a), (b))
#else
#define VS_MUL(a, b) ((a) * (b))
#define VS_ADD(a, b) ((a) + (b))
#endif

typedef unsigned __int128 vs_u128;

#define VS_FIXED_ONE 4611686018427387904.0  // 2^62

// exp(x) for x <= 0 to about 1 ulp (Cody-Waite reduction by ln 2, Taylor polynomial of degree 13 on
// |r| <= ln2/2, error below 2^-55). Below -60 it returns 0: exp(-60) * 2^62 < 0.5, so such terms are 0
// in fixed point anyway, and the cut keeps every intermediate value normal.
VS_HD double vs_exp_neg(double x) {
  if (!(x >= -60.0)) return 0.0;  // also -inf and NaN
  if (x > 0) x = 0;
  const double log2e = 1.4426950408889634074, ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  double k = rint(VS_MUL(x, log2e));
  double r = VS_ADD(x, -VS_MUL(k, ln2_hi));  // exact: k has <= 7 bits and ln2_hi 32 significant bits
  r = VS_ADD(r, -VS_MUL(k, ln2_lo));
  // 1/n! for n = 13 .. 1
  const double c[13] = {1.6059043836821614599e-10, 2.0876756987868098979e-09, 2.5052108385441718775e-08,
                        2.7557319223985890653e-07, 2.7557319223985890653e-06, 2.4801587301587301587e-05,
                        1.9841269841269841270e-04, 1.3888888888888888889e-03, 8.3333333333333333333e-03,
                        4.1666666666666666667e-02, 1.6666666666666666667e-01, 5.0000000000000000000e-01, 1.0};
  double p = c[0];
  for (int i = 1; i < 13; i++) p = VS_ADD(VS_MUL(p, r), c[i]);
  p = VS_ADD(VS_MUL(p, r), 1.0);
  return ldexp(p, (int)k);  // exact: the result stays normal (x >= -60)
}

// Fixed-point form of a probability x in [0, 1]: round(x * 2^62).
VS_HD uint64_t vs_to_fixed(double x) { return (uint64_t)VS_ADD(VS_MUL(x, VS_FIXED_ONE), 0.5); }

// A fixed-point sum as a double in units of 1.0 (both halves converted exactly rounded, then one rounded add).
VS_HD double vs_fixed_to_double(vs_u128 v) {
  double hi = (double)(uint64_t)(v >> 64), lo = (double)(uint64_t)v;
  return VS_ADD(VS_MUL(hi, 18446744073709551616.0), lo) / VS_FIXED_ONE;
}

// Is mass >= p * total, decided exactly? p = m * 2^(e - 53) with m a 53-bit integer (frexp), so the test is
// mass * 2^(53 - e) >= m * total, compared as 192-bit integers (m * total < 2^181).
VS_HD int vs_mass_reached(vs_u128 mass, vs_u128 total, double p) {
  if (total == 0) return 1;
  if (mass == 0) return !(p > 0);
  int e;
  double f = frexp(p, &e);
  uint64_t m = (uint64_t)ldexp(f, 53);
  int s = 53 - e;
  // right side: m * total as limbs r2:r1:r0
  vs_u128 a = (vs_u128)(uint64_t)total * m, b = (vs_u128)(uint64_t)(total >> 64) * m;
  uint64_t r0 = (uint64_t)a;
  vs_u128 mid = (a >> 64) + (vs_u128)(uint64_t)b;
  uint64_t r1 = (uint64_t)mid, r2 = (uint64_t)((mid >> 64) + (b >> 64));
  // left side: bit length decides when the shift is long
  int bits = 0;
  for (vs_u128 x = mass; x; x >>= 1) bits++;
  if (bits + s > 192) return 1;
  if (s < 0) return 1;  // p > 1
  // mass << s as limbs l2:l1:l0 (s < 192 here)
  uint64_t l0 = 0, l1 = 0, l2 = 0, w0 = (uint64_t)mass, w1 = (uint64_t)(mass >> 64);
  int q = s / 64, rsh = s % 64;
  uint64_t t0 = w0 << rsh, t1 = rsh ? (w1 << rsh) | (w0 >> (64 - rsh)) : w1, t2 = rsh ? w1 >> (64 - rsh) : 0;
  if (q == 0) l0 = t0, l1 = t1, l2 = t2;
  else if (q == 1) l1 = t0, l2 = t1;
  else l2 = t0;
  if (l2 != r2) return l2 > r2;
  if (l1 != r1) return l1 > r1;
  return l0 >= r0;
}

#endif
