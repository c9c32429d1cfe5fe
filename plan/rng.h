// rng.h — the Mersenne Twister MT19937 (Matsumoto & Nishimura 1998) with GSL's conventions, inlined for
// the synthetic generators' hot loops: the same seeding as gsl_rng_set on gsl_rng_mt19937 (a zero seed
// becomes 4357; Knuth's multiplier 1812433253 fills the state), the same 32-bit outputs, and the same
// derived draws (gsl_rng_uniform = output / 2^32; uniform_pos skips zeros; uniform_int divides by
// floor((2^32 - 1) / n) and rejects). So patterns drawn with it are bit-identical to GSL's (tested
// against GSL in test_synth.c), about twice as fast as calling GSL through its function pointers.
#ifndef SR_RNG_H
#define SR_RNG_H

#include <stdint.h>

#define SR_MT_N 624
#define SR_MT_M 397

typedef struct {
  uint32_t mt[SR_MT_N];
  int mti;
} sr_mt;

// Seed as gsl_rng_set does (the low 32 bits of s; 0 means 4357).
static inline void sr_mt_seed(sr_mt *r, uint32_t s) {
  if (s == 0) s = 4357;
  r->mt[0] = s;
  for (int i = 1; i < SR_MT_N; i++) r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
  r->mti = SR_MT_N;
}

// Regenerate the 624 words of state (the twist).
static inline void sr_mt_twist(sr_mt *r) {
  uint32_t *mt = r->mt;
  int k = 0;
#define SR_MT_MIX(a, b, c) ((c) ^ ((((a) & 0x80000000u) | ((b) & 0x7fffffffu)) >> 1) ^ (((b) & 1u) ? 0x9908b0dfu : 0u))
  for (; k < SR_MT_N - SR_MT_M; k++) mt[k] = SR_MT_MIX(mt[k], mt[k + 1], mt[k + SR_MT_M]);
  for (; k < SR_MT_N - 1; k++) mt[k] = SR_MT_MIX(mt[k], mt[k + 1], mt[k + SR_MT_M - SR_MT_N]);
  mt[SR_MT_N - 1] = SR_MT_MIX(mt[SR_MT_N - 1], mt[0], mt[SR_MT_M - 1]);
#undef SR_MT_MIX
  r->mti = 0;
}

// The next 32-bit output.
static inline uint32_t sr_mt_next(sr_mt *r) {
  if (r->mti >= SR_MT_N) sr_mt_twist(r);
  uint32_t k = r->mt[r->mti++];
  k ^= k >> 11;
  k ^= (k << 7) & 0x9d2c5680u;
  k ^= (k << 15) & 0xefc60000u;
  return k ^ (k >> 18);
}

// Uniform on [0, 1): gsl_rng_uniform.
static inline double sr_mt_uniform(sr_mt *r) { return sr_mt_next(r) / 4294967296.0; }

// Uniform on (0, 1): gsl_rng_uniform_pos.
static inline double sr_mt_uniform_pos(sr_mt *r) {
  double x;
  do x = sr_mt_uniform(r);
  while (x == 0);
  return x;
}

// Uniform integer in [0, n), 1 <= n <= 2^32 - 1: gsl_rng_uniform_int.
static inline uint32_t sr_mt_uniform_int(sr_mt *r, uint32_t n) {
  uint32_t scale = 0xffffffffu / n, k;
  do k = sr_mt_next(r) / scale;
  while (k >= n);
  return k;
}

#endif
