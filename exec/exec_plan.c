// exec_plan.c — read or build the plan an executor command runs, and its pattern (exec_plan.h).
#include "exec/exec_plan.h"

#include <stdio.h>
#include <string.h>

#include "traces/trace.h"

const cli_flag exec_plan_flags[] = {
    {"plan", "FILE", NULL, "run this plan file (sparsering plan -o) instead of the plan flags"},
    {"skip-empty-sends", NULL, NULL, "do not send KV shards no query of the receiver touches in that step"},
    {"fwd-runs", NULL, NULL, "the attention forward runs the tiles' forward form (scattered slashes as 64-key runs)"},
    {"index-build", "WHERE", "auto", "build the tile indices on the gpu (vertical-slash layers, CUDA), the cpu, or auto: the GPU where it can"},
    {"deterministic", NULL, NULL, "the GPU backward without float atomics: gradients repeat bit for bit (slower)"},
    {NULL, NULL, NULL, NULL},
};

int exec_plan_load(const cli_args *a, const char *layout, const char *schedule, const char *pattern_src, plan *p,
                   pattern *pat, sr_error *e) {
  memset(p, 0, sizeof *p);
  memset(pat, 0, sizeof *pat);
  const char *path = cli_get(a, "plan", NULL);
  int rc;
  if (path) {
    rc = plan_read(path, p, e);
  } else {
    // One entry of a list replaces its flag's value, as if given last on the command line.
    cli_args b = *a;
    if ((layout && cli_set(&b, "layout", layout, e)) || (schedule && cli_set(&b, "schedule", schedule, e)) ||
        (pattern_src && cli_set(&b, "pattern", pattern_src, e)))
      return e->code;
    // The executor's switches are part of the spec before the build (the simulator's cost reads them).
    plan_spec s;
    const char *field = NULL;
    if (plan_spec_from_flags(&b, &s, e)) return e->code;
    s.skip_empty_sends = cli_has(a, "skip-empty-sends");
    s.fwd_runs = cli_has(a, "fwd-runs");
    s.deterministic = cli_has(a, "deterministic");
    rc = plan_build_at(&s, p, &field, e);
    if (rc) plan_error_as_flag(e, field);
  }
  if (rc) return rc;
  if (cli_has(a, "skip-empty-sends")) p->spec.skip_empty_sends = 1;
  if (cli_has(a, "fwd-runs")) p->spec.fwd_runs = 1;
  if (cli_has(a, "deterministic")) p->spec.deterministic = 1;
  // traces/ reads "trace:PATH" and hands every other source to the planner's pattern_from_spec.
  if (pattern_source_load(p->spec.pattern, &p->model, p->layout.n_tokens, p->spec.seed, 0, pat, e)) {
    plan_free(p);
    return e->code;
  }
  return SR_OK;
}

int exec_moba_gate(const cli_args *a, int cuda, int *gate, sr_error *e) {
  const char *v = cli_get(a, "moba-gate", "auto");
  if (strcmp(v, "auto") == 0) *gate = cuda ? EXEC_GATE_AUTO : EXEC_GATE_HOST;
  else if (strcmp(v, "host") == 0) *gate = EXEC_GATE_HOST;
  else if (strcmp(v, "gpu") == 0) *gate = EXEC_GATE_GPU;
  else return sr_input_error(e, NULL, "--moba-gate", "'%s' is not one of auto, host, gpu", v);
  if (*gate == EXEC_GATE_GPU && !cuda)
    return sr_input_error(e, NULL, "--moba-gate", "gpu: the CPU backend gates on the host; use --backend cuda");
  return SR_OK;
}

int exec_index_build(const cli_args *a, dist_index_build *how, sr_error *e) {
  const char *v = cli_get(a, "index-build", "auto");
  if (strcmp(v, "auto") == 0) *how = DIST_INDEX_AUTO;
  else if (strcmp(v, "gpu") == 0) *how = DIST_INDEX_GPU;
  else if (strcmp(v, "cpu") == 0) *how = DIST_INDEX_CPU;
  else return sr_input_error(e, NULL, "--index-build", "'%s' is not one of auto, gpu, cpu", v);
  return SR_OK;
}
