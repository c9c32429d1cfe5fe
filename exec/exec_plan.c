// exec_plan.c — read or build the plan an executor command runs, and its pattern (exec_plan.h).
#include "exec/exec_plan.h"

#include <stdio.h>
#include <string.h>

#include "plan/util.h"
#include "traces/trace.h"

static int copy_flag(const cli_args *a, const char *key, char *out, size_t size, sr_error *e) {
  const char *v = cli_get(a, key, NULL);
  if (!v) return SR_OK;
  if (strlen(v) >= size) return sr_input_error(e, NULL, key, "'%s' is too long", v);
  snprintf(out, size, "%s", v);
  return SR_OK;
}

int exec_plan_load(const cli_args *a, const char *layout, const char *schedule, const char *pattern_src, plan *p,
                   pattern *pat, sr_error *e) {
  memset(p, 0, sizeof *p);
  memset(pat, 0, sizeof *pat);
  const char *path = cli_get(a, "plan", NULL);
  int rc;
  if (path) {
    rc = plan_read(path, p, e);
  } else {
    plan_spec s;
    plan_spec_defaults(&s);
    // A named strategy sets layout, schedule and pattern; explicit flags then override them.
    const char *strategy = cli_get(a, "strategy", NULL);
    if (strategy && plan_spec_apply_strategy(&s, strategy, e)) return e->code;
    int64_t inner, uly, seed;
    const char *seq = cli_get(a, "seq", NULL);
    if (!seq) return sr_input_error(e, NULL, "--seq", "required (or give --plan FILE)");
    if (sr_parse_tokens(seq, "--seq", &s.seq, e) || copy_flag(a, "model", s.model, sizeof s.model, e) ||
        copy_flag(a, "cluster", s.cluster, sizeof s.cluster, e) || copy_flag(a, "layout", s.layout, sizeof s.layout, e) ||
        copy_flag(a, "schedule", s.schedule, sizeof s.schedule, e) ||
        copy_flag(a, "pattern", s.pattern, sizeof s.pattern, e) ||
        cli_get_int(a, "inner", s.inner, 0, 1 << 20, &inner, e) ||
        cli_get_int(a, "ulysses", s.ulysses, 0, 1 << 20, &uly, e) ||
        cli_get_int(a, "seed", (int64_t)s.seed, 0, INT64_MAX, &seed, e))
      return e->code;
    s.inner = (int)inner, s.ulysses = (int)uly, s.seed = (uint64_t)seed;
    if (layout) snprintf(s.layout, sizeof s.layout, "%s", layout);
    if (schedule) snprintf(s.schedule, sizeof s.schedule, "%s", schedule);
    if (pattern_src) snprintf(s.pattern, sizeof s.pattern, "%s", pattern_src);
    if (cli_has(a, "skip-empty-sends")) s.skip_empty_sends = 1;
    if (cli_has(a, "fwd-runs")) s.fwd_runs = 1;
    if (!strategy) snprintf(s.strategy, sizeof s.strategy, "custom");
    rc = plan_build(&s, p, e);
  }
  if (rc) return rc;
  if (cli_has(a, "skip-empty-sends")) p->spec.skip_empty_sends = 1;
  if (cli_has(a, "fwd-runs")) p->spec.fwd_runs = 1;
  // traces/ reads "trace:PATH" and hands every other source to the planner's pattern_from_spec.
  if (pattern_source_load(p->spec.pattern, &p->model, p->layout.n_tokens, p->spec.seed, 0, pat, e)) {
    plan_free(p);
    return e->code;
  }
  return SR_OK;
}
