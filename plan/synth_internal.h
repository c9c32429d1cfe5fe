// synth_internal.h — the seeding, per-thread scratch, marks and sorting that every synthetic generator
// (synth.c, synth_fit.c) shares, so two generators draw the same way (not a public API; plan/synth.h is).
//
// Draws come from MT19937 with GSL's conventions (plan/rng.h), reseeded per (layer, head, index group,
// drift epoch) from a splitmix64 hash, so a head never depends on another head's draws and heads may be
// drawn in parallel, one context per thread (synth_pool, plan/parallel.h).
#ifndef SR_SYNTH_INTERNAL_H
#define SR_SYNTH_INTERNAL_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/pattern.h"
#include "plan/rng.h"
#include "plan/synth.h"

// A head's vertical candidates as its calibration draw drew them, group by group, with each group's
// generator where the candidates end: the final draw of the same head (same seeds) reads them instead of
// drawing them again. A group's stream depends on its seed only, not on its quota or on the marks.
typedef struct {
  int32_t *x;         // [cap] candidates in draw order, used of them filled
  int64_t used, cap;
  int64_t *first;     // [groups + 1] group g's candidates are x[first[g], first[g + 1])
  sr_mt *mt;          // [groups + SR_MT_LANES] group g's generator, just past its candidates
  uint8_t *seeded;    // [groups] whether group g's generator was seeded (its batch drew)
  int groups;         // groups recorded (0: nothing to replay)
  int64_t groups_cap; // groups the arrays hold
} synth_vert_cache;

// One thread's generator state and scratch.
typedef struct {
  sr_mt r;
  sr_mt lanes[SR_MT_LANES];  // the index groups' generators, seeded SR_MT_LANES at a time
  uint64_t *bits;  // [n / 64 + 2] marks of drawn indices, all zero between uses
  int32_t *tmp;    // [n + 1] scratch for sorting
  int64_t n;
  synth_vert_cache vc;  // synth_vs_topp's calibration draw, replayed by its final draw
} synth_ctx;

// A context per thread (sr_threads, parallel.h): heads are independent, each drawn from its own seeds, so
// which thread draws a head changes nothing.
typedef struct {
  synth_ctx *c;
  int n;
} synth_pool;

// splitmix64's finaliser (Steele, Lea, Flood 2014): the hash every stream's seed comes from.
static inline uint64_t synth_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Reseed r from a hash of four numbers, as gsl_rng_set seeded GSL's mt19937 (the patterns are those GSL drew).
static inline uint32_t synth_seed32(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t h = synth_mix64(a ^ synth_mix64(b ^ synth_mix64(c ^ synth_mix64(d))));
  return (uint32_t)(h & 0xffffffffu);
}
static inline void synth_reseed(sr_mt *r, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  sr_mt_seed(r, synth_seed32(a, b, c, d));
}

// Candidates x[0 .. m) of a vertical group from its stream r (two outputs each: floor(n u^3) three times in four,
// else floor(n u), clamped to [0, n)), each one's word of the marks `bits` fetched (plan/synth_draw.c).
void synth_verticals(sr_mt *r, int64_t n, int32_t *x, int64_t m, const uint64_t *bits);
// out[i] = i for i < n.
void synth_iota(int32_t *out, int64_t n);
// The set bits of bits[w0 .. words) at or above n_struct, ascending, into out[n_struct ..) (the count - n_struct of
// them there are), their words cleared.
void synth_take_bits(uint64_t *bits, int64_t w0, int64_t words, int64_t n_struct, int32_t *out, int64_t count);

// Mark x in bits; returns 1 when it was marked already.
static inline int synth_mark(uint64_t *bits, int64_t x) {
  uint64_t m = 1ull << (x & 63), *w = &bits[x >> 6];
  if (*w & m) return 1;
  *w |= m;
  return 0;
}

// Head (layer, head) of source s into h, whose arrays have room for n_tokens indices each (the caller's: h holds
// them, its kind and counts set), drawn with scratch c (of n_tokens tokens).
void synth_vs_source_draw(const synth_vs_source *s, synth_ctx *c, int layer, int head, head_pattern *h);
// The stream key of head (layer, head) under o's seed.
uint64_t synth_head_key(const synth_opts *o, int layer, int head);
// Scratch for n tokens (marks all clear and a sort buffer; the generator is seeded before each use).
int synth_ctx_init(synth_ctx *c, int64_t n, sr_error *e);
// Release it.
void synth_ctx_free(synth_ctx *c);
// One context per thread for `items` heads of n_tokens tokens (at most sr_threads(), at most items).
int synth_pool_open(synth_pool *p, int64_t n_tokens, int items, sr_error *e);
// Release the pool's contexts.
void synth_pool_close(synth_pool *p);
// Sort non-negative indices below c->n ascending (radix sort through c->tmp).
void synth_sort_indices(synth_ctx *c, int32_t *a, int64_t n);
// The `count` marked indices of out (out[0, n_struct) is [0, n_struct), the rest in any order) sorted
// ascending into out, clearing every mark.
void synth_take_sorted(synth_ctx *c, int32_t *out, int64_t count, int64_t n_struct);
// synth_vs_topp as it was before its final draw reused the calibration draw's verticals (both draws
// drawn in full), kept so that a test can show that the reuse changes no index.
int synth_vs_topp_redrawn(pattern *p, double mass, const synth_opts *o, sr_error *e);
// Free a head's arrays and zero it.
void synth_head_clear(head_pattern *h);

#endif
