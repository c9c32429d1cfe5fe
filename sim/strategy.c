// strategy.c — strategies and plans through the simulator (see strategy.h).
#include "sim/strategy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/work.h"
#include "traces/trace.h"

// ---------------------------------------------------------------------------------------------
// the study cache

#define CACHE_PATTERNS 4
#define CACHE_STORE_BYTES ((int64_t)1 << 30)

typedef struct {
  char spec[512];
  int64_t n_tokens;
  int layers, heads;
  uint64_t seed;
  pattern pat;
  int64_t last_use;
} cached_pattern;

struct sim_cache {
  cached_pattern pat[CACHE_PATTERNS];
  int n;
  int64_t clock;
  work_store *store;
};

int sim_cache_open(sim_cache **out, sr_error *e) {
  *out = calloc(1, sizeof **out);
  if (!*out) return sr_internal_error(e, 0, "sim: out of memory for the study cache");
  int rc = work_store_open(CACHE_STORE_BYTES, &(*out)->store, e);
  if (rc) {
    free(*out);
    *out = NULL;
  }
  return rc;
}

void sim_cache_close(sim_cache *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) pattern_free(&c->pat[i].pat);
  work_store_close(c->store);
  free(c);
}

// The pattern of plan p, from the cache or built into it (the least recently used one making room).
static int cache_pattern(sim_cache *c, const plan *p, const pattern **out, sr_error *e) {
  const char *spec = p->spec.pattern;
  int L = (int)p->model.num_layers, H = (int)p->model.num_heads;
  for (int i = 0; i < c->n; i++) {
    cached_pattern *x = &c->pat[i];
    if (!strcmp(x->spec, spec) && x->n_tokens == p->spec.seq && x->layers == L && x->heads == H &&
        x->seed == p->spec.seed) {
      x->last_use = ++c->clock;
      *out = &x->pat;
      return SR_OK;
    }
  }
  int slot = c->n < CACHE_PATTERNS ? c->n : 0;
  for (int i = 1; c->n == CACHE_PATTERNS && i < c->n; i++)
    if (c->pat[i].last_use < c->pat[slot].last_use) slot = i;
  cached_pattern *x = &c->pat[slot];
  if (slot < c->n) pattern_free(&x->pat);
  else c->n++;
  memset(x, 0, sizeof *x);
  int rc = sim_pattern_build(p, &x->pat, e);
  if (rc) {  // leave no half-built entry behind
    c->pat[slot] = c->pat[--c->n];
    memset(&c->pat[c->n], 0, sizeof c->pat[c->n]);
    return rc;
  }
  snprintf(x->spec, sizeof x->spec, "%s", spec);
  x->n_tokens = p->spec.seq;
  x->layers = L;
  x->heads = H;
  x->seed = p->spec.seed;
  x->last_use = ++c->clock;
  *out = &x->pat;
  return SR_OK;
}

int sim_plan_cached(const plan *p, const sim_options *o, sim_cache *c, sim_result *r, sim_timeline *tl, sr_error *e) {
  if (!c) return sim_plan(p, o, r, tl, e);
  const pattern *pat = NULL;
  int rc = cache_pattern(c, p, &pat, e);
  if (rc) return rc;
  return sim_run_shared(p, pat, o, c->store, r, tl, e);
}

// ---------------------------------------------------------------------------------------------
// plans and strategies

int sim_pattern_build(const plan *p, pattern *out, sr_error *e) {
  // traces/ resolves "trace:PATH" (a recorded step) and hands every other source to pattern_from_spec.
  return pattern_source_load(p->spec.pattern, &p->model, p->spec.seq, p->spec.seed, 0, out, e);
}

int sim_plan(const plan *p, const sim_options *o, sim_result *r, sim_timeline *tl, sr_error *e) {
  return sim_run(p, NULL, o, r, tl, e);  // the plan's pattern, drawn by sim_run (a few layers at a time where it can)
}

int sim_strategy(const strategy_study *s, const char *name, const sim_options *o, sim_result *r, sim_timeline *tl,
                 sr_error *e) {
  plan_spec spec = s->base;
  int rc = plan_spec_apply_strategy(&spec, name, e);
  if (rc) return rc;
  // AdaSpa's strategy keeps its search unless the study's pattern is an AdaSpa source too (a VS pattern run on
  // it would be another mtraining row)
  int adaspa_row = strncmp(spec.pattern, "adaspa", 6) == 0, adaspa_given = strncmp(s->sparse_pattern, "adaspa", 6) == 0;
  if (s->sparse_pattern[0] && strcmp(spec.pattern, "dense") != 0 && (!adaspa_row || adaspa_given))
    snprintf(spec.pattern, sizeof spec.pattern, "%s", s->sparse_pattern);
  plan p;
  const char *field = NULL;
  rc = plan_build_at(&spec, &p, &field, e);
  if (rc) {
    // The model, cluster and length are the study's: an error in them is the user's. Anything else
    // (a Ulysses degree that does not divide the heads, ...) means this strategy cannot run here.
    if (rc != SR_EINPUT || !field || !strcmp(field, "model") || !strcmp(field, "cluster") || !strcmp(field, "seq"))
      return rc;
    memset(r, 0, sizeof *r);
    snprintf(r->strategy, sizeof r->strategy, "%s", name);
    r->feasible = 0;
    snprintf(r->note, sizeof r->note, "%s", e->msg);
    sr_error_clear(e);
    return SR_OK;
  }
  rc = sim_plan_cached(&p, o, s->cache, r, tl, e);
  plan_free(&p);
  return rc;
}
