// strategy.h — running the simulator on named strategies (the planner's table: dense-ring,
// zigzag-ring, striped-ring, ulysses, usp, fpdt, naive-sparse, mtraining, mtraining-zigzag,
// mtraining-flat, adaspa) and on plans: build the plan and its pattern, simulate, release.
#ifndef SR_STRATEGY_H
#define SR_STRATEGY_H

#include "plan/plan.h"
#include "sim/sim.h"

// The study's settings shared by every strategy: model, cluster, length, seed, recompute, ZeRO.
// sparse_pattern (may be "" for the planner's default) replaces the pattern of the strategies whose
// pattern is sparse (naive-sparse, mtraining*, adaspa), so every sparse strategy runs the same pattern; the adaspa
// strategy takes it only when it is an AdaSpa source (adaspa:, adaspa-online:) and keeps its search otherwise.
typedef struct sim_cache sim_cache;
typedef struct {
  plan_spec base;
  char sparse_pattern[512];
  sim_cache *cache;  // shared patterns and accounting (NULL: none; results do not change)
} strategy_study;

// What the simulations of a study share (whatif's strategies, a sweep's points): the patterns built,
// keyed by source string, model shape, length and seed (the last few kept), and the accounting store
// (sim/work.h), which keeps each distinct head once and the counts per (layout, layer). Results are
// bit-identical with and without it; only the time changes.
int sim_cache_open(sim_cache **out, sr_error *e);
// Release a cache (NULL is fine).
void sim_cache_close(sim_cache *c);
// sim_plan with the pattern and the accounting taken from the cache when it holds them (c may be NULL).
int sim_plan_cached(const plan *p, const sim_options *o, sim_cache *c, sim_result *r, sim_timeline *tl, sr_error *e);

// Build the pattern of a plan from its source string (plan.spec.pattern: pattern_spec.h's sources or
// "trace:PATH"; training step 0).
int sim_pattern_build(const plan *p, pattern *out, sr_error *e);
// Simulate a built plan on its own pattern (drawn by sim_run: a few layers at a time where the step allows it).
int sim_plan(const plan *p, const sim_options *o, sim_result *r, sim_timeline *tl, sr_error *e);
// Simulate strategy `name` of a study. A configuration the strategy cannot run (e.g. a Ulysses degree
// above the heads) gives r->feasible = 0 with the reason in r->note and returns SR_OK.
int sim_strategy(const strategy_study *s, const char *name, const sim_options *o, sim_result *r, sim_timeline *tl,
                 sr_error *e);

#endif
