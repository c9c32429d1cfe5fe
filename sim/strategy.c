// strategy.c — strategies and plans through the simulator (see strategy.h).
#include "sim/strategy.h"

#include <stdio.h>
#include <string.h>

#include "traces/trace.h"

int sim_pattern_build(const plan *p, pattern *out, sr_error *e) {
  // traces/ resolves "trace:PATH" (a recorded step) and hands every other source to pattern_from_spec.
  return pattern_source_load(p->spec.pattern, &p->model, p->spec.seq, p->spec.seed, 0, out, e);
}

int sim_plan(const plan *p, const sim_options *o, sim_result *r, sim_timeline *tl, sr_error *e) {
  pattern pat;
  memset(&pat, 0, sizeof pat);
  int rc = sim_pattern_build(p, &pat, e);
  if (rc) return rc;
  rc = sim_run(p, &pat, o, r, tl, e);
  pattern_free(&pat);
  return rc;
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
  rc = sim_plan(&p, o, r, tl, e);
  plan_free(&p);
  return rc;
}
