// synth_internal.h — the seeding, scratch and sorting that every synthetic generator (synth.c, synth_fit.c)
// shares, so two generators draw the same way (not a public API; plan/synth.h is).
#ifndef SR_SYNTH_INTERNAL_H
#define SR_SYNTH_INTERNAL_H

#include <gsl/gsl_rng.h>
#include <stdint.h>

#include "plan/error.h"
#include "plan/pattern.h"
#include "plan/synth.h"

typedef struct {
  gsl_rng *r;
  uint8_t *mark;  // [n] scratch, all zero between uses
  int32_t *tmp;   // [n] scratch for sorting
  int64_t n;
} synth_ctx;

// splitmix64's finaliser: the hash every stream's seed comes from.
uint64_t synth_mix64(uint64_t x);
// Reseed r from a hash of four numbers (a head never depends on how many draws another head made).
void synth_reseed(gsl_rng *r, uint64_t a, uint64_t b, uint64_t c, uint64_t d);
// The stream key of head (layer, head) under o's seed.
uint64_t synth_head_key(const synth_opts *o, int layer, int head);
// Scratch for n tokens (a generator, its marks and a sort buffer).
int synth_ctx_init(synth_ctx *c, int64_t n, sr_error *e);
// Release it.
void synth_ctx_free(synth_ctx *c);
// Sort non-negative indices below c->n ascending (radix sort through c->tmp).
void synth_sort_indices(synth_ctx *c, int32_t *a, int64_t n);
// Free a head's arrays and zero it.
void synth_head_clear(head_pattern *h);

#endif
