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
  int mti;    // next word to output
  int ready;  // words of the current round already twisted (outputs mti < ready are available)
  int init;   // words of the seeded state computed so far (the first round fills them on demand)
} sr_mt;

// Seed as gsl_rng_set does (the low 32 bits of s; 0 means 4357). The state's other 623 words follow from
// the first by Knuth's recurrence; the first round computes them only as far as its outputs need (output
// k reads words k + 1 and k + 397), so a seed whose stream is used for a few draws, as most of the
// generators' reseeds are, costs a few hundred steps instead of two passes over the whole state.
static inline void sr_mt_seed(sr_mt *r, uint32_t s) {
  r->mt[0] = s ? s : 4357;
  r->init = 1;
  r->mti = r->ready = 0;
}

// Generators seeded together by sr_mt_seed_lanes.
#define SR_MT_LANES 8

// Seed r[0 .. n) from s[0 .. n) (n <= SR_MT_LANES) as sr_mt_seed does, and compute each one's seeded words
// below `upto` (at most SR_MT_N) now, all SR_MT_LANES recurrences interleaved: each word waits on the one
// before (a multiply a step), so one chain at a time leaves the multiplier mostly idle, eight at a time
// keep it busy. The words are those sr_mt_refill would compute on demand, so the outputs do not change. r
// holds SR_MT_LANES generators; those from n on are scratch.
static inline void sr_mt_seed_lanes(sr_mt *r, const uint32_t *s, int n, int upto) {
  uint32_t x0, x1, x2, x3, x4, x5, x6, x7;
  for (int l = 0; l < SR_MT_LANES; l++) sr_mt_seed(&r[l], s[l < n ? l : 0]);
  x0 = r[0].mt[0], x1 = r[1].mt[0], x2 = r[2].mt[0], x3 = r[3].mt[0];
  x4 = r[4].mt[0], x5 = r[5].mt[0], x6 = r[6].mt[0], x7 = r[7].mt[0];
#define SR_MT_LANE(x, l) (x = 1812433253u * (x ^ (x >> 30)) + (uint32_t)i, r[l].mt[i] = x)
  for (int i = 1; i < upto; i++) {
    SR_MT_LANE(x0, 0), SR_MT_LANE(x1, 1), SR_MT_LANE(x2, 2), SR_MT_LANE(x3, 3);
    SR_MT_LANE(x4, 4), SR_MT_LANE(x5, 5), SR_MT_LANE(x6, 6), SR_MT_LANE(x7, 7);
  }
#undef SR_MT_LANE
  for (int l = 0; l < SR_MT_LANES; l++) r[l].init = upto > 1 ? upto : 1;
}

// Seeded words the first round needs for `outputs` outputs (what sr_mt_refill computes by then).
static inline int sr_mt_words_for(int64_t outputs) {
  int64_t end = 8;
  while (end < outputs && end < SR_MT_N) end *= 2;
  return end - 1 < SR_MT_N - SR_MT_M ? (int)end + SR_MT_M : SR_MT_N;
}

#define SR_MT_MIX(a, b, c) ((c) ^ ((((a) & 0x80000000u) | ((b) & 0x7fffffffu)) >> 1) ^ (((b) & 1u) ? 0x9908b0dfu : 0u))

// Twist words [a, b) of the current round (words before a twisted already, the seeded state complete as
// far as they need it).
static inline void sr_mt_twist_words(uint32_t *mt, int a, int b) {
  int k = a;
  for (; k < b && k < SR_MT_N - SR_MT_M; k++) mt[k] = SR_MT_MIX(mt[k], mt[k + 1], mt[k + SR_MT_M]);
  for (; k < b && k < SR_MT_N - 1; k++) mt[k] = SR_MT_MIX(mt[k], mt[k + 1], mt[k + SR_MT_M - SR_MT_N]);
  if (k < b) mt[k] = SR_MT_MIX(mt[SR_MT_N - 1], mt[0], mt[SR_MT_M - 1]);
}

// Make the next outputs available: a whole round's twist, or in the first round after seeding the next
// words (8, then doubling) with just the seeded words they need. twist: sr_mt_twist_words or a form giving the
// same words (plan/synth_draw.c's eight at a time).
static inline void sr_mt_refill_by(sr_mt *r, void (*twist)(uint32_t *mt, int a, int b)) {
  uint32_t *mt = r->mt;
  if (r->mti == SR_MT_N) {
    twist(mt, 0, SR_MT_N);
    r->mti = 0;
    r->ready = SR_MT_N;
    return;
  }
  int end = r->ready + (r->ready < 8 ? 8 : r->ready);
  if (end > SR_MT_N) end = SR_MT_N;
  // Words below N - M read seeded word k + M; once past them every seeded word has been read or is next.
  int need = end - 1 < SR_MT_N - SR_MT_M ? end + SR_MT_M : SR_MT_N;
  for (; r->init < need; r->init++) mt[r->init] = 1812433253u * (mt[r->init - 1] ^ (mt[r->init - 1] >> 30)) + (uint32_t)r->init;
  twist(mt, r->ready, end);
  r->ready = end;
}

static inline void sr_mt_refill(sr_mt *r) { sr_mt_refill_by(r, sr_mt_twist_words); }

// The next 32-bit output.
static inline uint32_t sr_mt_next(sr_mt *r) {
  if (r->mti >= r->ready) sr_mt_refill(r);
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
